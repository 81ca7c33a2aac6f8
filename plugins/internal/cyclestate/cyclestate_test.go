package cyclestate

import (
	"testing"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

type data struct{ n int }

func (d *data) Clone() fwk.StateData { return &data{n: d.n} }

// Reads in the cycle written to get the data written; reads in a clone or
// another cycle get what that state holds, never the remembered data.
func TestLast(t *testing.T) {
	var l Last[*data]
	first := framework.NewCycleState()
	l.Write(first, "k", &data{n: 1})
	if d, ok := l.Read(first, "k"); !ok || d.n != 1 {
		t.Fatalf("same cycle: %v, %v", d, ok)
	}
	if _, ok := l.Read(first, "other"); ok {
		t.Fatal("another key of the same cycle found the remembered data")
	}
	clone := first.Clone()
	clone.Write("k", &data{n: 2})
	if d, ok := l.Read(clone, "k"); !ok || d.n != 2 {
		t.Fatalf("clone: %v, %v; want the clone's data", d, ok)
	}
	second := framework.NewCycleState()
	if _, ok := l.Read(second, "k"); ok {
		t.Fatal("a new cycle found the last cycle's data")
	}
	second.Write("k", &data{n: 3})
	if d, ok := l.Read(second, "k"); !ok || d.n != 3 {
		t.Fatalf("a cycle written to directly: %v, %v", d, ok)
	}
	if _, ok := l.Read(nil, "k"); ok {
		t.Fatal("nil state found data")
	}
}

// A read in the remembered cycle does not allocate.
func BenchmarkReadRemembered(b *testing.B) {
	var l Last[*data]
	state := framework.NewCycleState()
	l.Write(state, "k", &data{n: 1})
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := l.Read(state, "k"); !ok {
			b.Fatal("not found")
		}
	}
}
