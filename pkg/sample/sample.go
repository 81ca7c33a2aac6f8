// Package sample holds what every node sample carried in annotations has in
// common, whatever it measures (PIDs, pod IPs): the errors that make a
// node's figure unknown, the rule that judges a sample's age and time, the
// parsing of bounded counts, and the rule that tells whether a pod may be
// missing from a sample. The models (pidstats, ipstats) build on it, so the
// node agent that writes a sample and the plugins that read it agree.
package sample

import (
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClockSkewAllowance is how far in the future a sample time may lie before
// it is rejected: the writer's clock and the reader's clock are different
// machines' clocks.
const ClockSkewAllowance = time.Minute

// InvalidError reports an annotation that cannot be used: malformed, out of
// range, or missing while others of its sample are present. Key names the
// annotation, Value is its raw value ("" when it is missing).
type InvalidError struct {
	Key    string
	Value  string
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("annotation %s=%s: %s", e.Key, Quote(e.Value), e.Reason)
}

// StaleError reports a well-formed sample older than the caller's limit.
// Kind names what was sampled ("PID", "pod IP") for the message.
type StaleError struct {
	Kind   string
	Age    time.Duration
	MaxAge time.Duration
}

func (e *StaleError) Error() string {
	kind := "sample"
	if e.Kind != "" {
		kind = e.Kind + " sample"
	}
	return fmt.Sprintf("%s is %s old, older than the limit of %s", kind, e.Age, e.MaxAge)
}

// IsInvalid reports whether err is, or wraps, an *InvalidError.
func IsInvalid(err error) bool {
	var ie *InvalidError
	return errors.As(err, &ie)
}

// IsStale reports whether err is, or wraps, a *StaleError.
func IsStale(err error) bool {
	var se *StaleError
	return errors.As(err, &se)
}

// CheckAge returns a *StaleError when maxAge > 0 and sampledAt lies more
// than maxAge before now, nil otherwise (maxAge <= 0 means no limit).
func CheckAge(kind string, sampledAt, now time.Time, maxAge time.Duration) error {
	// time.Time.Sub saturates, so a sample from year 1 cannot overflow.
	if age := now.Sub(sampledAt); maxAge > 0 && age > maxAge {
		return &StaleError{Kind: kind, Age: age, MaxAge: maxAge}
	}
	return nil
}

// Present reports whether a sample is there at all: false when none of keys
// is in annotations, true when all are, and an *InvalidError naming the
// first missing key when only some are (kind names the sample in the
// reason, e.g. "PID").
func Present(annotations map[string]string, kind string, keys ...string) (bool, error) {
	n := 0
	for _, k := range keys {
		if _, ok := annotations[k]; ok {
			n++
		}
	}
	if n == 0 {
		return false, nil
	}
	for _, k := range keys {
		if _, ok := annotations[k]; !ok {
			return false, &InvalidError{Key: k, Reason: fmt.Sprintf("missing while other %s annotations are present", kind)}
		}
	}
	return true, nil
}

// ParseCount parses the value v of annotation key as a base-10 count in
// [0, limit]. Anything else is an *InvalidError naming the key and the value.
func ParseCount(key, v string, limit int64) (int64, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		reason := "not a base-10 integer"
		if errors.Is(err, strconv.ErrRange) {
			reason = "out of the 64-bit integer range"
		}
		return 0, &InvalidError{Key: key, Value: v, Reason: reason}
	}
	if n < 0 {
		return 0, &InvalidError{Key: key, Value: v, Reason: "must not be negative"}
	}
	if n > limit {
		return 0, &InvalidError{Key: key, Value: v, Reason: fmt.Sprintf("above the limit of %d", limit)}
	}
	return n, nil
}

