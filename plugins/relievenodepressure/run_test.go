package relievenodepressure

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/descheduler/evictions"
)

// On n1 (capacity 10000, 9700 used: 97 % > 95 %) every pod frees 300 PIDs
// unless it says otherwise; reaching the default target of 90 % takes three.

func TestPerNodeLimitMovesOnToTheNextNode(t *testing.T) {
	n1, n2, n3 := pidNode("n1", 10000, 9700), pidNode("n2", 10000, 9700), spareNode("n3")
	pods := append(hotNodePods("n1", 4), hotNodePods("n2", 4)...)
	e := newEnv(t, setup{evictions: evictions.NewOptions().WithMaxPodsToEvictPerNode(ptr.To[uint](1))},
		objects([]*v1.Node{n1, n2, n3}, pods)...)
	if got, want := e.run(t, n1, n2, n3), []string{"n1-a", "n2-a"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func TestTotalLimitStopsEverything(t *testing.T) {
	n1, n2, n3 := pidNode("n1", 10000, 9700), pidNode("n2", 10000, 9700), spareNode("n3")
	pods := append(hotNodePods("n1", 4), hotNodePods("n2", 4)...)
	e := newEnv(t, setup{evictions: evictions.NewOptions().WithMaxPodsToEvictTotal(ptr.To[uint](2))},
		objects([]*v1.Node{n1, n2, n3}, pods)...)
	if got, want := e.run(t, n1, n2, n3), []string{"n1-a", "n1-b"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if e.evictor.TotalEvicted() != 2 {
		t.Fatalf("evictor counted %d evictions, want 2", e.evictor.TotalEvicted())
	}
}
