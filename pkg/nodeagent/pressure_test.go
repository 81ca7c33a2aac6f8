package nodeagent

import (
	"maps"
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
	step(30200, 3) // both written: the hysteresis again
	step(30150, 3) // back under, within the hysteresis: not written
	step(30210, 3) // over again, but no sample under it was written
	step(29000, 4) // a move beyond the hysteresis: written, under
	step(30181, 5) // over again: at once
	step(30182, 6)
	step(30183, 6)
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
	// The adopted sample was one; one more completes the two.
	if n := len(h.patches()); n != 1 {
		t.Fatalf("%d writes after adopting a sample above the threshold, want 1", n)
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
