package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
)

// TestRelieveNodePressureEventsDoNotStorm runs headroom-descheduler as the
// shipped Deployment does (the shipped policy, --descheduling-interval=1s)
// for about 20 s on an unrelievable node with a malformed delete-priority
// on one of its pods: every run finds both again and logs them, and the API
// server holds one Event per object and reason.
func TestRelieveNodePressureEventsDoNotStorm(t *testing.T) {
	cp, ctx := rnpStart(t)
	c := cp.Client
	ns := metav1.NamespaceDefault
	webPods := rnpUnrelievableNode(ctx, t, cp, map[string]string{rnpDeletePriority: "high"})
	rnpFirstSample(ctx, t, cp, rnpNode)

	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, repoFile(t, "manifests/descheduler/policy.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := cp.StartProcessAs("headroom-descheduler-every-second", "headroom-descheduler",
		"--policy-config-file", policy,
		"--kubeconfig", shippedIdentity(ctx, t, cp, "headroom-descheduler"),
		"--descheduling-interval", "1s",
		"--secure-port", "0",
		"--v", "2",
	)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Second)
	p.Stop(30 * time.Second)
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(data)
	if evicted := rnpEvicted(log); len(evicted) != 0 {
		t.Fatalf("evicted %v, want none\n%s", evicted, rnpPluginLines(log))
	}
	// Every run logs what it found.
	runs := strings.Count(log, `"Warning: node cannot be relieved"`)
	priorities := strings.Count(log, `"Warning: malformed pod annotation"`)
	if runs < 10 || priorities < runs {
		t.Fatalf("%d runs logged the node unrelievable and %d the malformed annotation in 20 s at one a second, want at least 10 each\n%s",
			runs, priorities, rnpPluginLines(log))
	}

	list, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]corev1.Event{}
	for _, ev := range list.Items {
		if ev.ReportingController == relievenodepressure.EventReportingController {
			k := fmt.Sprintf("%s/%s/%s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason)
			got[k] = append(got[k], ev)
		}
	}
	want := []string{"Node/" + rnpNode + "/" + relievenodepressure.ReasonNodePressureUnrelievable,
		"Pod/" + webPods[0].Name + "/" + relievenodepressure.ReasonMalformedDeletePriority}
	for _, k := range want {
		if len(got[k]) != 1 {
			t.Errorf("%s: %d Event objects after %d runs, want 1", k, len(got[k]), runs)
		}
	}
	if len(got) != len(want) {
		t.Errorf("Events for %d (object, reason) pairs, want %d", len(got), len(want))
	}
	if t.Failed() {
		for _, ev := range list.Items {
			t.Logf("Event %s/%s %s by %q (source %q) count %d: %s", ev.InvolvedObject.Kind, ev.InvolvedObject.Name, ev.Reason, ev.ReportingController, ev.Source.Component, ev.Count, ev.Message)
		}
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "Event") {
				t.Log(line)
			}
		}
	}
	for k, evs := range got {
		t.Logf("%s: %d Event object(s), count %d, after %d runs", k, len(evs), evs[0].Count, runs)
	}
}
