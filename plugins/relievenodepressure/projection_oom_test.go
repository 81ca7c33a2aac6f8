package relievenodepressure

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

func TestOOMTriggerEvictsUntilShortfallIsUnderTarget(t *testing.T) {
	// Five pods limited to 3Gi: 15Gi worst case on 10Gi, a shortfall of 50 %.
	// The default target of 15 % takes two evictions (12Gi: 20 %; 9Gi: 0).
	// The pods declare no PIDs: they are evicted for memory alone.
	n1, n2 := memoryNode("n1"), spareNode("n2")
	var pods []*v1.Pod
	for i, name := range []string{"m1", "m2", "m3", "m4", "m5"} {
		pods = append(pods, testPod(name, "n1", pids(0), memoryLimit(3<<30), restarts(int32(5-i))))
	}
	// By default only the PID trigger runs: this node, at 50 % PIDs, stays.
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, pods)...)
	if got := e.run(t, n1, n2); len(got) != 0 {
		t.Fatalf("without oom in the args, evicted %v for memory", got)
	}
	e = newEnv(t, setup{args: RelieveNodePressureArgs{OOM: &OOMTrigger{}}}, objects([]*v1.Node{n1, n2}, pods)...)
	if got, want := e.run(t, n1, n2), []string{"m1", "m2"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if r := e.reasons["m1"]; !strings.Contains(r, "RelieveNodePressure: node n1 OOM shortfall 50.0% of memory > threshold 20%") {
		t.Fatalf("eviction reason %q does not name the OOM trigger", r)
	}
}

// TestOOMTriggerCountsWhatPodsHold: four BestEffort pods are estimated at
// 10 % of the node's 10Gi each (4Gi in all: no shortfall), but the node's
// memory sample finds each holding 3.5Gi. The model is OOMRisk's: a
// container's worst case is at least what it holds, 14Gi in all, a 40 %
// shortfall over the 20 % threshold; one eviction brings it to 5 %, under
// the 15 % target. Without the sample nothing is evicted.
func TestOOMTriggerCountsWhatPodsHold(t *testing.T) {
	var pods []*v1.Pod
	var held []sample.PodFigure
	for i, name := range []string{"b1", "b2", "b3", "b4"} {
		p := testPod(name, "n1", pids(0), restarts(int32(4-i)))
		p.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
		pods = append(pods, p)
		held = append(held, sample.PodFigure{UID: p.UID, Value: 3584 << 20})
	}
	args := RelieveNodePressureArgs{OOM: &OOMTrigger{}}
	n1, n2 := memoryNode("n1"), spareNode("n2")
	e := newEnv(t, setup{args: args}, objects([]*v1.Node{n1, n2}, pods)...)
	if got := e.run(t, n1, n2); len(got) != 0 {
		t.Fatalf("without a memory sample, evicted %v", got)
	}
	measured := memoryNode("n1")
	maps.Copy(measured.Annotations, memstats.NodeStats{Used: 14 << 30, SampledAt: now.Add(-time.Minute), Pods: memstats.PodListFormat.New(held)}.Annotations())
	e = newEnv(t, setup{args: args}, objects([]*v1.Node{measured, n2}, pods)...)
	if got, want := e.run(t, measured, n2), []string{"b1"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}
