package sample

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func TestParseCount(t *testing.T) {
	tests := []struct {
		v      string
		limit  int64
		want   int64
		reason string
	}{
		{v: "0", limit: 10, want: 0},
		{v: "10", limit: 10, want: 10},
		{v: "+7", limit: 10, want: 7},
		{v: "11", limit: 10, reason: "above the limit of 10"},
		{v: "-1", limit: 10, reason: "must not be negative"},
		{v: "1e3", limit: 10000, reason: "not a base-10 integer"},
		{v: "", limit: 10, reason: "not a base-10 integer"},
		{v: "9223372036854775808", limit: math.MaxInt64, reason: "out of the 64-bit integer range"},
		{v: "9223372036854775807", limit: math.MaxInt64, want: math.MaxInt64},
	}
	for _, tc := range tests {
		got, err := ParseCount("k", tc.v, tc.limit)
		if tc.reason == "" {
			if err != nil || got != tc.want {
				t.Errorf("ParseCount(%q, %d) = %d, %v; want %d", tc.v, tc.limit, got, err, tc.want)
			}
			continue
		}
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Key != "k" || ie.Value != tc.v || ie.Reason != tc.reason || got != 0 {
			t.Errorf("ParseCount(%q, %d) = %d, %v; want an InvalidError %q", tc.v, tc.limit, got, err, tc.reason)
		}
	}
}

func TestParseTime(t *testing.T) {
	for _, tc := range []struct {
		v      string
		reason string
	}{
		{v: "2026-05-01T11:00:00Z"},
		{v: "2026-05-01T14:00:59+02:00"}, // 59 s ahead: within the allowance
		{v: "2026-05-01T12:01:00Z"},      // exactly the allowance
		{v: "2026-05-01T12:01:01Z", reason: "more than 1m0s in the future"},
		{v: "2026-05-01 12:00:00", reason: "not an RFC 3339 time"},
		{v: "1714564800", reason: "not an RFC 3339 time"},
	} {
		got, err := ParseTime("k", tc.v, now)
		if tc.reason == "" {
			want, _ := time.Parse(time.RFC3339, tc.v)
			if err != nil || !got.Equal(want) {
				t.Errorf("ParseTime(%q) = %v, %v", tc.v, got, err)
			}
			continue
		}
		var ie *InvalidError
		if !errors.As(err, &ie) || ie.Key != "k" || ie.Reason != tc.reason {
			t.Errorf("ParseTime(%q) = %v, want reason %q", tc.v, err, tc.reason)
		}
	}
}

func TestCheckAge(t *testing.T) {
	at := now.Add(-time.Minute)
	for _, tc := range []struct {
		maxAge time.Duration
		stale  bool
	}{{0, false}, {-time.Second, false}, {time.Minute, false}, {2 * time.Minute, false}, {59 * time.Second, true}} {
		err := CheckAge("pod IP", at, now, tc.maxAge)
		if IsStale(err) != tc.stale || (err != nil && !tc.stale) {
			t.Errorf("CheckAge(maxAge %s) = %v, want stale %v", tc.maxAge, err, tc.stale)
		}
		if tc.stale && !strings.HasPrefix(err.Error(), "pod IP sample is 1m0s old") {
			t.Errorf("message %q does not name the sample and its age", err)
		}
	}
	// Saturating: a sample from year 1 is stale, not overflowed into the future.
	if err := CheckAge("", time.Time{}, now, time.Hour); !IsStale(err) {
		t.Errorf("year-1 sample: %v", err)
	}
}

func TestPresent(t *testing.T) {
	keys := []string{"a", "b", "c"}
	if ok, err := Present(map[string]string{"x": "1"}, "PID", keys...); ok || err != nil {
		t.Errorf("none present: %v, %v", ok, err)
	}
	if ok, err := Present(map[string]string{"a": "", "b": "", "c": ""}, "PID", keys...); !ok || err != nil {
		t.Errorf("all present: %v, %v", ok, err)
	}
	ok, err := Present(map[string]string{"a": "1", "c": "2"}, "pod IP", keys...)
	var ie *InvalidError
	if ok || !errors.As(err, &ie) || ie.Key != "b" || ie.Reason != "missing while other pod IP annotations are present" {
		t.Errorf("b missing: %v, %v", ok, err)
	}
	if !IsInvalid(errors.Join(errors.New("context"), err)) || IsStale(err) {
		t.Errorf("classification of a wrapped InvalidError")
	}
}

func TestFormatTimeRoundTrip(t *testing.T) {
	at := time.Date(2026, 5, 1, 13, 59, 58, 999_999_999, time.FixedZone("CEST", 2*3600))
	s := FormatTime(at)
	if s != "2026-05-01T11:59:58Z" {
		t.Fatalf("FormatTime = %q", s)
	}
	back, err := ParseTime("k", s, now)
	if err != nil || !back.Equal(at.Truncate(time.Second)) {
		t.Fatalf("ParseTime(FormatTime) = %v, %v", back, err)
	}
}

