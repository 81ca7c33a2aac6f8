package nodeagent

import (
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// pressureConfig is testConfig with the descheduler's shipped PID trigger:
// 95 % of allocatable, two samples. Allocatable is 32768 − 1000 = 31768;
// above 95 % is 30180 used and more.
func pressureConfig() Config {
	cfg := testConfig()
	cfg.PIDThresholdPercent = 95
	cfg.PressureSamples = 2
	return cfg
}

func TestTickWritesSamplesAboveTheDeschedulersThresholdAtOnce(t *testing.T) {
	h := newHarness(t, pressureConfig(), nil)
	h.proc.sample.Used = 30100 // 94.75 %: free 1668, hysteresis 166
	if err := h.r.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(1)
	step := func(used int64, wantPatches int) {
		t.Helper()
		h.proc.sample.Used = used
		if err := h.tick(time.Second); err != nil {
			t.Fatal(err)
		}
		h.wantPatches(wantPatches)
	}
	step(30179, 1) // 95.0 %, not above; within the hysteresis
	step(30180, 2) // above: written at once, 80 within the hysteresis
	h.wantUsed("30180")
	step(30190, 3) // the second sample the descheduler waits for
	h.wantUsed("30190")
	step(30195, 4) // and one spare, for a run between two writes
	step(30200, 4) // all written: the hysteresis again
	step(30150, 4) // back under, within the hysteresis: not written
	step(30210, 4) // over again, but no sample under it was written
	step(29000, 5) // a move beyond the hysteresis: written, under
	step(30181, 6) // over again: at once
	step(30182, 7)
	step(30183, 8)
	step(30184, 8)
}

func TestTickWithoutAThresholdFollowsTheHysteresis(t *testing.T) {
	h := newHarness(t, testConfig(), nil)
	h.proc.sample.Used = 30100
	if err := h.r.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	for _, used := range []int64{30180, 30190, 30200} {
		h.proc.sample.Used = used
		if err := h.tick(time.Second); err != nil {
			t.Fatal(err)
		}
	}
	h.wantPatches(1)
}

func TestAdoptedSampleAboveTheThresholdCountsOnce(t *testing.T) {
	a := pidstats.NodeStats{Capacity: 32768, Reserved: 1000, Used: 30200, SampledAt: t0.Add(-time.Minute)}.Annotations()
	a[pidstats.AnnotationPIDPods] = ""
	maps.Copy(a, memstats.NodeStats{Used: 3 << 30, SampledAt: t0.Add(-time.Minute), Pods: memstats.PodListFormat.New(nil)}.Annotations())
	a[memstats.AnnotationPods] = ""
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: a}}
	h := newHarness(t, pressureConfig(), node)
	h.proc.sample.Used = 30210
	if err := h.r.adopt(h.ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		h.proc.sample.Used++
		if err := h.tick(time.Second); err != nil {
			t.Fatal(err)
		}
	}
	// The adopted sample was one; two more complete the two and the spare.
	if n := len(h.patches()); n != 2 {
		t.Fatalf("%d writes after adopting a sample above the threshold, want 2", n)
	}
}

func TestConfigValidatePressure(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Config)
		want string
	}{
		{func(c *Config) { c.PIDThresholdPercent = -1 }, "--pids-threshold-percent"},
		{func(c *Config) { c.PIDThresholdPercent = 101 }, "--pids-threshold-percent"},
		{func(c *Config) { c.PressureSamples = 0 }, "--pressure-samples"},
		{func(c *Config) { c.PressureSamples = 11 }, "--pressure-samples"},
	} {
		cfg := pressureConfig()
		tc.mod(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want one naming %s", err, tc.want)
		}
		if _, err := New(fake.NewClientset(), cfg); err == nil {
			t.Error("New accepted it")
		}
	}
}

// pidTrace is a node's used PIDs over time.
type pidTrace func(at time.Duration) int64

// replayResult is what the write policy did over a trace.
type replayResult struct {
	writes int
	// toFirst and toSamples are the times from the trace's first crossing
	// above the threshold to the write of the first sample above it and of
	// the PressureSamples-th in a row (what the descheduler waits for); -1
	// when none.
	toFirst, toSamples time.Duration
}

