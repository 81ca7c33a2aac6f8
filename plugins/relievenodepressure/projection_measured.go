package relievenodepressure

import (
	"fmt"
	"strconv"
	"time"
	"unicode"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// The figures' keys: their args fields, and their names in a node's record.
const (
	keyPIDs   = "pids"
	keyMemory = "memory"
)

// figure is a measured node figure a trigger watches: PIDs, or memory. It
// says how the node agent's sample of the figure is read and how a node's use
// of it is estimated (with the scheduler plugins' own code), how amounts of
// it read in logs and Events, and the trigger's settings; its projection
// (measured) gives a pod's gain by the node agent's list and the kubelet's
// ranking. The plan, the room check, the debounce and the record are the
// core's (projection.go).
type figure struct {
	// name starts the figure's log keys and Event summaries ("PIDs",
	// "memory"); noun names its sample and its users ("PID", "memory"); key
	// is its args field and its name in a node's record ("pids", "memory").
	name, noun, key string
	// format renders an amount of the figure ("9700", "9Gi"); unit follows
	// an amount that stands alone ("9700 PIDs", "9Gi of memory").
	format func(int64) string
	unit   string
	// podsAnnotation is the node's per-pod list of the figure;
	// malformedPods the reason of the Warning Event when it does not parse.
	podsAnnotation, malformedPods string
	// malformedPod is the reason of the Warning Event on a pod whose
	// declaration of the figure does not parse; "" where pods declare it in
	// their spec.
	malformedPod string
	// minGainField names the args field of minGainPercent.
	minGainField                      string
	threshold, target, minGainPercent int64
	maxSampleAge                      time.Duration
	// read parses node's sample of the figure. Every error leaves the
	// node's figure unknown: no sample, an invalid or a stale one.
	read func(node *v1.Node, now time.Time) (reading, error)
	// fits, when set, is a further rule a replacement must meet on another
	// node with free and allocatable, for need (PIDs: NodePIDs' floor).
	fits func(free, allocatable, need int64) bool
	// rank compares two pods as the kubelet's eviction manager ranks them
	// for the figure's signal (rankPIDPressure, rankMemoryPressure); see
	// nodeRelief.kubeletRanking. reclaim is the signal's place where
	// several are met: the kubelet reclaims the lowest first
	// (byEvictionPriority: memory, then PIDs).
	rank    func(a, b rankKey) int
	reclaim int
	// requested, when set, is what a pod requests of the figure, which the
	// kubelet's ranking weighs its use against (memory).
	requested func(*v1.Pod) int64
	// declaredFloor is the least a declaration counts for where it stands
	// in for what a pod holds or will hold: its gain where the sample held
	// it but cannot say how much (no usable list, or not on a full one),
	// and its replacement's need (nodeRelief.need). A declaration the pod's
	// owner writes (headroom.dev/pids) could otherwise say "0", making the
	// pod look free to place anywhere and, evicted, to free nothing, so that
	// the plan passed over it and took another workload's pods. Where the
	// sample cannot hold the pod it frees nothing by the trigger, whatever
	// it declares. A declaration above the floor counts as written:
	// NodePIDs places the replacement by it.
	declaredFloor int64
}

// amount renders n with the figure's unit.
func (f *figure) amount(n int64) string { return f.format(n) + f.unit }

// reading is a node's sample of a figure, as its model reads it.
type reading struct {
	sampledAt   time.Time
	pods        sample.PodList
	allocatable int64
	// noAllocatable says why allocatable is 0.
	noAllocatable string
	// declared is what a pod the sample cannot hold is taken to hold, by
	// the estimate's own rule; the error reports a malformed declaration,
	// counted as the default.
	declared func(*v1.Pod) (int64, error)
	// estimate is the figure's shared estimate of the node's use with pods
	// on it, on basis: the room check's for placement, the trigger's for
	// pressure (sample.Basis), one code path with the scheduler plugins'.
	estimate func(basis sample.Basis, pods []*v1.Pod) sample.Usage
}

// pidsFigure is the PID trigger's figure: NodePIDs' model (pkg/pidstats).
func pidsFigure(t *PIDsTrigger) *figure {
	defaultPIDs, maxAge := *t.DefaultPodPIDs, t.MaxSampleAge.Duration
	floor := pidstats.Floor{MinFreePIDs: *t.MinFreePIDs, MinFreePercent: *t.MinFreePercent}
	// A pod's declared PIDs do not depend on its node: one function for
	// every node's reading.
	declared := func(pod *v1.Pod) (int64, error) { return pidstats.PodPIDs(pod, defaultPIDs) }
	return &figure{
		name: "PIDs", noun: "PID", key: keyPIDs,
		format: func(n int64) string { return strconv.FormatInt(n, 10) }, unit: " PIDs",
		podsAnnotation: pidstats.AnnotationPIDPods, malformedPods: ReasonMalformedPIDPods, malformedPod: ReasonMalformedPodPIDs,
		minGainField: "minPodPIDsPercent",
		threshold:    *t.ThresholdPercent, target: *t.TargetPercent, minGainPercent: *t.MinPodPIDsPercent, maxSampleAge: maxAge,
		read: func(node *v1.Node, now time.Time) (reading, error) {
			s, err := pidstats.ParseNode(node.Annotations, now, maxAge)
			if err != nil {
				return reading{}, err
			}
			r := reading{
				sampledAt: s.SampledAt, pods: s.Pods, allocatable: s.Allocatable(), declared: declared,
				estimate: func(basis sample.Basis, pods []*v1.Pod) sample.Usage {
					return pidstats.EstimateOn(basis, s, pods, defaultPIDs)
				},
			}
			if r.allocatable == 0 {
				r.noAllocatable = fmt.Sprintf("no allocatable PIDs (capacity %d, reserved %d)", s.Capacity, s.Reserved)
			}
			return r, nil
		},
		fits: floor.Fits,
		rank: rankPIDPressure, reclaim: 1,
		// headroom.dev/pids is the pod's own to write.
		declaredFloor: defaultPIDs,
	}
}

// memoryFigure is the memory trigger's figure: the node's working set as
// the shared estimate has it (memstats.Estimate), with the declared function
// of OOMRisk's model (oomkill.Estimate.DeclaredOn), against the node's
// allocatable memory.
func memoryFigure(t *MemoryTrigger, est oomkill.Estimate) *figure {
	maxAge := t.MaxSampleAge.Duration
	return &figure{
		name: "memory", noun: "memory", key: keyMemory,
		format: formatBytes, unit: " of memory",
		podsAnnotation: memstats.AnnotationPods, malformedPods: ReasonMalformedMemoryPods,
		minGainField: "minPodBytesPercent",
		threshold:    *t.ThresholdPercent, target: *t.TargetPercent, minGainPercent: *t.MinPodBytesPercent, maxSampleAge: maxAge,
		read: func(node *v1.Node, now time.Time) (reading, error) {
			s, err := memstats.ParseNode(node.Annotations, now, maxAge)
			if err != nil {
				return reading{}, err
			}
			_, allocatable, err := oomkill.MemoryOf(node)
			if err != nil {
				return reading{}, err
			}
			declared := est.DeclaredOn(allocatable)
			return reading{
				sampledAt: s.SampledAt, pods: s.Pods, allocatable: allocatable,
				noAllocatable: "no allocatable memory",
				declared:      func(pod *v1.Pod) (int64, error) { return declared(pod), nil },
				estimate: func(basis sample.Basis, pods []*v1.Pod) sample.Usage {
					return memstats.EstimateOn(basis, s, pods, declared)
				},
			}, nil
		},
		rank: rankMemoryPressure, reclaim: 0,
		requested: memstats.PodRequest,
	}
}

// memoryEstimate is the no-limit estimate behind what an unmeasured pod is
// taken to hold: the OOM trigger's where it is on, OOMRisk's defaults
// otherwise, so that both memory triggers count a node alike.
func memoryEstimate(args *RelieveNodePressureArgs) oomkill.Estimate {
	if o := args.OOM; o != nil {
		return oomkill.Estimate{RequestMultiplierPercent: *o.NoLimitRequestPercent, FractionOfAllocatablePermille: *o.NoLimitAllocatablePermille}
	}
	return oomkill.DefaultEstimate
}

// measured is a node's projection by one measured figure.
type measured struct {
	*figure
	reading
	// start is the settled use at the start of the cycle; used as
	// projected after the evictions so far.
	start, used int64
	// minGain is the least a pod must free to be evicted for the figure.
	minGain int64
}

// nodeFigure is a node's sample of a figure and its estimated use, or why
// they are unknown.
type nodeFigure struct {
	reading
	// usage is the estimate for placement, the node as a destination
	// (room): pods the sample cannot hold count at their declarations.
	// pressure is the estimate the trigger fires on: what the sample
	// measured, less what has left since; a declaration raises no pressure.
	usage, pressure sample.Usage
	err             error
	// unknown: err is the figure's own (no sample, an invalid or a stale
	// one), not a failure to list the node's pods.
	unknown bool
}

type figureKey struct {
	node, figure string
}

// figureOf returns node's figure f, computed once per cycle: the relief of
// a node and the room check of every other node read the same figures.
// pods are the node's pods, or nil to list them.
func (c *cycle) figureOf(f *figure, node *v1.Node, pods []*v1.Pod) nodeFigure {
	k := figureKey{node.Name, f.key}
	if nf, ok := c.readings[k]; ok {
		return nf
	}
	var nf nodeFigure
	nf.reading, nf.err = f.read(node, c.now)
	nf.unknown = nf.err != nil
	if nf.err == nil && pods == nil {
		pods, nf.err = c.handle.GetPodsAssignedToNodeFunc()(node.Name, nil)
	}
	if nf.err == nil {
		nf.usage = nf.estimate(sample.ForPlacement, pods)
		nf.pressure = nf.estimate(sample.ForPressure, pods)
	}
	if c.readings == nil {
		c.readings = make(map[figureKey]nodeFigure, len(c.nodes))
	}
	c.readings[k] = nf
	return nf
}

// trigger is the figure's trigger over the core.
func (f *figure) trigger() *trigger {
	return &trigger{key: f.key, name: f.name, noun: f.noun, sampleAge: f.maxSampleAge, recorded: true, assess: f.assess, room: f.room}
}

// assess returns the projection of node with pods on it by figure f, or
// why its figure is unknown.
func (f *figure) assess(c *cycle, node *v1.Node, pods []*v1.Pod) (projection, error) {
	nf := c.figureOf(f, node, pods)
	if nf.err != nil {
		return nil, nf.err
	}
	// The shared estimate for pressure (a pod that holds nothing at the
	// sample raises none, whatever it declares), less what terminating pods
	// hold: it is already on its way out (an eviction of an earlier cycle,
	// say), and planning against it would evict twice for one pressure.
	used := nf.pressure.Settled()
	return &measured{figure: f, reading: nf.reading, start: used, used: used, minGain: percentOf(nf.allocatable, f.minGainPercent)}, nil
}

// room is node's figure f as a destination: a replacement must fit beside
// what the node holds now, its terminating pods included (Usage.Held), as
// the scheduler judges it, at or below the trigger's threshold and, where
// the figure has one, its further rule (NodePIDs' floor). The replacement
// takes its need (nodeRelief.need), by the node's declared function.
func (f *figure) room(c *cycle, node *v1.Node) (*roomFigure, error) {
	nf := c.figureOf(f, node, nil)
	switch {
	case nf.unknown:
		return nil, nil
	case nf.err != nil:
		return nil, nf.err
	}
	allocatable := nf.allocatable
	return &roomFigure{
		used: nf.usage.Held,
		need: func(n *nodeRelief, pod *v1.Pod) (int64, bool) { return n.need(f, nf.declared, pod), true },
		fits: func(used, need int64) bool {
			return (f.fits == nil || f.fits(max(allocatable-used, 0), allocatable, need)) &&
				!exceeds(addSat(used, need), allocatable, f.threshold)
		},
	}, nil
}

func (m *measured) level() gauge {
	return gauge{start: m.start, used: m.used, allocatable: m.allocatable, threshold: m.threshold, target: m.target, noAllocatable: m.noAllocatable}
}

func (m *measured) sampleTime() time.Time { return m.sampledAt }

// gain is what evicting pod is projected to free of the figure (see the
// package README, "Evict only what relieves"):
//
//   - a pod listed in the sample's per-pod list: its measured figure;
//   - a pod the sample cannot hold (placed after it, or not started by
//     then: sample.InSample): 0, as the trigger's figure holds nothing of
//     it (sample.ForPressure), whatever it declares;
//   - otherwise, with a complete list: 0 (it held nothing at the sample);
//     with a full list: what it declares, at most the smallest listed
//     figure (a declaration never outranks a measurement); without a list:
//     what it declares; a declaration here counts at least the figure's
//     declaredFloor.
//
// The error reports a malformed declaration, counted as the default.
func (m *measured) gain(pod *v1.Pod) (int64, error) {
	if n, ok := m.pods.LookupPod(pod); ok {
		return n, nil
	}
	declared, err := m.declared(pod)
	n, _ := sample.PodFigureOf(m.pods, m.sampledAt, pod, max(declared, m.declaredFloor), sample.ForPressure)
	if err != nil {
		return n, &malformedPod{reason: m.malformedPod, err: err}
	}
	return n, nil
}

// frees: a pod that frees less than the figure's floor (minGain, at
// least 1) is not evicted for it.
func (m *measured) frees(_ *v1.Pod, g int64) (reason, whyNot string) {
	if floor := max(m.minGain, 1); g < floor {
		return "", fmt.Sprintf("frees %s, below the floor of %s (%s %d%% of %s)",
			m.amount(g), m.format(floor), m.minGainField, m.minGainPercent, m.format(m.allocatable))
	}
	return fmt.Sprintf("%s %s used > threshold %d%%", m.name, percent(m.start, m.allocatable), m.threshold), ""
}

func (m *measured) ranking(n *nodeRelief) []*v1.Pod { return n.kubeletRanking(m) }

func (m *measured) reclaimOrder() int { return m.reclaim }

func (m *measured) victimOrder() bool { return true }

func (m *measured) remove(_ *v1.Pod, g int64) { m.used = max(m.used-g, 0) }

func (m *measured) clone() projection {
	c := *m
	return &c
}

// accounts reports whether the estimate stops counting what pod holds once
// it has left the node, before a new sample: the sample lists it, or holds
// none of it (a complete list, or a pod the sample cannot hold, which the
// trigger's estimate never counts).
func (m *measured) accounts(pod *v1.Pod) bool {
	if _, ok := m.pods.LookupPod(pod); ok {
		return true
	}
	return m.pods.Complete() || !sample.InSample(pod, m.sampledAt)
}

// malformedNode reports, on a node above the figure's threshold, the
// per-pod list that was not used: the pods' gains are their declarations.
func (m *measured) malformedNode() *malformedNode {
	if err := m.pods.Err(); err != nil && m.level().triggered() {
		return &malformedNode{reason: m.malformedPods, annotation: m.podsAnnotation, err: err,
			consequence: fmt.Sprintf("gains are the pods' declared %s", m.name)}
	}
	return nil
}

func (m *measured) keysAndValues(prefix string) []any {
	return []any{logKey(prefix, m.name+"Used"), fmt.Sprintf("%s/%s (%s)", m.format(m.used), m.format(m.allocatable), percent(m.used, m.allocatable))}
}

func (m *measured) summary() string {
	return fmt.Sprintf("%s %s/%s used (%s) > threshold %d%%", m.name, m.format(m.start), m.format(m.allocatable),
		percent(m.start, m.allocatable), m.threshold)
}

// logKey is key after prefix, its first letter upper-cased there.
func logKey(prefix, key string) string {
	if prefix == "" {
		return key
	}
	r := []rune(key)
	r[0] = unicode.ToUpper(r[0])
	return prefix + string(r)
}

// percent renders part/whole for people, with one decimal.
func percent(part, whole int64) string {
	if whole <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", float64(part)*100/float64(whole))
}

// formatBytes renders bytes for people: exactly, with the largest binary
// suffix that divides it ("10Gi", "9728Mi"), where it is a whole number of
// MiB; otherwise in MiB with one decimal ("9830.4Mi").
func formatBytes(n int64) string {
	if n%(1<<20) == 0 {
		return resource.NewQuantity(n, resource.BinarySI).String()
	}
	return fmt.Sprintf("%.1fMi", float64(n)/(1<<20))
}
