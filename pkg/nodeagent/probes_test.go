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
		h     Hysteresis
		alloc int64
		want  int64
	}{
		{Hysteresis{PIDs: 500, Percent: 2}, 32768 - 1000, 636}, // 2% of 31768 = 635.36, rounded up
		{Hysteresis{PIDs: 500, Percent: 2}, 20000, 500},
		{Hysteresis{PIDs: 500, Percent: 2}, 4194304, 83887},
		{Hysteresis{PIDs: 500, Percent: 2}, 0, 500},
		{Hysteresis{PIDs: 0, Percent: 0}, 100000, 0},
		{Hysteresis{PIDs: 0, Percent: 100}, math.MaxInt64, math.MaxInt64},
		{Hysteresis{PIDs: 7, Percent: 50}, -10, 7},
	}
	for _, tc := range tests {
		if got := tc.h.Threshold(tc.alloc); got != tc.want {
			t.Errorf("%+v.Threshold(%d) = %d, want %d", tc.h, tc.alloc, got, tc.want)
		}
	}
}

func TestPIDSampleChanged(t *testing.T) {
	h := Hysteresis{PIDs: 500, Percent: 2}
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	mk := func(capacity, reserved, used int64) pidSample {
		return pidSample{stats: pidstats.NodeStats{Capacity: capacity, Reserved: reserved, Used: used, SampledAt: t0}, hysteresis: h}
	}
	last := mk(32768, 1000, 5000)
	tests := []struct {
		name       string
		cur        pidSample
		want       bool
		wantReason string
	}{
		{"no change", mk(32768, 1000, 5000), false, ""},
		{"up by exactly the threshold", mk(32768, 1000, 5636), false, ""},
		{"up past the threshold", mk(32768, 1000, 5637), true, "moved by 637"},
		{"down past the threshold", mk(32768, 1000, 4363), true, "moved by 637"},
		{"down within the threshold", mk(32768, 1000, 4364), false, ""},
		{"capacity changed", mk(65536, 1000, 5000), true, "capacity"},
		{"reserved changed", mk(32768, 1001, 5000), true, "reserved"},
	}
	// A node with 2000 allocatable PIDs, 500 free at the last write: the
	// hysteresis is a tenth of the free PIDs, not max(500, 40).
	small := mk(32768, 30768, 1500)
	for _, tc := range []struct {
		name       string
		cur        pidSample
		want       bool
		wantReason string
	}{
		{"near full: up by a tenth of the free PIDs", mk(32768, 30768, 1545), false, ""},
		{"near full: up past a tenth of the free PIDs", mk(32768, 30768, 1546), true, "hysteresis of 45"},
		{"near full: down past a tenth of the last free PIDs", mk(32768, 30768, 1449), true, "hysteresis of 50"},
		{"near full: down within it", mk(32768, 30768, 1450), false, ""},
		{"full: any move", mk(32768, 30768, 2001), true, "hysteresis of 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := tc.cur.Changed(small)
			if got != tc.want || !strings.Contains(reason, tc.wantReason) {
				t.Errorf("Changed = %v (%q), want %v (%q)", got, reason, tc.want, tc.wantReason)
			}
		})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := tc.cur.Changed(last)
			if got != tc.want || !strings.Contains(reason, tc.wantReason) {
				t.Errorf("Changed = %v (%q), want %v (%q)", got, reason, tc.want, tc.wantReason)
			}
		})
	}
	if got, _ := mk(1, 0, 0).Changed(podSample{}); !got {
		t.Error("a sample of another probe counts as no sample written")
	}
}

func TestPodSampleChanged(t *testing.T) {
	const a, b, c = "0a1b2c3d-0000-4000-8000-00000000000a", "0a1b2c3d-0000-4000-8000-00000000000b", "0a1b2c3d-0000-4000-8000-00000000000c"
	list := func(v string) podSample {
		l, err := pidstats.ParsePodList(v)
		if err != nil {
			t.Fatal(err)
		}
		return podSample{format: pidstats.PodListFormat, unit: "PIDs", list: l, hysteresis: 500}
	}
	last := list(a + "=2000," + b + "=400")
	tests := []struct {
		name       string
		cur        podSample
		want       bool
		wantReason string
	}{
		{"same", list(a + "=2000," + b + "=400"), false, ""},
		{"big pod within the hysteresis", list(a + "=2500," + b + "=1"), false, ""},
		{"small pod leaves, small pod comes", list(a + "=2000," + c + "=500"), false, ""},
		{"big pod moves past the hysteresis", list(a + "=1499," + b + "=400"), true, "pod " + a + " moved by 501 PIDs"},
		{"big pod leaves", list(b + "=400"), true, "moved by 2000"},
		{"big pod comes", list(c + "=3000," + a + "=2000," + b + "=400"), true, "pod " + c + " moved by 3000"},
		{"empty list", list(""), true, "moved by 2000"},
		{"withdrawn: no write of its own", podSample{withdrawn: true, hysteresis: 500}, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := tc.cur.Changed(last)
			if got != tc.want || !strings.Contains(reason, tc.wantReason) {
				t.Errorf("Changed = %v (%q), want %v (%q)", got, reason, tc.want, tc.wantReason)
			}
		})
	}
	// After a withdrawal was written, any list is worth a write.
	if got, reason := list("").Changed(podSample{withdrawn: true}); !got || !strings.Contains(reason, "withdrawn") {
		t.Errorf("list after a withdrawal: Changed = %v (%q), want true", got, reason)
	}
}
