// Package ipstats is the node pod-IP model shared by the NodeIPs scheduler
// plugin and the node agent that writes it.
//
// A node's pod-IP headroom travels as three Node annotations: how many pod
// IPs the node's CNI IPAM can hand out, how many it had handed out when
// sampled (leaked allocations included: they block new pods the same way),
// and when. A fourth, optional one says how many of those in use were
// leaked: allocated to no live pod sandbox. On a node whose IPAM hands out several addresses per pod (dual
// stack: one per family), the figures are those of the family with the
// fewest free addresses.
//
// # Which pods take an IP
//
// Every pod on the pod network takes exactly one address of every family the
// node's IPAM hands out (host-local allocates from each of its range sets on
// every add; a pod cannot opt out of a family). The published figures are
// one family's, so every such pod takes exactly one of them, whatever its
// families: no need to know a pod's families from its status or the node's
// spec.podCIDRs. Pods with spec.hostNetwork take none; terminal pods
// (Succeeded, Failed) take none, since their sandbox and its addresses are
// released.
package ipstats

import (
	"errors"
	"fmt"
	"iter"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

// Annotation keys. They are fixed by the project contract.
const (
	// AnnotationCapacity is the number of pod IPs the node's CNI IPAM can
	// hand out.
	AnnotationCapacity = "headroom.dev/ip-capacity"
	// AnnotationUsed is the number of pod IPs allocated when sampled.
	AnnotationUsed = "headroom.dev/ip-used"
	// AnnotationSampledAt is the RFC 3339 time of the sample.
	AnnotationSampledAt = "headroom.dev/ip-sampled-at"
	// AnnotationLeaked is, of the used pod IPs, how many were allocated to
	// no live pod sandbox of the node when sampled. It is optional: absent
	// where the IPAM cannot tell.
	AnnotationLeaked = "headroom.dev/ip-leaked"
)

// MaxCount bounds both figures: 2^24, the size of an IPv4 /8. No node runs
// anywhere near that many pods (the kubelet's maxPods is in the hundreds),
// so free addresses beyond it never change a decision; a larger pool (an
// IPv6 range) is published as MaxCount by NewNodeStats, and a larger value
// read from a node is rejected as invalid. Bounded figures keep the readers'
// arithmetic (adding pods, scaling to a score of at most 100) far from
// overflow without saturation checks.
const MaxCount = 1 << 24

// sampleKind names pod-IP samples in error messages.
const sampleKind = "pod IP"

// ErrNoStats means the node carries none of the three annotations: its pod
// IP headroom is unknown, and it is neither filtered nor favoured for it.
var ErrNoStats = errors.New("node has no pod IP annotations")

// IsNoStats reports whether err is, or wraps, ErrNoStats.
func IsNoStats(err error) bool { return errors.Is(err, ErrNoStats) }

// IsUnknown reports whether err (from ParseNode) means the node's pod IP
// headroom is unknown: missing, invalid (sample.IsInvalid) or stale
// (sample.IsStale) annotations. It is true for every non-nil error ParseNode
// returns.
func IsUnknown(err error) bool {
	return IsNoStats(err) || sample.IsInvalid(err) || sample.IsStale(err)
}

// NodeStats is one pod-IP sample of a node.
type NodeStats struct {
	Capacity  int64
	Used      int64
	SampledAt time.Time
	// Leaked is, of Used, the allocations that belong to no live pod
	// sandbox; meaningful only when LeakedKnown. They count in Used: a
	// leaked address blocks a new pod as a live one does.
	Leaked      int64
	LeakedKnown bool
}

// WithLeaked returns s with leaked allocations known, clamped to
// [0, s.Used], so the result passes Validate when s does.
func (s NodeStats) WithLeaked(leaked int64) NodeStats {
	s.Leaked, s.LeakedKnown = min(max(leaked, 0), max(s.Used, 0)), true
	return s
}

// NewNodeStats is the sample a writer publishes for an IPAM pool of
// capacity addresses with used of them allocated: both figures are clamped
// to MaxCount, and used to the clamped capacity (negative figures count as
// 0), so the result always passes Validate. Free addresses are exact up to
// MaxCount − used.
func NewNodeStats(capacity, used int64, sampledAt time.Time) NodeStats {
	c := min(max(capacity, 0), MaxCount)
	return NodeStats{Capacity: c, Used: min(max(used, 0), c), SampledAt: sampledAt}
}

// Free is Capacity − Used, never negative. To account for pods placed since
// the sample, set Used to EstimateUsed(...) first.
func (s NodeStats) Free() int64 {
	used := max(s.Used, 0)
	if used >= s.Capacity {
		return 0
	}
	return s.Capacity - used
}

// Validate checks the relations ParseNode guarantees: figures in
// [0, MaxCount], used not above capacity.
func (s NodeStats) Validate() error {
	for _, f := range []struct {
		key string
		v   int64
	}{{AnnotationCapacity, s.Capacity}, {AnnotationUsed, s.Used}} {
		switch {
		case f.v < 0:
			return &sample.InvalidError{Key: f.key, Value: strconv.FormatInt(f.v, 10), Reason: "must not be negative"}
		case f.v > MaxCount:
			return &sample.InvalidError{Key: f.key, Value: strconv.FormatInt(f.v, 10), Reason: fmt.Sprintf("above the limit of %d", MaxCount)}
		}
	}
	if s.Used > s.Capacity {
		return &sample.InvalidError{Key: AnnotationUsed, Value: strconv.FormatInt(s.Used, 10),
			Reason: fmt.Sprintf("exceeds %s %d", AnnotationCapacity, s.Capacity)}
	}
	if s.LeakedKnown && (s.Leaked < 0 || s.Leaked > s.Used) {
		return &sample.InvalidError{Key: AnnotationLeaked, Value: strconv.FormatInt(s.Leaked, 10),
			Reason: fmt.Sprintf("not within [0, %s %d]", AnnotationUsed, s.Used)}
	}
	if !s.LeakedKnown && s.Leaked != 0 {
		return &sample.InvalidError{Key: AnnotationLeaked, Value: strconv.FormatInt(s.Leaked, 10), Reason: "set but not known"}
	}
	return nil
}

// Annotations encodes s as the node annotations, the inverse of ParseNode
// (the time at second resolution, in UTC): the three figures, and
// AnnotationLeaked when LeakedKnown.
func (s NodeStats) Annotations() map[string]string {
	a := map[string]string{
		AnnotationCapacity:  strconv.FormatInt(s.Capacity, 10),
		AnnotationUsed:      strconv.FormatInt(s.Used, 10),
		AnnotationSampledAt: sample.FormatTime(s.SampledAt),
	}
	if s.LeakedKnown {
		a[AnnotationLeaked] = strconv.FormatInt(s.Leaked, 10)
	}
	return a
}

// SampleTime is SampledAt: what code that reads samples of every kind
// (plugins/figure) asks of one, with ReportedUsed.
func (s NodeStats) SampleTime() time.Time { return s.SampledAt }

// ReportedUsed is Used.
func (s NodeStats) ReportedUsed() int64 { return s.Used }

// CheckAge returns a *sample.StaleError when maxAge > 0 and s was sampled
// more than maxAge before now, nil otherwise.
func (s NodeStats) CheckAge(now time.Time, maxAge time.Duration) error {
	return sample.CheckAge(sampleKind, s.SampledAt, now, maxAge)
}

// ParseNode reads a node's pod-IP annotations. It never panics; the
// outcomes:
//
//   - none of the three present: ErrNoStats;
//   - some but not all present, a figure that is not a base-10 integer in
//     [0, MaxCount], used above capacity, leaked (optional) above used, a
//     time that is not RFC 3339 or lies more than
//     sample.ClockSkewAllowance after now: a *sample.InvalidError naming
//     the annotation, and zero NodeStats;
//   - maxAge > 0 and the sample older than maxAge: the parsed NodeStats and
//     a *sample.StaleError;
//   - otherwise the stats and nil.
func ParseNode(annotations map[string]string, now time.Time, maxAge time.Duration) (NodeStats, error) {
	present, err := sample.Present(annotations, sampleKind, AnnotationCapacity, AnnotationUsed, AnnotationSampledAt)
	if err != nil {
		return NodeStats{}, err
	}
	if !present {
		if v, ok := annotations[AnnotationLeaked]; ok {
			return NodeStats{}, &sample.InvalidError{Key: AnnotationLeaked, Value: v,
				Reason: "present without " + AnnotationCapacity + ", " + AnnotationUsed + " and " + AnnotationSampledAt}
		}
		return NodeStats{}, ErrNoStats
	}
	var s NodeStats
	if s.Capacity, err = sample.ParseCount(AnnotationCapacity, annotations[AnnotationCapacity], MaxCount); err != nil {
		return NodeStats{}, err
	}
	if s.Used, err = sample.ParseCount(AnnotationUsed, annotations[AnnotationUsed], MaxCount); err != nil {
		return NodeStats{}, err
	}
	if s.Used > s.Capacity {
		return NodeStats{}, &sample.InvalidError{Key: AnnotationUsed, Value: annotations[AnnotationUsed],
			Reason: fmt.Sprintf("exceeds %s %d", AnnotationCapacity, s.Capacity)}
	}
	if v, ok := annotations[AnnotationLeaked]; ok {
		if s.Leaked, err = sample.ParseCount(AnnotationLeaked, v, MaxCount); err != nil {
			return NodeStats{}, err
		}
		if s.Leaked > s.Used {
			return NodeStats{}, &sample.InvalidError{Key: AnnotationLeaked, Value: v,
				Reason: fmt.Sprintf("exceeds %s %d", AnnotationUsed, s.Used)}
		}
		s.LeakedKnown = true
	}
	if s.SampledAt, err = sample.ParseTime(AnnotationSampledAt, annotations[AnnotationSampledAt], now); err != nil {
		return NodeStats{}, err
	}
	if err := s.CheckAge(now, maxAge); err != nil {
		return s, err
	}
	return s, nil
}

// TakesIP reports whether the pod holds one of the node's pod IPs (one per
// family) while it runs: it is not on the host network and not terminal.
func TakesIP(pod *corev1.Pod) bool {
	return pod != nil && !pod.Spec.HostNetwork && !podutil.IsPodTerminal(pod)
}

// PodContribution is what one pod of the node adds to the node's reported
// use: 1 when it takes an IP (TakesIP) and the sample cannot hold its
// address (sample.InSample: placed after the sample, or bound before it but
// not started yet — the runtime asks the IPAM for its address only when it
// makes the pod's sandbox), otherwise 0. A terminating pod still counts:
// its address is freed when the runtime tears the sandbox down.
func PodContribution(pod *corev1.Pod, sampledAt time.Time) int64 {
	if TakesIP(pod) && !sample.InSample(pod, sampledAt) {
		return 1
	}
	return 0
}

// EstimateUsed is the node's pod-IP use as best known: the reported Used
// plus one per pod of the node that takes an IP and is not in the sample
// (PodContribution), so a burst scheduled within one sampling interval does not all
// land on one node. With Used ≤ MaxCount the sum cannot overflow.
func EstimateUsed(stats NodeStats, pods iter.Seq[*corev1.Pod]) int64 {
	used := max(stats.Used, 0)
	for p := range pods {
		used += PodContribution(p, stats.SampledAt)
	}
	return used
}

// Source tells a node's pod-IP sample: the node agent's annotations
// (Annotations), or an IPAM's objects that a consumer watches itself
// (calicoipam.Source). Its errors all mean the node's headroom is unknown
// (IsUnknown); maxAge is ParseNode's, and a live source, whose figures are
// current, ignores it.
type Source interface {
	Read(node *corev1.Node, now time.Time, maxAge time.Duration) (NodeStats, error)
}

// Annotations is the Source of the headroom.dev/ip-* annotations.
type Annotations struct{}

// Read is ParseNode of the node's annotations.
func (Annotations) Read(node *corev1.Node, now time.Time, maxAge time.Duration) (NodeStats, error) {
	return ParseNode(node.Annotations, now, maxAge)
}

// UnknownError is a live Source's reason for not telling a node's figures;
// it matches ErrNoStats.
type UnknownError struct{ Reason error }

func (e *UnknownError) Error() string { return "pod-IP figures unknown: " + e.Reason.Error() }

// Unwrap gives the reason.
func (e *UnknownError) Unwrap() error { return e.Reason }

// Is makes errors.Is(err, ErrNoStats) true.
func (e *UnknownError) Is(target error) bool { return target == ErrNoStats }
