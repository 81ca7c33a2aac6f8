package ipstats

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func annotations(capacity, used, at string) map[string]string {
	a := map[string]string{}
	for k, v := range map[string]string{AnnotationCapacity: capacity, AnnotationUsed: used, AnnotationSampledAt: at} {
		if v != "-" {
			a[k] = v
		}
	}
	return a
}

func withLeaked(a map[string]string, leaked string) map[string]string {
	if a == nil {
		a = map[string]string{}
	}
	a[AnnotationLeaked] = leaked
	return a
}

func TestParseNode(t *testing.T) {
	at := "2026-05-01T11:59:00Z"
	tests := []struct {
		name         string
		a            map[string]string
		maxAge       time.Duration
		want         NodeStats
		noStats      bool
		invalidKey   string
		reasonPrefix string
		stale        bool
	}{
		{name: "a /28", a: annotations("13", "4", at), want: NodeStats{Capacity: 13, Used: 4, SampledAt: now.Add(-time.Minute)}},
		{name: "full", a: annotations("13", "13", at), want: NodeStats{Capacity: 13, Used: 13, SampledAt: now.Add(-time.Minute)}},
		{name: "the bound", a: annotations("16777216", "0", at), want: NodeStats{Capacity: MaxCount, SampledAt: now.Add(-time.Minute)}},
		{name: "none", a: map[string]string{"headroom.dev/pid-used": "3"}, noStats: true},
		{name: "nil map", noStats: true},
		{name: "used missing", a: annotations("13", "-", at), invalidKey: AnnotationUsed, reasonPrefix: "missing while other pod IP annotations"},
		{name: "time missing", a: annotations("13", "1", "-"), invalidKey: AnnotationSampledAt, reasonPrefix: "missing"},
		{name: "above the bound", a: annotations("16777217", "0", at), invalidKey: AnnotationCapacity, reasonPrefix: "above the limit of 16777216"},
		{name: "negative used", a: annotations("13", "-1", at), invalidKey: AnnotationUsed, reasonPrefix: "must not be negative"},
		{name: "used above capacity", a: annotations("13", "14", at), invalidKey: AnnotationUsed, reasonPrefix: "exceeds headroom.dev/ip-capacity 13"},
		{name: "not a number", a: annotations("13/28", "1", at), invalidKey: AnnotationCapacity, reasonPrefix: "not a base-10 integer"},
		{name: "not a time", a: annotations("13", "1", "yesterday"), invalidKey: AnnotationSampledAt, reasonPrefix: "not an RFC 3339 time"},
		{name: "future", a: annotations("13", "1", "2026-05-01T12:05:00Z"), invalidKey: AnnotationSampledAt, reasonPrefix: "more than 1m0s in the future"},
		{name: "leaked", a: withLeaked(annotations("13", "4", at), "2"),
			want: NodeStats{Capacity: 13, Used: 4, Leaked: 2, LeakedKnown: true, SampledAt: now.Add(-time.Minute)}},
		{name: "none leaked", a: withLeaked(annotations("13", "4", at), "0"),
			want: NodeStats{Capacity: 13, Used: 4, LeakedKnown: true, SampledAt: now.Add(-time.Minute)}},
		{name: "all leaked", a: withLeaked(annotations("13", "13", at), "13"),
			want: NodeStats{Capacity: 13, Used: 13, Leaked: 13, LeakedKnown: true, SampledAt: now.Add(-time.Minute)}},
		{name: "leaked above used", a: withLeaked(annotations("13", "4", at), "5"), invalidKey: AnnotationLeaked, reasonPrefix: "exceeds headroom.dev/ip-used 4"},
		{name: "leaked negative", a: withLeaked(annotations("13", "4", at), "-1"), invalidKey: AnnotationLeaked, reasonPrefix: "must not be negative"},
		{name: "leaked not a number", a: withLeaked(annotations("13", "4", at), "two"), invalidKey: AnnotationLeaked, reasonPrefix: "not a base-10 integer"},
		{name: "leaked above the bound", a: withLeaked(annotations("16777216", "16777216", at), "16777217"), invalidKey: AnnotationLeaked, reasonPrefix: "above the limit"},
		{name: "leaked alone", a: withLeaked(nil, "1"), invalidKey: AnnotationLeaked, reasonPrefix: "present without"},
		{name: "stale", a: annotations("13", "1", at), maxAge: 30 * time.Second, stale: true,
			want: NodeStats{Capacity: 13, Used: 1, SampledAt: now.Add(-time.Minute)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNode(tc.a, now, tc.maxAge)
			switch {
			case tc.noStats:
				if !IsNoStats(err) || !IsUnknown(err) || got != (NodeStats{}) {
					t.Fatalf("got %+v, %v; want ErrNoStats", got, err)
				}
			case tc.invalidKey != "":
				var ie *sample.InvalidError
				if !errors.As(err, &ie) || ie.Key != tc.invalidKey || !strings.HasPrefix(ie.Reason, tc.reasonPrefix) || !IsUnknown(err) {
					t.Fatalf("got %v; want an InvalidError on %s: %s", err, tc.invalidKey, tc.reasonPrefix)
				}
				if got != (NodeStats{}) {
					t.Fatalf("invalid result carries stats %+v", got)
				}
			case tc.stale:
				if !sample.IsStale(err) || !IsUnknown(err) || !strings.Contains(err.Error(), "pod IP sample") {
					t.Fatalf("got %v; want stale", err)
				}
				if got != tc.want {
					t.Fatalf("stale result %+v, want %+v", got, tc.want)
				}
			default:
				if err != nil || !got.SampledAt.Equal(tc.want.SampledAt) || got.Capacity != tc.want.Capacity || got.Used != tc.want.Used {
					t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
				}
			}
		})
	}
}

