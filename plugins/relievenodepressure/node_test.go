package relievenodepressure

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

func TestUnrelievableNodeEvictsNothingAndSaysWhy(t *testing.T) {
	RegisterMetrics()
	// The DaemonSet pod holds the PIDs and is the kubelet's first victim,
	// which the evictor keeps: the walk ends there (three small pods could
	// not make up for it anyway).
	hog := testPod("hog", "n1", ownedByDaemonSet)
	var pods = []*v1.Pod{hog}
	usage := map[*v1.Pod]int64{hog: 3000}
	for i := range 3 {
		p := testPod("small-"+string(rune('a'+i)), "n1")
		pods = append(pods, p)
		usage[p] = 100
	}
	n1 := listed(pidNode("n1", 10000, 9900), usage)
	before := nodeCount(t, ResultUnrelievable)
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	for run := range 3 {
		if got := e.run(t, n1, spareNode("n2")); len(got) != 0 {
			t.Fatalf("run %d evicted %v, want none", run+1, got)
		}
	}
	w := e.warningEvents()
	if len(w) != 3 {
		t.Fatalf("Warning Events %q, want one per run", w)
	}
	for _, want := range []string{"Warning " + ReasonNodePressureUnrelievable + " ",
		"the pod the kubelet would evict next, default/hog, cannot be evicted (the evictor's filter keeps it",
		"(PIDs 9900/10000 used (99.0%) > threshold 95%); nothing evicted.",
		"default/hog (3000 PIDs): the evictor's filter keeps it",
		"default/small-a (100 PIDs): ranked after default/hog, which cannot be evicted: not the pressure's cause"} {
		if !strings.Contains(w[0], want) {
			t.Errorf("Warning Event %q does not contain %q", w[0], want)
		}
	}
	if got := nodeCount(t, ResultUnrelievable) - before; got != 3 {
		t.Errorf("%s counted %v unrelievable nodes, want 3", "headroom_relieve_node_pressure_nodes_total", got)
	}
}