// replay drives the agent's real write policy (Tick, on a fake clock, with
// the probes of the harness: per-pod, memory) through an hour of trace on
// a node of 2,000 allocatable PIDs (the real node's: pid_max 32768, 30768
// reserved), with the shipped max-interval jitter.
func replay(t *testing.T, cfg Config, trace pidTrace, threshold int64) replayResult {
	t.Helper()
	cfg.ReservedPIDs = 30768
	cfg.MaxIntervalJitter = DefaultMaxIntervalJitter
	h := newHarness(t, cfg, nil)
	res := replayResult{toFirst: -1, toSamples: -1}
	// The crossing, to the second, whatever the sampling interval.
	crossed := time.Duration(-1)
	for at := time.Duration(0); at < time.Hour; at += time.Second {
		if trace(at)*100 > threshold*2000 {
			crossed = at
			break
		}
	}
	inRow := 0
	lastWrites := 0
	for at := time.Duration(0); at < time.Hour; at += cfg.Interval {
		if at > 0 {
			h.clock.Step(cfg.Interval)
		}
		used := trace(at)
		h.proc.sample.Used = used
		above := used*100 > threshold*2000
		if err := h.r.Tick(h.ctx); err != nil {
			t.Fatal(err)
		}
		n := len(h.patches())
		if n == lastWrites {
			continue
		}
		lastWrites = n
		if !above {
			inRow = 0
			continue
		}
		inRow++
		if crossed >= 0 && res.toFirst < 0 {
			res.toFirst = at - crossed
		}
		if crossed >= 0 && res.toSamples < 0 && inRow == DefaultPressureSamples {
			res.toSamples = at - crossed
		}
	}
	res.writes = lastWrites
	return res
}

// TestWritesPerHourAtRestAndInAStorm measures the write policy's writes per
// node per hour and the time from a crossing of the descheduler's PID
// threshold (95 %) to the writes the descheduler waits for: before (the
// agent's default 10 s interval, no threshold), with 1 s sampling alone, and
// after (the shipped 1 s interval and --pids-threshold-percent 95), at rest
// and with one storm in the hour: a fast one like the real node's
// (docs/e2e-bench.md: 33 PIDs/s), and a creep of 1 PID/s that stops just
// above the threshold. It holds the figures: at rest the threshold costs
// nothing, a crossing at most PressureSamples + 1 writes, and the descheduler
// has its samples within two intervals of the crossing.
func TestWritesPerHourAtRestAndInAStorm(t *testing.T) {
	// At rest: 1,000 of 2,000 used, a slow swing of ±40 and a jitter of
	// ±20: within the hysteresis (min(500, a tenth of the free) = 100).
	rest := func(at time.Duration) int64 {
		s := int64(at / time.Second)
		swing := int64(40 * math.Sin(2*math.Pi*float64(s)/600))
		return 1000 + swing + (s*7919)%41 - 20
	}
	// stormFrom returns a trace that, 10 minutes in, climbs perSecond PIDs
	// a second from `from` to `to`, holds there a minute, and is relieved
	// back to rest.
	stormFrom := func(from, perSecond, to int64) pidTrace {
		start := 10 * time.Minute
		climb := time.Duration((to-from)/perSecond+1) * time.Second
		return func(at time.Duration) int64 {
			switch {
			case at < start || at >= start+climb+time.Minute:
				return rest(at)
			case at < start+climb:
				return min(to, from+perSecond*int64((at-start)/time.Second))
			default:
				return to
			}
		}
	}
	traces := []struct {
		name  string
		trace pidTrace
	}{
		{"at rest", rest},
		{"a storm of 33 PIDs/s to 99.5 %", stormFrom(1000, 33, 1990)},
		{"a creep of 1 PID/s to 96 %", stormFrom(1850, 1, 1920)},
	}
	before := testConfig() // 10 s, no threshold
	fast := testConfig()
	fast.Interval = time.Second
	after := fast
	after.PIDThresholdPercent = 95
	after.PressureSamples = DefaultPressureSamples
	configs := []struct {
		name string
		cfg  Config
	}{
		{"before: --interval=10s", before},
		{"1 s sampling alone", fast},
		{"after: --interval=1s --pids-threshold-percent=95", after},
	}
	res := make([][]replayResult, len(configs))
	for i, c := range configs {
		for _, tr := range traces {
			r := replay(t, c.cfg, tr.trace, 95)
			res[i] = append(res[i], r)
			t.Logf("%s, %s: %d writes/h; crossing → first sample above written %s, → %d in a row written %s",
				c.name, tr.name, r.writes, r.toFirst, DefaultPressureSamples, r.toSamples)
		}
	}
	fastRes, afterRes := res[1], res[2]
	if afterRes[0].writes != fastRes[0].writes {
		t.Errorf("at rest the threshold writes %d times an hour, 1 s sampling alone %d: want the same", afterRes[0].writes, fastRes[0].writes)
	}
	for j := 1; j < len(traces); j++ {
		if extra := afterRes[j].writes - fastRes[j].writes; extra < 0 || extra > DefaultPressureSamples+1 {
			t.Errorf("%s: the threshold adds %d writes, want at most %d (one crossing)", traces[j].name, extra, DefaultPressureSamples+1)
		}
		if r := afterRes[j]; r.toSamples < 0 || r.toSamples > 2*after.Interval {
			t.Errorf("%s: crossing → the descheduler's %d samples written: %s, want within %s", traces[j].name, DefaultPressureSamples, r.toSamples, 2*after.Interval)
		}
	}
	// The creep is what the threshold is for: the hysteresis alone leaves
	// a node just above the threshold unwritten.
	if r := fastRes[2]; r.toSamples >= 0 && r.toSamples <= 2*after.Interval {
		t.Errorf("1 s sampling alone gets the creep's samples written in %s: the trace does not test the threshold", r.toSamples)
	}
}
