package nodeagent

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"time"

	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// Hysteresis is when a change of the node's PID use is worth a Node write.
// Every write updates the Node object and wakes every Node watcher in the
// cluster, so small moves are not written.
type Hysteresis struct {
	// PIDs and Percent (of allocatable PIDs) set the threshold together:
	// used must move by more than the larger of the two since the last
	// write. Zero disables either part.
	PIDs    int64
	Percent float64
}

// Threshold is the hysteresis in PIDs for a node with the given allocatable
// PIDs: max(PIDs, Percent% of allocatable).
func (h Hysteresis) Threshold(allocatable int64) int64 {
	return threshold(h.PIDs, h.Percent, allocatable)
}

// threshold is max(abs, percent% of of, 0), the percentage rounded up.
func threshold(abs int64, percent float64, of int64) int64 {
	pct := float64(max(of, 0)) * percent / 100
	var fromPct int64
	switch {
	case pct >= math.MaxInt64: // converting an out-of-range float is undefined
		fromPct = math.MaxInt64
	case pct > 0:
		fromPct = int64(math.Ceil(pct))
	}
	return max(abs, fromPct, 0)
}

// PIDProbe publishes the node's PID capacity, reservation and use
// (pidstats.NodeStats' four annotations), read from /proc as the kubelet
// reads them.
type PIDProbe struct {
	ProcRoot   string
	Reserved   int64
	Hysteresis Hysteresis
	// ThresholdPercent is the descheduler's PID threshold
	// (Config.PIDThresholdPercent); 0 for none.
	ThresholdPercent int64
	// MaxAge is how old an adopted sample may be (the max interval).
	MaxAge time.Duration
	// Read reads /proc; ReadProc unless a test replaces it.
	Read func(procRoot string) (ProcSample, error)
}

// PIDProbeName is the PIDProbe's name in logs and metrics.
const PIDProbeName = "pids"

// Name implements Probe.
func (p *PIDProbe) Name() string { return PIDProbeName }

// Sample implements Probe.
func (p *PIDProbe) Sample(ctx context.Context, now time.Time) (Sample, error) {
	ps, err := p.Read(p.ProcRoot)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", p.ProcRoot, err)
	}
	s := pidstats.NodeStats{Capacity: ps.Capacity, Reserved: p.Reserved, Used: ps.Used, SampledAt: now}
	// Readers reject reserved or used above capacity as invalid, which would
	// make the fullest nodes look unknown. Clamp instead: allocatable 0 and
	// free 0 are what such a node has.
	if s.Reserved > s.Capacity {
		klog.FromContext(ctx).Info("Warning: reserved PIDs exceed capacity; publishing reserved = capacity",
			"reserved", s.Reserved, "capacity", s.Capacity)
		s.Reserved = s.Capacity
	}
	if s.Used > s.Capacity {
		klog.FromContext(ctx).Info("Warning: tasks in use exceed capacity; publishing used = capacity",
			"used", s.Used, "capacity", s.Capacity)
		s.Used = s.Capacity
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return pidSample{stats: s, hysteresis: p.Hysteresis, thresholdPercent: p.ThresholdPercent}, nil
}

// Adopt implements Probe: the node's PID annotations are adopted when they
// parse, are younger than MaxAge and carry the configured reservation.
func (p *PIDProbe) Adopt(annotations map[string]string, now time.Time) (Sample, error) {
	s, err := pidstats.ParseNode(annotations, now, p.MaxAge)
	if err != nil {
		return nil, err
	}
	if s.Reserved != p.Reserved {
		return nil, fmt.Errorf("annotated reservation %d differs from the configured %d", s.Reserved, p.Reserved)
	}
	s.Pods = pidstats.PodList{} // the per-pod probe's
	return pidSample{stats: s, hysteresis: p.Hysteresis, thresholdPercent: p.ThresholdPercent}, nil
}

type pidSample struct {
	stats            pidstats.NodeStats
	hysteresis       Hysteresis
	thresholdPercent int64
}

// Pressing implements Pressing: used is above thresholdPercent of
// allocatable, compared as RelieveNodePressure compares its trigger
// (used·100 > threshold·allocatable, in 128 bits).
func (s pidSample) Pressing() bool {
	if s.thresholdPercent <= 0 {
		return false
	}
	hi1, lo1 := bits.Mul64(uint64(max(s.stats.Used, 0)), 100)
	hi2, lo2 := bits.Mul64(uint64(s.thresholdPercent), uint64(max(s.stats.Allocatable(), 0)))
	return hi1 > hi2 || hi1 == hi2 && lo1 > lo2
}

func (s pidSample) Annotations() map[string]string { return s.stats.Annotations() }
func (s pidSample) SampledAt() time.Time           { return s.stats.SampledAt }
func (s pidSample) String() string {
	return fmt.Sprintf("capacity=%d reserved=%d used=%d", s.stats.Capacity, s.stats.Reserved, s.stats.Used)
}

// Changed writes capacity and reservation changes at once, and use when it
// moved by more than the hysteresis threshold.
func (s pidSample) Changed(last Sample) (bool, string) {
	l, ok := last.(pidSample)
	switch {
	case !ok:
		return true, "no PID sample written"
	case s.stats.Capacity != l.stats.Capacity:
		return true, fmt.Sprintf("capacity changed from %d to %d", l.stats.Capacity, s.stats.Capacity)
	case s.stats.Reserved != l.stats.Reserved:
		return true, fmt.Sprintf("reserved changed from %d to %d", l.stats.Reserved, s.stats.Reserved)
	}
	// Both are non-negative, so the difference cannot overflow.
	delta := s.stats.Used - l.stats.Used
	if delta < 0 {
		delta = -delta
	}
	th := s.hysteresis.Threshold(s.stats.Allocatable())
	// A fixed hysteresis hides most where it matters most: on a node with
	// 2,000 allocatable PIDs the default 500 is a quarter of them. Near
	// exhaustion it shrinks to a tenth of the PIDs left free (by this
	// sample or the last written, whichever leaves fewer), so the
	// scheduler sees a node running out while there is still room to act.
	if nearFull := min(s.stats.Free(), l.stats.Free()) / nearFullDivisor; nearFull < th {
		th = nearFull
	}
	if delta > th {
		return true, fmt.Sprintf("used moved by %d, more than the hysteresis of %d", delta, th)
	}
	return false, ""
}

// nearFullDivisor: the PID hysteresis is at most the free PIDs / this.
const nearFullDivisor = 10
