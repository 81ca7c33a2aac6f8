package oomkill

import (
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestWorstOn(t *testing.T) {
	n := mustNode(t, testNode("worker-1", 16*Gi, 15*Gi), nil, DefaultEstimate)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want int64
	}{
		{"limit", burstable("api", 512*Mi, 6*Gi), 6 * Gi},
		{"estimate of 10 % of allocatable", bestEffort("batch"), 15 * Gi / 10},
		{"two containers", testPod("default", "two", ctr{name: "a", req: Gi, lim: 2 * Gi}, ctr{name: "b", req: 3 * Gi}), 2*Gi + 6*Gi},
		{"no containers", testPod("default", "empty"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := NewIncoming(tc.pod)
			if got := in.WorstOn(n); got != tc.want {
				t.Errorf("WorstOn = %d, want %d", got, tc.want)
			}
			if got := n.ExplainWith(in).TotalWorst - n.TotalWorst(); got != tc.want {
				t.Errorf("ExplainWith adds %d, WorstOn says %d", got, tc.want)
			}
		})
	}
	if got := (*Incoming)(nil).WorstOn(n); got != 0 {
		t.Errorf("nil Incoming: %d", got)
	}
}

func TestWorstOnAllocationFree(t *testing.T) {
	n, _ := benchNode(110)
	in := NewIncoming(benchIncoming())
	in.WorstOn(n)
	if allocs := testing.AllocsPerRun(100, func() { in.WorstOn(n) }); allocs != 0 {
		t.Errorf("WorstOn allocates %v times", allocs)
	}
}

func TestPPM(t *testing.T) {
	for _, tc := range []struct{ part, whole, want int64 }{
		{0, 0, 0},
		{0, 10, 0},
		{-5, 10, 0},
		{1, 0, 1_000_000},
		{1, 3, 333_333},
		{3, 4, 750_000},
		{8 * Gi, 6 * Gi, 1_000_000},
		{math.MaxInt64 - 1, math.MaxInt64, 999_999},
		{math.MaxInt64 / 2, math.MaxInt64, 499_999},
	} {
		if got := PPM(tc.part, tc.whole); got != tc.want {
			t.Errorf("PPM(%d, %d) = %d, want %d", tc.part, tc.whole, got, tc.want)
		}
	}
}
