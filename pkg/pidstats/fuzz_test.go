package pidstats

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fuzzAbsent marks an annotation the fuzzer chose to leave out.
const fuzzAbsent = "\x00absent"

func FuzzParseNode(f *testing.F) {
	at := now.Add(-time.Minute).Format(time.RFC3339)
	f.Add("32768", "", "1200", at, int64(0))
	f.Add("32768", "1000", "1200", at, int64(time.Minute))
	f.Add("4194304", "0", "4194304", "2026-05-01T11:59:59.999999999+01:00", int64(time.Hour))
	f.Add("9223372036854775807", "9223372036854775807", "0", at, int64(0))
	f.Add("-1", "5", "3", at, int64(0))
	f.Add("10", "11", "3", at, int64(0))
	f.Add("10", "1", "11", at, int64(0))
	f.Add(fuzzAbsent, fuzzAbsent, fuzzAbsent, fuzzAbsent, int64(0))
	f.Add(fuzzAbsent, "1", fuzzAbsent, at, int64(0))
	f.Add("1e3", "0x10", "+5", "9999-12-31T23:59:59Z", int64(-1))
	f.Add("100", "", "50", "2026-05-01T12:00:60Z", int64(1))

	f.Fuzz(func(t *testing.T, capacity, reserved, used, sampledAt string, maxAge int64) {
		a := map[string]string{}
		for k, v := range map[string]string{
			AnnotationCapacity: capacity, AnnotationReserved: reserved,
			AnnotationUsed: used, AnnotationSampledAt: sampledAt,
		} {
			if v != fuzzAbsent {
				a[k] = v
			}
		}
		s, err := ParseNode(a, now, time.Duration(maxAge))
		if err != nil {
			if !IsUnknown(err) {
				t.Fatalf("error %v is not classified as unknown", err)
			}
			if IsInvalid(err) && s != (NodeStats{}) {
				t.Fatalf("invalid result carries stats %+v", s)
			}
			if !IsStale(err) {
				return
			}
		}
		// Success, or stale (which carries the parsed stats): the invariants hold.
		if s.Used < 0 || s.Used > s.Capacity {
			t.Fatalf("used %d outside [0, capacity %d]", s.Used, s.Capacity)
		}
		if s.Reserved < 0 || s.Reserved > s.Capacity {
			t.Fatalf("reserved %d outside [0, capacity %d]", s.Reserved, s.Capacity)
		}
		if s.Allocatable() < 0 || s.Allocatable() > s.Capacity || s.Free() < 0 || s.Free() > s.Allocatable() {
			t.Fatalf("allocatable %d / free %d out of range for %+v", s.Allocatable(), s.Free(), s)
		}
		if s.SampledAt.After(now.Add(ClockSkewAllowance)) {
			t.Fatalf("accepted a sample from the future: %s", s.SampledAt)
		}
		// What ParseNode accepts, Annotations writes back identically (up
		// to sub-second precision), within RFC 3339's four-digit years.
		if y := s.SampledAt.UTC().Year(); y < 0 || y > 9999 {
			return
		}
		back, err2 := ParseNode(s.Annotations(), now, 0)
		if err2 != nil {
			t.Fatalf("re-parsing %v: %v", s.Annotations(), err2)
		}
		if back.Capacity != s.Capacity || back.Reserved != s.Reserved || back.Used != s.Used ||
			!back.SampledAt.Equal(s.SampledAt.Truncate(time.Second)) {
			t.Fatalf("round trip changed %+v into %+v", s, back)
		}
	})
}

