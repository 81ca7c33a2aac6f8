package nodeagent

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

func TestThreshold(t *testing.T) {
	tests := []struct {
		p     Policy
		alloc int64
		want  int64
	}{
		{Policy{HysteresisPIDs: 500, HysteresisPercent: 2}, 32768 - 1000, 636}, // 2% of 31768 = 635.36, rounded up
		{Policy{HysteresisPIDs: 500, HysteresisPercent: 2}, 20000, 500},
		{Policy{HysteresisPIDs: 500, HysteresisPercent: 2}, 4194304, 83887},
		{Policy{HysteresisPIDs: 500, HysteresisPercent: 2}, 0, 500},
		{Policy{HysteresisPIDs: 0, HysteresisPercent: 0}, 100000, 0},
		{Policy{HysteresisPIDs: 0, HysteresisPercent: 100}, math.MaxInt64, math.MaxInt64},
		{Policy{HysteresisPIDs: 7, HysteresisPercent: 50}, -10, 7},
	}
	for _, tc := range tests {
		if got := tc.p.Threshold(tc.alloc); got != tc.want {
			t.Errorf("%+v.Threshold(%d) = %d, want %d", tc.p, tc.alloc, got, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	p := Policy{HysteresisPIDs: 500, HysteresisPercent: 2, MaxInterval: 5 * time.Minute}
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	last := &pidstats.NodeStats{Capacity: 32768, Reserved: 1000, Used: 5000, SampledAt: t0}
	due := t0.Add(5 * time.Minute)
	at := func(d time.Duration, used int64) pidstats.NodeStats {
		return pidstats.NodeStats{Capacity: 32768, Reserved: 1000, Used: used, SampledAt: t0.Add(d)}
	}
	tests := []struct {
		name       string
		last       *pidstats.NodeStats
		cur        pidstats.NodeStats
		now        time.Time
		want       bool
		wantReason string
	}{
		{name: "first sample", last: nil, cur: at(0, 5000), now: t0, want: true, wantReason: "first"},
		{name: "no change", last: last, cur: at(10*time.Second, 5000), now: t0.Add(10 * time.Second), want: false},
		{name: "up by exactly the threshold", last: last, cur: at(10*time.Second, 5636), now: t0.Add(10 * time.Second), want: false},
		{name: "up past the threshold", last: last, cur: at(10*time.Second, 5637), now: t0.Add(10 * time.Second), want: true, wantReason: "moved by 637"},
		{name: "down past the threshold", last: last, cur: at(10*time.Second, 4363), now: t0.Add(10 * time.Second), want: true, wantReason: "moved by 637"},
		{name: "down within the threshold", last: last, cur: at(10*time.Second, 4364), now: t0.Add(10 * time.Second), want: false},
		{name: "capacity changed", last: last,
			cur: pidstats.NodeStats{Capacity: 65536, Reserved: 1000, Used: 5000, SampledAt: t0.Add(10 * time.Second)},
			now: t0.Add(10 * time.Second), want: true, wantReason: "capacity"},
		{name: "reserved changed", last: last,
			cur: pidstats.NodeStats{Capacity: 32768, Reserved: 1001, Used: 5000, SampledAt: t0.Add(10 * time.Second)},
			now: t0.Add(10 * time.Second), want: true, wantReason: "reserved"},
		{name: "just before due", last: last, cur: at(5*time.Minute-time.Second, 5001), now: due.Add(-time.Second), want: false},
		{name: "due", last: last, cur: at(5*time.Minute, 5001), now: due, want: true, wantReason: "max interval"},
		{name: "the written sample is never rewritten", last: last, cur: *last, now: t0.Add(time.Hour), want: false, wantReason: "already written"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := p.Decide(tc.last, due, tc.cur, tc.now)
			if got != tc.want {
				t.Errorf("Decide = %v (%s), want %v", got, reason, tc.want)
			}
			if !strings.Contains(reason, tc.wantReason) {
				t.Errorf("reason %q, want it to contain %q", reason, tc.wantReason)
			}
		})
	}
}