func TestPlacedAfter(t *testing.T) {
	scheduled := func(at time.Time) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))},
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)},
		}}}
	}
	sampledAt := now.Add(500 * time.Millisecond)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"nil pod", nil, false},
		{"not bound yet", &corev1.Pod{}, true},
		{"bound before", scheduled(now.Add(-time.Second)), false},
		{"bound in the sample's second", scheduled(now), true},
		{"bound after", scheduled(now.Add(time.Second)), true},
		{"PodScheduled false", &corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(now.Add(-time.Hour))}}}}, true},
	} {
		if got := PlacedAfter(tc.pod, sampledAt); got != tc.want {
			t.Errorf("%s: PlacedAfter = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestInSample(t *testing.T) {
	sampledAt := now.Add(500 * time.Millisecond)
	pod := func(phase corev1.PodPhase, boundAt time.Time, states ...corev1.ContainerStatus) *corev1.Pod {
		return &corev1.Pod{Status: corev1.PodStatus{
			Phase: phase,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(boundAt)},
			},
			ContainerStatuses: states,
		}}
	}
	running := func(at time.Time) corev1.ContainerStatus {
		return corev1.ContainerStatus{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}}
	}
	waiting := corev1.ContainerStatus{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	restarting := corev1.ContainerStatus{
		State:                corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
		LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{StartedAt: metav1.NewTime(now.Add(-time.Minute))}},
	}
	bound := now.Add(-time.Minute)
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"nil pod", nil, false},
		{"started before", pod(corev1.PodRunning, bound, running(now.Add(-time.Second))), true},
		{"one of two started before", pod(corev1.PodRunning, bound, waiting, running(now.Add(-time.Second))), true},
		{"bound before, creating at the sample", pod(corev1.PodPending, bound, waiting), false},
		{"bound before, started in the sample's second", pod(corev1.PodRunning, bound, running(now)), false},
		{"bound before, started after", pod(corev1.PodRunning, bound, running(now.Add(time.Second))), false},
		{"crash-looping: a previous run started before", pod(corev1.PodRunning, bound, restarting), true},
		{"bound in the sample's second", pod(corev1.PodRunning, now, running(now.Add(-time.Second))), false},
		{"no container status, Running", pod(corev1.PodRunning, bound), true},
		{"container statuses without a state, Running", pod(corev1.PodRunning, bound, corev1.ContainerStatus{Ready: true}), true},
		{"no container status, Pending", pod(corev1.PodPending, bound), false},
		{"no status at all", &corev1.Pod{}, false},
	} {
		if got := InSample(tc.pod, sampledAt); got != tc.want {
			t.Errorf("%s: InSample = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzParseCount(f *testing.F) {
	f.Add("42", int64(100))
	f.Add("-0", int64(0))
	f.Add("9223372036854775808", int64(math.MaxInt64))
	f.Add("0x10", int64(1<<24))
	f.Fuzz(func(t *testing.T, v string, limit int64) {
		n, err := ParseCount("k", v, limit)
		if err != nil {
			if !IsInvalid(err) || n != 0 {
				t.Fatalf("ParseCount(%q) = %d, %v: not a clean InvalidError", v, n, err)
			}
			return
		}
		if n < 0 || n > limit {
			t.Fatalf("ParseCount(%q, %d) = %d outside [0, limit]", v, limit, n)
		}
	})
}

func FuzzParseTime(f *testing.F) {
	f.Add("2026-05-01T12:00:00Z")
	f.Add("2026-05-01T12:00:60Z")
	f.Add("9999-12-31T23:59:59Z")
	f.Add("0000-01-01T00:00:00+23:59")
	f.Fuzz(func(t *testing.T, v string) {
		got, err := ParseTime("k", v, now)
		if err != nil {
			if !IsInvalid(err) || !got.IsZero() {
				t.Fatalf("ParseTime(%q) = %v, %v: not a clean InvalidError", v, got, err)
			}
			return
		}
		if got.After(now.Add(ClockSkewAllowance)) {
			t.Fatalf("accepted %q, later than the allowance", v)
		}
	})
}

// Quote never returns more than MaxEcho characters of quoted value, however
// many escapes the value needs.
func TestQuoteIsBounded(t *testing.T) {
	for _, v := range []string{
		"", "short", strings.Repeat("9", 5000), strings.Repeat("\x00", 300), strings.Repeat("é", 300),
		strings.Repeat("\xff", 300), "ab" + strings.Repeat("\u2028", 100),
	} {
		q := Quote(v)
		quoted, _, _ := strings.Cut(q, "… (")
		if len(quoted) > MaxEcho {
			t.Errorf("Quote(%d bytes) = %d characters of quoted value: %s", len(v), len(quoted), q)
		}
		if len(strconv.Quote(v)) <= MaxEcho && q != strconv.Quote(v) {
			t.Errorf("Quote(%q) = %s, want it whole", v, q)
		}
	}
}

// Quote never panics, keeps at most MaxEcho characters of quoted value, and
// quotes a short enough value whole.
func FuzzQuote(f *testing.F) {
	for _, v := range []string{"", "a", strings.Repeat("\x00", 63), strings.Repeat("é", 40), "\xff\xfe"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		q := Quote(v)
		if whole := strconv.Quote(v); len(whole) > MaxEcho {
			quoted, _, _ := strings.Cut(q, "… (")
			if len(quoted) > MaxEcho {
				t.Fatalf("Quote(%q) keeps %d characters", v, len(quoted))
			}
		}
		if whole := strconv.Quote(v); len(whole) <= MaxEcho && q != whole {
			t.Fatalf("Quote(%q) = %s, want %s", v, q, whole)
		}
	})
}
