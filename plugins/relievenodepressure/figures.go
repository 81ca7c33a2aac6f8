package relievenodepressure

import (
	"fmt"
	"math/bits"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// pressure is a node's trigger figures at the start of a cycle and as
// projected after the evictions made so far. A nil trigger was not assessed:
// disabled, or the node's figures are unknown.
type pressure struct {
	pids *pidPressure
	oom  *oomPressure
}

type pidPressure struct {
	stats                    pidstats.NodeStats
	allocatable, start, used int64
	threshold, target        int64
	defaultPodPIDs           int64
	// minPodPIDs is the least a pod must free to be evicted for PIDs.
	minPodPIDs int64
}

type oomPressure struct {
	model             *oomkill.Node
	start, shortfall  int64
	threshold, target int64
	evicted           []*v1.Pod
}

// nodePIDs is a node's PID sample and its estimated use, as NodePIDs
// counts it, or why they are unknown.
type nodePIDs struct {
	stats pidstats.NodeStats
	usage pidstats.Usage
	err   error
}

// pidsOf returns node's PID figures, computed once per cycle: the relief of
// a node and the room check of every other node read the same figures.
// pods are the node's pods, or nil to list them.
func (c *cycle) pidsOf(node *v1.Node, pods []*v1.Pod) nodePIDs {
	if f, ok := c.figures[node.Name]; ok {
		return f
	}
	t := c.args.PIDs
	var f nodePIDs
	f.stats, f.err = pidstats.ParseNode(node.Annotations, c.now, t.MaxSampleAge.Duration)
	if f.err == nil && pods == nil {
		pods, f.err = c.handle.GetPodsAssignedToNodeFunc()(node.Name, nil)
	}
	if f.err == nil {
		f.usage = pidstats.Estimate(f.stats, pods, *t.DefaultPodPIDs)
	}
	if c.figures == nil {
		c.figures = make(map[string]nodePIDs, len(c.nodes))
	}
	c.figures[node.Name] = f
	return f
}

// assessPIDs returns the PID pressure of node with pods on it, or nil and
// why its figures are unknown.
func (c *cycle) assessPIDs(node *v1.Node, pods []*v1.Pod) (*pidPressure, error) {
	t := c.args.PIDs
	f := c.pidsOf(node, pods)
	if f.err != nil {
		return nil, f.err
	}
	if r := c.state.records[node.Name]; r.Relieved != nil && !r.Accounted && !f.stats.SampledAt.After(*r.Relieved) {
		return nil, fmt.Errorf("awaiting a PID sample newer than the last relief at %s: the sample of %s still counts what the pods evicted then held",
			r.Relieved.UTC().Format(time.RFC3339), f.stats.SampledAt.UTC().Format(time.RFC3339))
	}
	alloc := f.stats.Allocatable()
	if alloc == 0 {
		return nil, fmt.Errorf("no allocatable PIDs (capacity %d, reserved %d)", f.stats.Capacity, f.stats.Reserved)
	}
	// The shared estimate, less what terminating pods hold: their PIDs are
	// already on their way out (an eviction of an earlier cycle, say), and
	// planning against them would evict twice for one pressure.
	return &pidPressure{
		stats: f.stats, allocatable: alloc, start: f.usage.Settled(), used: f.usage.Settled(),
		threshold: *t.ThresholdPercent, target: *t.TargetPercent, defaultPodPIDs: *t.DefaultPodPIDs,
		minPodPIDs: pidstats.Floor{MinFreePercent: *t.MinPodPIDsPercent}.Of(alloc),
	}, nil
}

// assessOOM returns the memory-shortfall figures of node, or nil and why they
// are unknown.
// The model is OOMRisk's: on the node's memory sample where it is fresh and
// valid (oomkill.MemorySampleOf), on declarations alone otherwise.
func (c *cycle) assessOOM(t *OOMTrigger, node *v1.Node, pods []*v1.Pod) (*oomPressure, error) {
	est := oomkill.Estimate{
		RequestMultiplierPercent:      *t.NoLimitRequestPercent,
		FractionOfAllocatablePermille: *t.NoLimitAllocatablePermille,
	}
	opts, _, _ := oomkill.MemorySampleOf(node, c.now, t.MaxSampleAge.Duration)
	model, err := oomkill.NewNode(node, pods, est, opts...)
	if err != nil {
		return nil, err
	}
	if model.Allocatable() == 0 {
		return nil, fmt.Errorf("no allocatable memory")
	}
	return &oomPressure{
		model: model, start: model.Shortfall(), shortfall: model.Shortfall(),
		threshold: *t.ThresholdPercent, target: *t.TargetPercent,
	}, nil
}

// triggered reports whether the figure was above its threshold at the start.
func (p *pidPressure) triggered() bool {
	return p != nil && exceeds(p.start, p.allocatable, p.threshold)
}

// pending reports whether the node still needs relief from this trigger:
// triggered, and projected above target.
func (p *pidPressure) pending() bool {
	return p.triggered() && exceeds(p.used, p.allocatable, p.target)
}

func (p *oomPressure) triggered() bool {
	return p != nil && exceeds(p.start, p.model.Allocatable(), p.threshold)
}

func (p *oomPressure) pending() bool {
	return p.triggered() && exceeds(p.shortfall, p.model.Allocatable(), p.target)
}

// gain is the PIDs evicting pod is projected to free (see the package
// README, "Evict only what relieves"):
//
//   - a pod listed in the sample's headroom.dev/pid-pods: its measured figure;
//   - a pod the sample cannot hold (placed after it, or not started by
//     then: sample.InSample): its declared PIDs, as the estimate counts it;
//   - otherwise, with a complete list: 0 (it held no PIDs at the sample);
//     with a full list: its declared PIDs, at most the smallest listed
//     figure; without a list: its declared PIDs.
//
// The error reports a malformed headroom.dev/pids, counted as the default.
func (p *pidPressure) gain(pod *v1.Pod) (int64, error) {
	if n, ok := p.stats.Pods.Lookup(pod.UID); ok {
		return n, nil
	}
	declared, err := pidstats.PodPIDs(pod, p.defaultPodPIDs)
	n, _ := sample.PodFigureOf(p.stats.Pods, p.stats.SampledAt, pod, declared)
	return n, err
}

// accounts reports whether the estimate stops counting pod's PIDs once
// it has left the node, before a new sample: the sample lists it, or holds
// none of its PIDs (a complete list, or a pod the sample cannot hold,
// whose declared PIDs the estimate adds only while it is there). Without
// PID figures there is nothing to account for.
func (p *pidPressure) accounts(pod *v1.Pod) bool {
	if p == nil {
		return true
	}
	if _, ok := p.stats.Pods.Lookup(pod.UID); ok {
		return true
	}
	return p.stats.Pods.Complete() || !sample.InSample(pod, p.stats.SampledAt)
}

// podListErr is why the node's headroom.dev/pid-pods was not used, or nil.
func (p *pidPressure) podListErr() error {
	if p == nil || !p.triggered() {
		return nil
	}
	return p.stats.Pods.Err()
}

// clone copies the projection, so that a plan can be made without touching
// the figures the evictions are counted against.
func (s *pressure) clone() *pressure {
	c := &pressure{}
	if s.pids != nil {
		p := *s.pids
		c.pids = &p
	}
	if s.oom != nil {
		o := *s.oom
		o.evicted = s.oom.evicted[:len(s.oom.evicted):len(s.oom.evicted)]
		c.oom = &o
	}
	return c
}

// remove projects the eviction of pod, which frees pids PIDs.
func (s *pressure) remove(pod *v1.Pod, pids int64) {
	if s.pids != nil {
		s.pids.used = max(s.pids.used-pids, 0)
	}
	if s.oom != nil {
		s.oom.evicted = append(s.oom.evicted, pod)
		s.oom.shortfall = s.oom.model.ShortfallWithout(s.oom.evicted...)
	}
}

// aboveThreshold reports whether a trigger that fired is still projected
// above its threshold: a plan that leaves the node there is not carried out.
func (s *pressure) aboveThreshold() bool {
	return s.pids.triggered() && exceeds(s.pids.used, s.pids.allocatable, s.pids.threshold) ||
		s.oom.triggered() && exceeds(s.oom.shortfall, s.oom.model.Allocatable(), s.oom.threshold)
}

func (s *pressure) triggered() bool { return s.pids.triggered() || s.oom.triggered() }
func (s *pressure) pending() bool   { return s.pids.pending() || s.oom.pending() }

// shortfallWithout is the projected shortfall once pod is evicted too.
func (p *oomPressure) shortfallWithout(pod *v1.Pod) int64 {
	return p.model.ShortfallWithout(append(p.evicted[:len(p.evicted):len(p.evicted)], pod)...)
}

// keysAndValues renders the projected figures for a log line; prefix tells
// apart the figures before and after an eviction.
func (s *pressure) keysAndValues(prefix string) []any {
	var kv []any
	if p := s.pids; p != nil {
		kv = append(kv, prefix+"PIDsUsed", fmt.Sprintf("%d/%d (%s)", p.used, p.allocatable, percent(p.used, p.allocatable)))
	}
	if p := s.oom; p != nil {
		kv = append(kv, prefix+"OOMShortfall", fmt.Sprintf("%d/%d bytes (%s)", p.shortfall, p.model.Allocatable(),
			percent(p.shortfall, p.model.Allocatable())))
	}
	return kv
}

// summary renders the figures of the triggers that fired, with their
// thresholds, for an Event.
func (s *pressure) summary() string {
	var parts []string
	if p := s.pids; p.triggered() {
		parts = append(parts, fmt.Sprintf("PIDs %d/%d used (%s) > threshold %d%%", p.start, p.allocatable, percent(p.start, p.allocatable), p.threshold))
	}
	if o := s.oom; o.triggered() {
		parts = append(parts, fmt.Sprintf("OOM shortfall %s of memory > threshold %d%%", percent(o.start, o.model.Allocatable()), o.threshold))
	}
	return strings.Join(parts, ", ")
}

// thresholdsAndTargets renders the configuration of the triggers that fired.
func (s *pressure) thresholdsAndTargets() []any {
	var kv []any
	if s.pids.triggered() {
		kv = append(kv, "pidsThresholdPercent", s.pids.threshold, "pidsTargetPercent", s.pids.target)
	}
	if s.oom.triggered() {
		kv = append(kv, "oomThresholdPercent", s.oom.threshold, "oomTargetPercent", s.oom.target)
	}
	return kv
}

// exceeds reports whether part/whole > pct/100, exactly, without overflow,
// for non-negative operands (negative ones count as 0).
func exceeds(part, whole, pct int64) bool {
	hi1, lo1 := bits.Mul64(uint64(max(part, 0)), 100)
	hi2, lo2 := bits.Mul64(uint64(max(pct, 0)), uint64(max(whole, 0)))
	return hi1 > hi2 || hi1 == hi2 && lo1 > lo2
}

// percent renders part/whole for people, with one decimal.
func percent(part, whole int64) string {
	if whole <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", float64(part)*100/float64(whole))
}
