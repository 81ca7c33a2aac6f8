package relievenodepressure

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

// maxFigures bounds the triggers, and the figures the room check reads
// (the triggers' and the pod-IP figure), of one plugin: a step's gains and
// a room reservation are arrays of it, copied with the step.
const maxFigures = 8

// trigger is one of the plugin's triggers, defined over the one core that
// every trigger shares: assess the node (sample), wait for the pressure to
// last (pressureSamples), walk the ranking, plan, check the room on other
// nodes, evict, and record the relief. A trigger only says how a node's
// figure is read (assess, returning a projection) and how a destination's
// is (room): PIDs and measured memory are figures (figure.trigger), the
// OOM shortfall is the OOM model's (oomTrigger), and the ipStarved
// trigger's projection is a node's starved pods (starvedPods), planned
// after the others' without their debounce.
type trigger struct {
	// key is the trigger's args field, its name in a node's record, in
	// EvictionsTotal and in the thresholds logged ("pids", "memory",
	// "oom"); name names its figure in logs and NodePlan.Unknown ("PIDs",
	// "memory", "OOM"); noun names its sample ("PID").
	key, name, noun string
	// sampleAge is how old a sample the trigger trusts (0: any), where its
	// reliefs wait for a newer sample (recorded); the records are kept
	// longer than it (RelieveNodePressure.stateHorizon).
	sampleAge time.Duration
	recorded  bool
	// assess reads node's figure with pods, the node's pods, on it: the
	// node's projection by the trigger, or why the figure is unknown.
	assess func(c *cycle, node *v1.Node, pods []*v1.Pod) (projection, error)
	// room reads node's figure as a destination of replacements; nil and
	// no error where it is unknown there (the scheduler's plugins let pods
	// onto such a node), an error where the node's pods could not be
	// listed (it takes nothing).
	room roomCheck
}

// triggersOf returns the enabled pressure triggers, in the order their
// figures are logged and their reasons given.
func triggersOf(args *RelieveNodePressureArgs) []*trigger {
	var ts []*trigger
	if t := args.PIDs; t != nil {
		ts = append(ts, pidsFigure(t).trigger())
	}
	if t := args.Memory; t != nil {
		ts = append(ts, memoryFigure(t, memoryEstimate(args)).trigger())
	}
	if t := args.OOM; t != nil {
		ts = append(ts, oomTrigger(t))
	}
	return ts
}

// projection is a node's figure by one trigger at the start of the cycle
// and as projected after the evictions planned so far.
type projection interface {
	level() gauge
	// gain is what evicting pod frees by the trigger after the evictions
	// so far; a *malformedPod error reports a declaration counted as the
	// default.
	gain(pod *v1.Pod) (int64, error)
	// frees tells, for a pending trigger, whether evicting pod, which
	// frees g, moves it toward its target: the eviction's reason, or why
	// not ("" where there is no more to say than that it does not).
	frees(pod *v1.Pod, g int64) (reason, whyNot string)
	// remove projects the eviction of pod, which frees g.
	remove(pod *v1.Pod, g int64)
	clone() projection
	// accounts reports whether the figure stops counting pod once it has
	// left the node, before a new sample; if not, the trigger waits for a
	// sample stamped after sampleTime (zero: the figure has none to wait
	// for) after a relief.
	accounts(pod *v1.Pod) bool
	sampleTime() time.Time
	// keysAndValues renders the projected figure for a log line, its keys
	// after prefix (logKey); summary renders the figure at the start
	// against its threshold, for an Event.
	keysAndValues(prefix string) []any
	summary() string
	// malformedNode is a malformed annotation of the node the trigger read
	// around, or nil: a node above a threshold gets a Warning Event.
	malformedNode() *malformedNode
}

// malformedPod is a pod's malformed annotation and the reason of the
// Warning Event it gets.
type malformedPod struct {
	reason string
	err    error
}

func (e *malformedPod) Error() string { return e.err.Error() }

// malformedNode is a node's malformed annotation, the reason of the
// Warning Event it gets, and what the plugin does instead.
type malformedNode struct {
	reason, annotation, consequence string
	err                             error
}