func TestNewNodeStats(t *testing.T) {
	for _, tc := range []struct {
		capacity, used int64
		want           NodeStats
	}{
		{13, 4, NodeStats{Capacity: 13, Used: 4}},
		{13, 20, NodeStats{Capacity: 13, Used: 13}},
		{-1, -1, NodeStats{}},
		// An IPv6 /64 range with 5 pods: the pool is clamped, the use kept.
		{math.MaxInt64, 5, NodeStats{Capacity: MaxCount, Used: 5}},
		{math.MaxInt64, math.MaxInt64 - 1, NodeStats{Capacity: MaxCount, Used: MaxCount}},
	} {
		got := NewNodeStats(tc.capacity, tc.used, time.Time{})
		if got != tc.want {
			t.Errorf("NewNodeStats(%d, %d) = %+v, want %+v", tc.capacity, tc.used, got, tc.want)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("NewNodeStats(%d, %d) does not validate: %v", tc.capacity, tc.used, err)
		}
	}
	if err := (NodeStats{Capacity: MaxCount + 1}).Validate(); !sample.IsInvalid(err) {
		t.Errorf("capacity above the bound validates: %v", err)
	}
	if err := (NodeStats{Capacity: 3, Used: 4}).Validate(); !sample.IsInvalid(err) {
		t.Errorf("used above capacity validates: %v", err)
	}
}

func TestAnnotationsRoundTrip(t *testing.T) {
	s := NodeStats{Capacity: 253, Used: 17, SampledAt: time.Date(2026, 5, 1, 13, 59, 1, 5e8, time.FixedZone("CEST", 7200))}
	a := s.Annotations()
	if a[AnnotationSampledAt] != "2026-05-01T11:59:01Z" || a[AnnotationCapacity] != "253" || a[AnnotationUsed] != "17" {
		t.Fatalf("Annotations = %v", a)
	}
	back, err := ParseNode(a, now, 0)
	if err != nil || back.Capacity != 253 || back.Used != 17 || !back.SampledAt.Equal(s.SampledAt.Truncate(time.Second)) {
		t.Fatalf("round trip: %+v, %v", back, err)
	}
}

func pod(name string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func boundAt(at time.Time) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)})
	}
}

func TestEstimateUsed(t *testing.T) {
	sampledAt := now.Add(-30 * time.Second)
	before, after := boundAt(sampledAt.Add(-time.Minute)), boundAt(sampledAt.Add(time.Second))
	hostNet := func(p *corev1.Pod) { p.Spec.HostNetwork = true }
	phase := func(ph corev1.PodPhase) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Status.Phase = ph } }
	dualStack := func(p *corev1.Pod) {
		p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00:10:244:1::5"}}
	}
	stats := NodeStats{Capacity: 13, Used: 4, SampledAt: sampledAt}
	tests := []struct {
		name string
		pods []*corev1.Pod
		want int64
	}{
		{"no pods", nil, 4},
		{"bound before the sample: already counted", []*corev1.Pod{pod("a", before), pod("b", before)}, 4},
		{"bound after", []*corev1.Pod{pod("a", after), pod("b", after)}, 6},
		{"assumed, not bound yet", []*corev1.Pod{pod("a")}, 5},
		{"host network takes none", []*corev1.Pod{pod("a", after, hostNet), pod("b", hostNet)}, 4},
		{"terminal takes none", []*corev1.Pod{pod("a", after, phase(corev1.PodSucceeded)), pod("b", after, phase(corev1.PodFailed))}, 4},
		{"running, pending count", []*corev1.Pod{pod("a", after, phase(corev1.PodRunning)), pod("b", after, phase(corev1.PodPending))}, 6},
		// The figures are those of one family: a dual-stack pod takes one of them.
		{"dual-stack pod takes one of the published family", []*corev1.Pod{pod("a", after, dualStack)}, 5},
		{"nil pod", []*corev1.Pod{nil}, 4},
		// The runtime asks the IPAM for an address when it makes the
		// sandbox: a pod bound before the sample but still being created
		// then had none the sample saw. A terminating pod keeps its address
		// until the sandbox is torn down.
		{"bound before, not started at the sample", []*corev1.Pod{pod("a", before, phase(corev1.PodPending))}, 5},
		{"bound after, terminating", []*corev1.Pod{pod("a", after, func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} })}, 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := EstimateUsed(stats, slices.Values(tc.pods)); got != tc.want {
				t.Fatalf("EstimateUsed = %d, want %d", got, tc.want)
			}
		})
	}
	s := stats
	s.Used = EstimateUsed(stats, slices.Values([]*corev1.Pod{pod("a"), pod("b"), pod("c"), pod("d"), pod("e"), pod("f"), pod("g"), pod("h"), pod("i"), pod("j")}))
	if s.Free() != 0 {
		t.Fatalf("over-full node has %d free, want 0", s.Free())
	}
}