// ParseTime parses the value v of annotation key as an RFC 3339 sample time
// that lies no more than ClockSkewAllowance after now. Anything else is an
// *InvalidError naming the key and the value.
func ParseTime(key, v string, now time.Time) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, &InvalidError{Key: key, Value: v, Reason: "not an RFC 3339 time"}
	}
	if t.After(now.Add(ClockSkewAllowance)) {
		return time.Time{}, &InvalidError{Key: key, Value: v,
			Reason: fmt.Sprintf("more than %s in the future", ClockSkewAllowance)}
	}
	return t, nil
}

// FormatTime writes a sample time the way ParseTime reads it: RFC 3339 in
// UTC with second resolution, the resolution of the pod conditions that
// PlacedAfter compares it with.
func FormatTime(t time.Time) string {
	return t.UTC().Format(time.RFC3339)
}

// PlacedAfter reports whether the pod may be missing from a node sample
// taken at sampledAt: it has no PodScheduled=True condition yet (the
// scheduler's assumed pods, not bound yet), or that condition's
// LastTransitionTime is not before sampledAt truncated to the second.
// Conditions carry 1 s resolution, so a pod bound in the same second as the
// sample counts as placed after it.
func PlacedAfter(pod *corev1.Pod, sampledAt time.Time) bool {
	return placedAfter(pod, sampledAt.Truncate(time.Second))
}

// InSample reports whether what the pod holds on its node (PIDs, a pod IP)
// can be in the node's sample taken at sampledAt: it was bound before the
// sample's second (not PlacedAfter) and had started by then. A pod bound
// before a sample whose containers had not started yet held nothing the
// sample could see: on a real node its sandbox, address and processes
// appear seconds after binding (image, sandbox and CNI set-up), and a
// reader must count it as placed after the sample.
//
// Started means a container of the pod has a start time (running, or
// terminated, or a previous run's) before the sample's second. A pod whose
// status records no start time at all has only its phase to go by:
// Pending has not started, any other (or none) is taken to have.
func InSample(pod *corev1.Pod, sampledAt time.Time) bool {
	if pod == nil {
		return false
	}
	t := sampledAt.Truncate(time.Second)
	return !placedAfter(pod, t) && startedBefore(pod, t)
}

func startedBefore(pod *corev1.Pod, t time.Time) bool {
	started := false
	for i := range pod.Status.ContainerStatuses {
		cs := &pod.Status.ContainerStatuses[i]
		for _, st := range []corev1.ContainerState{cs.State, cs.LastTerminationState} {
			var at metav1.Time
			switch {
			case st.Running != nil:
				at = st.Running.StartedAt
			case st.Terminated != nil:
				at = st.Terminated.StartedAt
			}
			if at.IsZero() {
				continue
			}
			if at.Time.Before(t) {
				return true
			}
			started = true
		}
	}
	// Every start the status records is at or after t: not yet at t.
	// With none recorded, the phase tells.
	return !started && pod.Status.Phase != corev1.PodPending
}

func placedAfter(pod *corev1.Pod, t time.Time) bool {
	if pod == nil {
		return false
	}
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return !c.LastTransitionTime.Time.Before(t)
		}
	}
	return true
}

// MaxEcho bounds how much of an annotation's value an error message, and
// so a log line or an Event, quotes: at most this many characters of its
// quoted form. Anyone who may edit a pod or a Node writes these values (up
// to the API's 256 KiB for all of an object's annotations); a message quotes
// enough to find the mistake, and an Event note stays within the API's 1 KiB.
const MaxEcho = 64

// Quote returns v quoted as %q does, or, when that is longer than MaxEcho
// characters, the quoted form of its longest prefix (cut on a rune
// boundary) that fits, with the full length named. Escapes count: a byte
// %q writes as \x00 takes four.
func Quote(v string) string {
	if q := strconv.Quote(v); len(q) <= MaxEcho {
		return q
	}
	cut := min(len(v), MaxEcho)
	for {
		for cut > 0 && cut < len(v) && !utf8.RuneStart(v[cut]) {
			cut--
		}
		if q := strconv.Quote(v[:cut]); len(q) <= MaxEcho || cut == 0 {
			return fmt.Sprintf("%s… (%d bytes)", q, len(v))
		}
		cut--
	}
}
