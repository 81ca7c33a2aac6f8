// Package pidstats is the node PID model shared by the NodePIDs scheduler
// plugin, the RelieveNodePressure descheduler plugin and headroom-node-agent,
// which writes it.
//
// A node's PID headroom travels as four Node annotations written by the
// node agent, with a fifth listing the PIDs of the node's biggest PID users
// at the same sample (AnnotationPIDPods); a pod may declare how many PIDs it expects to use with one Pod
// annotation. Allocatable PIDs = capacity − reserved, exactly as the kubelet
// computes node allocatable for the "pid" resource.
//
// The rules both sides apply are here, once: the estimate of PIDs in use
// (EstimateUsed; EstimateOn with the caller's sample.Basis: placement
// counts what pods the sample cannot hold declare, the descheduler's
// trigger does not), NodePIDs' floor of free PIDs (Floor), the defaults of both
// plugins' args (DefaultPodPIDs, DefaultMaxSampleAge, DefaultMinFreePIDs,
// DefaultMinFreePercent), and when a per-pod list names every pod
// (PodList.Complete).
package pidstats

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

// Annotation keys. They are fixed by the project contract.
const (
	// AnnotationCapacity is min(kernel.pid_max, kernel.threads-max) on the node.
	AnnotationCapacity = "headroom.dev/pid-capacity"
	// AnnotationReserved is systemReserved.pid + kubeReserved.pid; absent means 0.
	AnnotationReserved = "headroom.dev/pid-reserved"
	// AnnotationUsed is the number of tasks (threads) on the node when sampled.
	AnnotationUsed = "headroom.dev/pid-used"
	// AnnotationSampledAt is the RFC 3339 time of the sample.
	AnnotationSampledAt = "headroom.dev/pid-sampled-at"
	// AnnotationPodPIDs is set on a Pod: the most PIDs it expects to use.
	AnnotationPodPIDs = "headroom.dev/pids"
)

// MaxNodePIDs is the most PIDs a node can have: 2^22 = 4194304 is
// PID_MAX_LIMIT on 64-bit Linux, the ceiling of kernel.pid_max. A larger
// pid-capacity is invalid, and so is a pod declaring more PIDs.
const MaxNodePIDs = 1 << 22

// ClockSkewAllowance is how far in the future a sample time may lie before
// it is rejected (sample.ClockSkewAllowance).
const ClockSkewAllowance = sample.ClockSkewAllowance

// ErrNoStats means the node carries none of the capacity, used and
// sampled-at annotations: its PID headroom is unknown, and it is neither
// filtered nor favoured for it.
var ErrNoStats = errors.New("node has no PID annotations")

// InvalidError reports an annotation that cannot be used: malformed, out of
// range, or missing while others are present (sample.InvalidError).
type InvalidError = sample.InvalidError

// StaleError reports a well-formed sample older than the caller's maxAge
// (sample.StaleError). ParseNode returns the parsed stats alongside it, so a
// caller may still look at them, but the default is to treat a stale node as
// unknown.
type StaleError = sample.StaleError

// sampleKind names PID samples in error messages.
const sampleKind = "PID"

// IsUnknown reports whether err (from ParseNode) means the node's PID
// headroom is unknown: missing, invalid or stale annotations. It is true for
// every non-nil error ParseNode returns.
func IsUnknown(err error) bool {
	return IsNoStats(err) || IsInvalid(err) || IsStale(err)
}

// IsNoStats reports whether err is, or wraps, ErrNoStats.
func IsNoStats(err error) bool { return errors.Is(err, ErrNoStats) }

// IsInvalid reports whether err is, or wraps, an *InvalidError.
func IsInvalid(err error) bool { return sample.IsInvalid(err) }

// IsStale reports whether err is, or wraps, a *StaleError.
func IsStale(err error) bool { return sample.IsStale(err) }

// NodeStats is one PID sample of a node.
type NodeStats struct {
	Capacity  int64
	Reserved  int64
	Used      int64
	SampledAt time.Time
	// Pods are the per-pod figures of the same sample. ParseNode fills them
	// from AnnotationPIDPods; Annotations does not write them (the node
	// agent's per-pod probe does).
	Pods PodList
}

// Allocatable is Capacity − Reserved, never negative. Like the kubelet, a
// reservation larger than the capacity leaves nothing allocatable.
func (s NodeStats) Allocatable() int64 {
	reserved := max(s.Reserved, 0)
	if s.Capacity <= reserved {
		return 0
	}
	// Both operands are non-negative here, so this cannot overflow.
	return s.Capacity - reserved
}

// Free is Allocatable − Used, never negative. To account for pods placed
// since the sample, set Used to EstimateUsed(...) first.
func (s NodeStats) Free() int64 {
	alloc := s.Allocatable()
	used := max(s.Used, 0)
	if used >= alloc {
		return 0
	}
	return alloc - used
}