// fuzzAbsent marks an annotation the fuzzer chose to leave out.
const fuzzAbsent = "\x00absent"

func FuzzParseNode(f *testing.F) {
	at := now.Add(-time.Minute).Format(time.RFC3339)
	f.Add("13", "4", at, fuzzAbsent, int64(0))
	f.Add("13", "4", at, "4", int64(0))
	f.Add("13", "4", at, "5", int64(0))
	f.Add("13", "4", at, "-0", int64(0))
	f.Add(fuzzAbsent, fuzzAbsent, fuzzAbsent, "1", int64(0))
	f.Add("13", "14", at, fuzzAbsent, int64(0))
	f.Add("16777216", "16777216", at, "16777216", int64(time.Minute))
	f.Add("16777217", "0", at, fuzzAbsent, int64(0))
	f.Add("9223372036854775808", "1", at, "9223372036854775808", int64(0))
	f.Add(fuzzAbsent, "1", at, fuzzAbsent, int64(0))
	f.Add(fuzzAbsent, fuzzAbsent, fuzzAbsent, fuzzAbsent, int64(0))
	f.Add("+7", "-0", "9999-12-31T23:59:59Z", "+0", int64(-1))
	f.Add("13", "1", "2026-05-01T12:00:60Z", fuzzAbsent, int64(1))
	f.Fuzz(func(t *testing.T, capacity, used, sampledAt, leaked string, maxAge int64) {
		a := map[string]string{}
		for k, v := range map[string]string{AnnotationCapacity: capacity, AnnotationUsed: used, AnnotationSampledAt: sampledAt, AnnotationLeaked: leaked} {
			if v != fuzzAbsent {
				a[k] = v
			}
		}
		s, err := ParseNode(a, now, time.Duration(maxAge))
		if err != nil {
			if !IsUnknown(err) {
				t.Fatalf("error %v is not classified as unknown", err)
			}
			if !sample.IsStale(err) {
				if s != (NodeStats{}) {
					t.Fatalf("error result carries stats %+v", s)
				}
				return
			}
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("ParseNode accepted %+v that does not validate: %v", s, err)
		}
		if s.Free() < 0 || s.Free() > s.Capacity {
			t.Fatalf("free %d out of range for %+v", s.Free(), s)
		}
		if _, has := a[AnnotationLeaked]; s.LeakedKnown != has || s.Leaked < 0 || s.Leaked > s.Used {
			t.Fatalf("leaked %d (known %v) out of range for %+v from %q", s.Leaked, s.LeakedKnown, s, leaked)
		}
		if s.SampledAt.After(now.Add(sample.ClockSkewAllowance)) {
			t.Fatalf("accepted a sample from the future: %s", s.SampledAt)
		}
		if y := s.SampledAt.UTC().Year(); y < 0 || y > 9999 {
			return
		}
		back, err := ParseNode(s.Annotations(), now, 0)
		if err != nil || back.Capacity != s.Capacity || back.Used != s.Used || back.Leaked != s.Leaked || back.LeakedKnown != s.LeakedKnown ||
			!back.SampledAt.Equal(s.SampledAt.Truncate(time.Second)) {
			t.Fatalf("round trip of %+v: %+v, %v", s, back, err)
		}
	})
}

func FuzzNewNodeStats(f *testing.F) {
	f.Add(int64(13), int64(4), int64(2))
	f.Add(int64(13), int64(4), int64(5))
	f.Add(int64(math.MaxInt64), int64(math.MinInt64), int64(math.MaxInt64))
	f.Fuzz(func(t *testing.T, capacity, used, leaked int64) {
		s := NewNodeStats(capacity, used, now)
		if err := s.Validate(); err != nil {
			t.Fatalf("NewNodeStats(%d, %d) = %+v: %v", capacity, used, s, err)
		}
		if l := s.WithLeaked(leaked); l.Validate() != nil || !l.LeakedKnown || (leaked >= 0 && leaked <= s.Used && l.Leaked != leaked) {
			t.Fatalf("%+v.WithLeaked(%d) = %+v: %v", s, leaked, l, l.Validate())
		}
		if capacity >= 0 && used >= 0 && capacity <= MaxCount && used <= capacity && (s.Capacity != capacity || s.Used != used) {
			t.Fatalf("NewNodeStats changed in-range figures: %+v", s)
		}
	})
}
