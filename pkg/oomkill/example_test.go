package oomkill

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestWorkedExample pins every figure of the example in doc.go.
func TestWorkedExample(t *testing.T) {
	n := mustNode(t, testNode("worker-1", 16*Gi, 15*Gi), []*corev1.Pod{
		bestEffort("batch"),
		burstable("web", 1*Gi, 8*Gi),
		guaranteed("db", 4*Gi),
	}, DefaultEstimate)
	in := NewIncoming(burstable("api", 512*Mi, 6*Gi))

	type row struct {
		pod           string
		adj           int
		worst, points int64
		atRisk        bool
	}
	check := func(order []Victim, want []row) {
		t.Helper()
		if len(order) != len(want) {
			t.Fatalf("%d containers, want %d", len(order), len(want))
		}
		for i, w := range want {
			v := order[i]
			if v.Pod != w.pod || v.Adj != w.adj || v.Worst != w.worst || v.Points != w.points || v.AtRisk != w.atRisk {
				t.Errorf("#%d = %s adj %d worst %d points %d at risk %v, want %+v", i, v.Pod, v.Adj, v.Worst, v.Points, v.AtRisk, w)
			}
		}
	}
	check(n.KillOrder(), []row{
		{"web", 938, 8589934592, 24704651886, false},
		{"batch", 1000, 1610612736, 18790481920, false},
		{"db", -997, 4294967296, -12833362280, false},
	})
	if n.TotalWorst() != 14495514624 || n.Shortfall() != 0 || n.AtRiskBytes() != 0 {
		t.Errorf("total %d, shortfall %d, at risk %d", n.TotalWorst(), n.Shortfall(), n.AtRiskBytes())
	}

	want := Assessment{ShortfallBefore: 0, ShortfallAfter: 4831838208, RiskPPM: 0, CollateralBytes: 8589934592, Rank: 1}
	if got := n.Assess(in); got != want {
		t.Errorf("Assess = %+v, want %+v", got, want)
	}
	check(n.ExplainWith(in).Order, []row{
		{"web", 938, 8589934592, 24704651886, true},
		{"api", 969, 6442450944, 23089744183, false},
		{"batch", 1000, 1610612736, 18790481920, false},
		{"db", -997, 4294967296, -12833362280, false},
	})
}