// gauge is a trigger's figure on a node against its allocatable: at the
// start of the cycle and as projected.
type gauge struct {
	start, used, allocatable int64
	threshold, target        int64
	// noAllocatable says why allocatable is 0: the figure is then unknown.
	noAllocatable string
	// bestEffort: the trigger evicts what it can (ipStarved); a plan that
	// leaves it pending still relieves.
	bestEffort bool
}

// triggered reports whether the figure was above its threshold at the start.
func (g gauge) triggered() bool { return exceeds(g.start, g.allocatable, g.threshold) }

// pending reports whether the node still needs relief from the trigger:
// triggered, and projected above target.
func (g gauge) pending() bool { return g.triggered() && exceeds(g.used, g.allocatable, g.target) }

// aboveThreshold reports whether the trigger fired and is still projected
// above its threshold.
func (g gauge) aboveThreshold() bool {
	return !g.bestEffort && g.triggered() && exceeds(g.used, g.allocatable, g.threshold)
}

// exceeds reports whether part/whole > pct/100, exactly, without overflow,
// for non-negative operands (negative ones count as 0).
func exceeds(part, whole, pct int64) bool {
	hi1, lo1 := bits.Mul64(uint64(max(part, 0)), 100)
	hi2, lo2 := bits.Mul64(uint64(max(pct, 0)), uint64(max(whole, 0)))
	return hi1 > hi2 || hi1 == hi2 && lo1 > lo2
}

// percentOf is ⌊whole × pct / 100⌋ for pct in [0, 100]; negative inputs
// count as 0; it cannot overflow.
func percentOf(whole, pct int64) int64 {
	a, p := max(whole, 0), min(max(pct, 0), 100)
	// a = 100q + r, so a·p/100 = q·p + r·p/100 with p ≤ 100: no
	// intermediate exceeds a.
	return a/100*p + a%100*p/100
}

// assessTrigger returns node's projection by t, or why it is unknown: the
// trigger's own reasons, a relief that waits for a newer sample, or no
// allocatable figure.
func (c *cycle) assessTrigger(t *trigger, node *v1.Node, pods []*v1.Pod) (projection, error) {
	p, err := t.assess(c, node, pods)
	if err != nil {
		return nil, err
	}
	if r := c.state.records[node.Name]; r.Relieved != nil && t.recorded {
		at := p.sampleTime()
		// First, so that the run that first sees the evicted pods gone
		// records it, whatever else the trigger waits for.
		gone, err := c.awaitExit(node, r, t, pods, at)
		if err != nil {
			return nil, err
		}
		if wait, since := r.waitsFor(t.key, at); wait {
			return nil, fmt.Errorf("awaiting a %s sample newer than the last relief at %s (a sample stamped after %s): the sample of %s still counts what the pods evicted then held",
				t.noun, r.Relieved.UTC().Format(time.RFC3339), since.UTC().Format(time.RFC3339), at.UTC().Format(time.RFC3339))
		}
		if !gone.IsZero() && !at.After(gone) {
			return nil, fmt.Errorf("awaiting a %s sample stamped after %s, the newest when the pods evicted at %s were seen gone: that one may have been taken while they ran",
				t.noun, gone.UTC().Format(time.RFC3339), r.Relieved.UTC().Format(time.RFC3339))
		}
	}
	if g := p.level(); g.allocatable == 0 {
		return nil, errors.New(g.noAllocatable)
	}
	return p, nil
}

// awaitExit keeps t's trigger waiting, after a relief whose sample did not
// account for the pods it evicted (r.Exiting), while one of them still
// runs on the node; once none does, it returns the stamp a sample of t's
// figure must be later than: the newest the node carried when the plugin
// first saw them gone (r.Gone, recorded here then, when the pods are
// forgotten). at is the stamp of the node's sample of t's figure. Zero:
// no such wait.
func (c *cycle) awaitExit(node *v1.Node, r nodeRecord, t *trigger, pods []*v1.Pod, at time.Time) (time.Time, error) {
	if gone, seen := r.Gone[t.key]; seen {
		return gone, nil
	}
	exiting := r.Exiting[t.key]
	if len(exiting) == 0 {
		return time.Time{}, nil
	}
	for _, pod := range pods {
		if slices.Contains(exiting, uidPrefix(pod.UID)) && !sample.Terminal(pod) {
			return time.Time{}, fmt.Errorf("awaiting the exit of %s, evicted at %s: a %s sample taken while its processes run still counts them",
				klog.KObj(pod), r.Relieved.UTC().Format(time.RFC3339), t.noun)
		}
	}
	r = r.owned()
	if r.Gone == nil {
		r.Gone = map[string]time.Time{}
	}
	r.Gone[t.key] = at
	delete(r.Exiting, t.key)
	c.state.records[node.Name] = r
	c.state.changed = true
	return at, nil
}

