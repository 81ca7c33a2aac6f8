package integration

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// TestOOMRiskPrefersTheNodeWhosePodsUseLess runs headroom-scheduler with the
// shipped OOMRisk-only profile on two kwok nodes of 16Gi that hold the same
// pods, three Burstable pods of 1Gi request and 4Gi limit each: declared
// alike. Their memory samples differ as the node agent would write them: on
// node-a the pods hold 3.9Gi each and the node's working set is 15.5Gi, on
// node-b 512Mi each and 3Gi. A 1Gi/4Gi pod must land on node-b, and the
// scheduler's -v=4 log must show why: on node-a the pod would take the
// working set 512Mi past allocatable and put a pod already there at risk
// (score 88, as plugins/oomrisk's unit test and README reckon), node-b
func TestOOMRiskPrefersTheNodeWhosePodsUseLess(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	pods := cp.Client.CoreV1().Pods(metav1.NamespaceDefault)
	figures := map[string]struct{ node, pod int64 }{
		"node-a": {node: 15*gibibyte + 512*mebibyte, pod: 3993 * mebibyte},
		"node-b": {node: 3 * gibibyte, pod: 512 * mebibyte},
	}
	held := map[string][]sample.PodFigure{}
	for name := range figures {
		if _, err := cp.CreateNode(ctx, name, resources("4", "16Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
		for _, suffix := range []string{"-1", "-2", "-3"} {
			p := newPod(name+suffix, "", nil, memory("1Gi"), memory("4Gi"))
			p.Spec.NodeName = name
			created, err := pods.Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			held[name] = append(held[name], sample.PodFigure{UID: created.UID, Value: figures[name].pod})
		}
	}
	for name := range figures {
		for _, suffix := range []string{"-1", "-2", "-3"} {
			waitRunning(ctx, t, cp, name+suffix)
		}
	}
	// The sample is taken after the pods started, in a later second.
	time.Sleep(1100 * time.Millisecond)
	at := time.Now()
	for name, f := range figures {
		s := memstats.NodeStats{Used: f.node, SampledAt: at, Pods: memstats.PodListFormat.New(held[name])}
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": s.Annotations()}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cp.Client.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	sched, err := cp.StartScheduler(ctx, repoFile(t, "manifests/samples/oomrisk-scheduler-config.yaml"), "-v=4")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, newPod("api", "headroom-oomrisk", nil, memory("1Gi"), memory("4Gi")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, "api"); node != "node-b" {
		t.Errorf("pod bound to %s, want node-b, whose pods use less", node)
	}
	for node, score := range map[string]string{"node-a": "88", "node-b": "100"} {
		re := regexp.MustCompile(`"OOMRisk score" .*pod="default/api" node="` + node + `" .* score=` + score + `\b`)
		waitLog(ctx, t, sched, re)
	}
	if log := readLog(t, sched); strings.Contains(log, "invalid memory annotation") {
		t.Errorf("the scheduler ignored a memory annotation:\n%s", grepLines(log, "memory annotation"))
	}
}

const (
	mebibyte = int64(1) << 20
	gibibyte = int64(1) << 30
)
