package oomrisk

import (
	"math"
	"testing"

	"github.com/headroom-k8s/headroom/pkg/oomkill"
)

func TestStrategy(t *testing.T) {
	const gi = int64(1) << 30
	for _, tc := range []struct {
		name       string
		own, coll  int64
		a          oomkill.Assessment
		podWorst   int64
		cost, want int64
	}{
		{"nothing at risk", 3, 1, oomkill.Assessment{}, gi, 0, 100},
		{"pod doomed", 3, 1, oomkill.Assessment{RiskPPM: 1_000_000}, gi, 750_000, 25},
		{"half the pod", 3, 1, oomkill.Assessment{RiskPPM: 500_000}, gi, 375_000, 63},
		{"collateral of half the pod", 3, 1, oomkill.Assessment{CollateralBytes: gi / 2}, gi, 125_000, 88},
		{"collateral capped at the pod's size", 3, 1, oomkill.Assessment{CollateralBytes: 8 * gi}, gi, 250_000, 75},
		{"everything", 3, 1, oomkill.Assessment{RiskPPM: 1_000_000, CollateralBytes: 8 * gi}, gi, 1_000_000, 0},
		{"below one percent costs no point", 1, 0, oomkill.Assessment{RiskPPM: 9_999}, gi, 9_999, 100},
		{"one percent costs one point", 1, 0, oomkill.Assessment{RiskPPM: 10_000}, gi, 10_000, 99},
		{"collateral of a pod without worst case", 0, 1, oomkill.Assessment{CollateralBytes: 1}, 0, 1_000_000, 0},
		{"extreme bytes and weights", 1000, 1000, oomkill.Assessment{RiskPPM: 1_000_000, CollateralBytes: math.MaxInt64}, math.MaxInt64 - 1, 1_000_000, 0},
		{"out-of-range risk clamped", 1000, 0, oomkill.Assessment{RiskPPM: math.MaxInt64}, gi, 1_000_000, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			score, cost := strategy{ownRiskWeight: tc.own, collateralWeight: tc.coll}.score(tc.a, tc.podWorst)
			if score != tc.want || cost != tc.cost {
				t.Errorf("score, cost = %d, %d; want %d, %d", score, cost, tc.want, tc.cost)
			}
		})
	}
}