// pressure is a node's projections by the enabled triggers, indexed as
// triggers. A nil projection was not assessed: the node's figure is
// unknown to its trigger.
type pressure struct {
	triggers []*trigger
	by       []projection
}

// gains are what evicting a pod frees by each trigger, indexed as the
// triggers.
type gains [maxFigures]int64

// clone copies the projection, so that a plan can be made without touching
// the figures the evictions are counted against.
func (s *pressure) clone() *pressure {
	c := &pressure{triggers: s.triggers, by: make([]projection, len(s.by))}
	for i, p := range s.by {
		if p != nil {
			c.by[i] = p.clone()
		}
	}
	return c
}

// without is the projection once steps' pods are evicted too.
func (s *pressure) without(steps []step) *pressure {
	c := s.clone()
	for _, step := range steps {
		c.remove(step.pod, step.gains)
	}
	return c
}

// remove projects the eviction of pod, which frees g.
func (s *pressure) remove(pod *v1.Pod, g gains) {
	for i, p := range s.by {
		if p != nil {
			p.remove(pod, g[i])
		}
	}
}

// anyLevel reports whether some projection meets cond.
func (s *pressure) anyLevel(cond func(gauge) bool) bool {
	for _, p := range s.by {
		if p != nil && cond(p.level()) {
			return true
		}
	}
	return false
}

// aboveThreshold reports whether a trigger that fired is still projected
// above its threshold: a plan that leaves the node there is not carried out.
func (s *pressure) aboveThreshold() bool { return s.anyLevel(gauge.aboveThreshold) }

func (s *pressure) triggered() bool { return s.anyLevel(gauge.triggered) }

func (s *pressure) pending() bool { return s.anyLevel(gauge.pending) }

// reaches reports whether the projection is at or below its targets, or at
// least as far as goal by every trigger.
func (s *pressure) reaches(goal *pressure) bool {
	if !s.pending() {
		return true
	}
	for i, p := range s.by {
		if p != nil && p.level().used > goal.by[i].level().used {
			return false
		}
	}
	return true
}

// sampleTime is the newest sample time of the triggers that fired; zero
// where none of them has a sample.
func (s *pressure) sampleTime() time.Time {
	var at time.Time
	for _, p := range s.by {
		if p != nil && p.level().triggered() && p.sampleTime().After(at) {
			at = p.sampleTime()
		}
	}
	return at
}

// keysAndValues renders the projected figures for a log line (PIDsUsed,
// memoryUsed, OOMShortfall); prefix tells apart the figures before and
// after an eviction (beforePIDsUsed, afterMemoryUsed).
func (s *pressure) keysAndValues(prefix string) []any {
	var kv []any
	for _, p := range s.by {
		if p != nil {
			kv = append(kv, p.keysAndValues(prefix)...)
		}
	}
	return kv
}

// summary renders the figures of the triggers that fired, with their
// thresholds, for an Event.
func (s *pressure) summary() string {
	var parts []string
	for _, p := range s.by {
		if p != nil && p.level().triggered() {
			parts = append(parts, p.summary())
		}
	}
	return strings.Join(parts, ", ")
}

// thresholdsAndTargets renders the configuration of the triggers that fired.
func (s *pressure) thresholdsAndTargets() []any {
	var kv []any
	for i, p := range s.by {
		if p == nil {
			continue
		}
		if g := p.level(); g.triggered() {
			key := s.triggers[i].key
			kv = append(kv, key+"ThresholdPercent", g.threshold, key+"TargetPercent", g.target)
		}
	}
	return kv
}

// of returns the projection of the trigger with key, or nil.
func (s *pressure) of(key string) projection {
	for i, t := range s.triggers {
		if t.key == key {
			return s.by[i]
		}
	}
	return nil
}