func FuzzPodPIDs(f *testing.F) {
	f.Add("250", int64(100), true, false, int64(0))
	f.Add("", int64(100), true, false, int64(0))
	f.Add("-1", int64(100), true, true, int64(-5))
	f.Add("9223372036854775808", int64(0), true, false, int64(1))
	f.Add("x", int64(-3), false, true, int64(3))
	f.Add("4194304", int64(100), true, false, int64(0))
	f.Add("4194305", int64(100), true, false, int64(0))

	sample := now
	f.Fuzz(func(t *testing.T, v string, def int64, present, terminal bool, scheduledOffset int64) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
		if present {
			pod.Annotations = map[string]string{AnnotationPodPIDs: v}
		}
		if terminal {
			pod.Status.Phase = corev1.PodFailed
		}
		if scheduledOffset != 0 {
			pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(sample.Add(time.Duration(scheduledOffset)))}}
		}
		got, err := PodPIDs(pod, def)
		if got < 0 {
			t.Fatalf("PodPIDs = %d, negative", got)
		}
		parsed, perr := strconv.ParseInt(v, 10, 64)
		wellFormed := present && perr == nil && parsed >= 0 && parsed <= MaxPodPIDs
		tooMany := present && (perr == nil && parsed > MaxPodPIDs || errors.Is(perr, strconv.ErrRange) && !strings.HasPrefix(v, "-"))
		if err != nil && len(err.Error()) > 300 {
			t.Fatalf("error of %d bytes: the value must be cut", len(err.Error()))
		}
		switch {
		case wellFormed:
			if err != nil || got != parsed {
				t.Fatalf("PodPIDs(%q) = %d, %v; want %d", v, got, err, parsed)
			}
		case tooMany:
			if err == nil || got != MaxPodPIDs {
				t.Fatalf("PodPIDs(%q) = %d, %v; want the maximum %d (fail closed) and an error", v, got, err, MaxPodPIDs)
			}
		case present:
			if err == nil || got != max(def, 0) {
				t.Fatalf("PodPIDs(%q) = %d, %v; want default %d and an error", v, got, err, max(def, 0))
			}
			if !strings.Contains(err.Error(), AnnotationPodPIDs) || !strings.Contains(err.Error(), "ns/p") {
				t.Fatalf("error %q does not name the key and the pod", err)
			}
		default:
			if err != nil || got != max(def, 0) {
				t.Fatalf("absent annotation: %d, %v", got, err)
			}
		}

		c, _ := PodContribution(pod, sample, def)
		if c < 0 || (c != 0 && c != got) {
			t.Fatalf("PodContribution = %d, PodPIDs = %d", c, got)
		}
		if terminal && c != 0 {
			t.Fatalf("terminal pod contributes %d", c)
		}
		if e := EstimateUsed(NodeStats{Used: 7, SampledAt: sample}, []*corev1.Pod{pod, pod}, def); e < 7 {
			t.Fatalf("EstimateUsed = %d below reported use", e)
		}
	})
}

// FuzzParsePodList: any string parses to a list that formats back to the
// same string, or to an *InvalidError and no entries; never a panic.
func FuzzParsePodList(f *testing.F) {
	f.Add("")
	f.Add("00000000-0000-4000-8000-000000000001=4194304,00000000-0000-4000-8000-000000000002=0")
	f.Add("00000000-0000-4000-8000-000000000001=1,00000000-0000-4000-8000-000000000001=1")
	f.Add("00000000-0000-4000-8000-000000000001=01")
	f.Add(",=")
	f.Fuzz(func(t *testing.T, v string) {
		l, err := ParsePodList(v)
		if err != nil {
			if !IsInvalid(err) || l.Len() != 0 {
				t.Fatalf("error %v (invalid: %v) with %d entries", err, IsInvalid(err), l.Len())
			}
			return
		}
		if l.String() != v {
			t.Fatalf("String() = %q, want %q", l.String(), v)
		}
		if l.Len() > MaxListedPods || len(v) > MaxPodListBytes {
			t.Fatalf("accepted %d entries, %d bytes", l.Len(), len(v))
		}
		var total int64
		for i, e := range l.Entries() {
			if e.Value < 0 || e.Value > MaxPodPIDs {
				t.Fatalf("entry %d figure %d out of range", i, e.Value)
			}
			if n, ok := l.Lookup(e.UID); !ok || n != e.Value {
				t.Fatalf("Lookup(%s) = %d, %v", e.UID, n, ok)
			}
			total += e.Value
		}
		if got, want := l.Complete(), l.Len() < MaxListedPods; got != want {
			t.Fatalf("Complete() = %v with %d entries", got, l.Len())
		}
		if smallest, ok := l.Smallest(); ok != (l.Len() > 0) || ok && smallest != l.Entries()[l.Len()-1].Value {
			t.Fatalf("Smallest() = %d, %v", smallest, ok)
		}
		// Every pod gone: the estimate subtracts exactly the listed total.
		s := NodeStats{Capacity: 1 << 30, Used: 1 << 29, SampledAt: now, Pods: l}
		if got := EstimateUsed(s, nil, 0); got != 1<<29-total {
			t.Fatalf("estimate %d, want %d", got, 1<<29-total)
		}
	})
}
