package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/headroom-k8s/headroom/test/controlplane"
)

// TestSecondarySchedulerBindsOnlyItsPods runs the built headroom-scheduler
// with the shipped profile: it binds pods that name it onto kwok nodes and
// leaves pods that name another scheduler alone.
func TestSecondarySchedulerBindsOnlyItsPods(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	for _, name := range []string{"node-a", "node-b"} {
		if _, err := cp.CreateNode(ctx, name, resources("4", "16Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cp.StartScheduler(ctx, repoFile(t, "manifests/scheduler/scheduler-config.yaml")); err != nil {
		t.Fatal(err)
	}

	pods := cp.Client.CoreV1().Pods(metav1.NamespaceDefault)
	// Created first, so the scheduler has seen it before it binds the next.
	if _, err := pods.Create(ctx, newPod("other", "some-other-scheduler", nil, nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mine-1", "mine-2", "mine-3"} {
		if _, err := pods.Create(ctx, newPod(name, "headroom-scheduler", nil, nil, nil), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"mine-1", "mine-2", "mine-3"} {
		node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, name)
		if !strings.HasPrefix(node, "node-") {
			t.Errorf("%s bound to %q, want a kwok node", name, node)
		}
	}
	// The scheduler has processed its queue past the other pod's creation.
	other, err := pods.Get(ctx, "other", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if other.Spec.NodeName != "" {
		t.Errorf("pod naming another scheduler was bound to %s", other.Spec.NodeName)
	}
	events, err := cp.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=mine-1"})
	if err != nil {
		t.Fatal(err)
	}
	var scheduledBy string
	for _, e := range events.Items {
		if e.Reason == "Scheduled" {
			scheduledBy = e.ReportingController
		}
	}
	if scheduledBy != "headroom-scheduler" {
		t.Errorf("Scheduled event of mine-1 reported by %q, want headroom-scheduler", scheduledBy)
	}
}