// Validate checks the relations ParseNode guarantees: no negative values,
// capacity at most MaxNodePIDs, reserved and used not above capacity. The node agent calls it before it
// writes, so it never publishes stats its readers would reject.
func (s NodeStats) Validate() error {
	switch {
	case s.Capacity < 0:
		return &InvalidError{Key: AnnotationCapacity, Value: strconv.FormatInt(s.Capacity, 10), Reason: "must not be negative"}
	case s.Reserved < 0:
		return &InvalidError{Key: AnnotationReserved, Value: strconv.FormatInt(s.Reserved, 10), Reason: "must not be negative"}
	case s.Used < 0:
		return &InvalidError{Key: AnnotationUsed, Value: strconv.FormatInt(s.Used, 10), Reason: "must not be negative"}
	case s.Capacity > MaxNodePIDs:
		return &InvalidError{Key: AnnotationCapacity, Value: strconv.FormatInt(s.Capacity, 10),
			Reason: fmt.Sprintf("above %d, the most PIDs a Linux node can have", MaxNodePIDs)}
	case s.Reserved > s.Capacity:
		return &InvalidError{Key: AnnotationReserved, Value: strconv.FormatInt(s.Reserved, 10),
			Reason: fmt.Sprintf("exceeds %s %d", AnnotationCapacity, s.Capacity)}
	case s.Used > s.Capacity:
		return &InvalidError{Key: AnnotationUsed, Value: strconv.FormatInt(s.Used, 10),
			Reason: fmt.Sprintf("exceeds %s %d", AnnotationCapacity, s.Capacity)}
	}
	return nil
}

// Annotations encodes s as the four node annotations, the inverse of
// ParseNode but for Pods. The time is written in UTC with second resolution, the same
// resolution as pod conditions, which PlacedAfterSample compares it with.
func (s NodeStats) Annotations() map[string]string {
	return map[string]string{
		AnnotationCapacity:  strconv.FormatInt(s.Capacity, 10),
		AnnotationReserved:  strconv.FormatInt(s.Reserved, 10),
		AnnotationUsed:      strconv.FormatInt(s.Used, 10),
		AnnotationSampledAt: sample.FormatTime(s.SampledAt),
	}
}

// ParseNode reads a node's PID annotations. It never panics; the outcomes:
//
//   - none of capacity, used and sampled-at present: ErrNoStats (reserved
//     alone does not make a sample);
//   - some but not all of them present, a value that is not a base-10
//     64-bit integer, a negative value, a capacity above MaxNodePIDs,
//     reserved or used above capacity, a
//     time that is not RFC 3339, or a time more than ClockSkewAllowance after
//     now: an *InvalidError naming the annotation, and zero NodeStats;
//   - maxAge > 0 and the sample older than maxAge: the parsed NodeStats and a
//     *StaleError (maxAge <= 0 means no limit);
//   - otherwise the stats and nil.
//
// An absent reserved annotation counts as 0. AnnotationPIDPods goes into
// Pods and never makes the node unknown: malformed, it leaves Pods empty
// with Pods.Err() saying why, and the estimate falls back to the reported
// use alone.
func ParseNode(annotations map[string]string, now time.Time, maxAge time.Duration) (NodeStats, error) {
	present, err := sample.Present(annotations, sampleKind, AnnotationCapacity, AnnotationUsed, AnnotationSampledAt)
	if err != nil {
		return NodeStats{}, err
	}
	if !present {
		return NodeStats{}, ErrNoStats
	}
	capStr, usedStr, atStr := annotations[AnnotationCapacity], annotations[AnnotationUsed], annotations[AnnotationSampledAt]

	var s NodeStats
	if s.Capacity, err = parseCount(AnnotationCapacity, capStr); err != nil {
		return NodeStats{}, err
	}
	if resStr, ok := annotations[AnnotationReserved]; ok {
		if s.Reserved, err = parseCount(AnnotationReserved, resStr); err != nil {
			return NodeStats{}, err
		}
	}
	if s.Used, err = parseCount(AnnotationUsed, usedStr); err != nil {
		return NodeStats{}, err
	}
	if err := s.Validate(); err != nil {
		var ie *InvalidError
		if errors.As(err, &ie) {
			ie.Value = annotations[ie.Key] // as written, e.g. "+7" rather than "7"
		}
		return NodeStats{}, err
	}
	if s.SampledAt, err = sample.ParseTime(AnnotationSampledAt, atStr, now); err != nil {
		return NodeStats{}, err
	}
	if v, ok := annotations[AnnotationPIDPods]; ok {
		s.Pods, _ = ParsePodList(v) // malformed: lists nothing, Pods.Err says why
	}
	if err := s.CheckAge(now, maxAge); err != nil {
		return s, err
	}
	return s, nil
}

// SampleTime is SampledAt, and ReportedUsed is Used: what code that reads
// samples of every kind (plugins/figure) asks of one.
func (s NodeStats) SampleTime() time.Time { return s.SampledAt }

// ReportedUsed is Used.
func (s NodeStats) ReportedUsed() int64 { return s.Used }

// IgnoredAnnotation names AnnotationPIDPods, and why, when the per-pod list
// is invalid: the sample counts, with the reported use alone.
func (s NodeStats) IgnoredAnnotation() (string, error) {
	if err := s.Pods.Err(); err != nil {
		return AnnotationPIDPods, err
	}
	return "", nil
}

// CheckAge returns a *StaleError when maxAge > 0 and s was sampled more than
// maxAge before now, nil otherwise: ParseNode's staleness rule, for callers
// that keep parsed stats and judge their age each time they use them.
func (s NodeStats) CheckAge(now time.Time, maxAge time.Duration) error {
	return sample.CheckAge(sampleKind, s.SampledAt, now, maxAge)
}

func parseCount(key, v string) (int64, error) {
	return sample.ParseCount(key, v, math.MaxInt64)
}

// SaturatingAdd returns a + b for non-negative operands, clamped at
// math.MaxInt64 (sample.SaturatingAdd).
func SaturatingAdd(a, b int64) int64 { return sample.SaturatingAdd(a, b) }
