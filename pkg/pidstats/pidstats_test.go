package pidstats

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

func ann(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}

func TestParseNode(t *testing.T) {
	at := now.Add(-30 * time.Second).Format(time.RFC3339)
	full := func(extra ...string) map[string]string {
		m := ann(AnnotationCapacity, "32768", AnnotationUsed, "1200", AnnotationSampledAt, at)
		for i := 0; i+1 < len(extra); i += 2 {
			if extra[i+1] == "<delete>" {
				delete(m, extra[i])
				continue
			}
			m[extra[i]] = extra[i+1]
		}
		return m
	}
	type want int
	const (
		ok want = iota
		noStats
		invalid
		stale
	)
	tests := []struct {
		name     string
		ann      map[string]string
		maxAge   time.Duration
		want     want
		wantKey  string // for invalid
		wantStat NodeStats
	}{
		{name: "nil map", ann: nil, want: noStats},
		{name: "unrelated annotations", ann: ann("foo", "bar"), want: noStats},
		{name: "reserved alone is not a sample", ann: ann(AnnotationReserved, "100"), want: noStats},
		{name: "valid, reserved absent", ann: full(), want: ok,
			wantStat: NodeStats{Capacity: 32768, Used: 1200, SampledAt: now.Add(-30 * time.Second)}},
		{name: "valid with reserved", ann: full(AnnotationReserved, "1000"), want: ok,
			wantStat: NodeStats{Capacity: 32768, Reserved: 1000, Used: 1200, SampledAt: now.Add(-30 * time.Second)}},
		{name: "valid with fractional seconds and offset", ann: full(AnnotationSampledAt, "2026-05-01T13:59:00.5+02:00"), want: ok,
			wantStat: NodeStats{Capacity: 32768, Used: 1200, SampledAt: now.Add(-59*time.Second - 500*time.Millisecond)}},
		{name: "zero everything is valid", ann: full(AnnotationCapacity, "0", AnnotationUsed, "0", AnnotationReserved, "0"), want: ok,
			wantStat: NodeStats{SampledAt: now.Add(-30 * time.Second)}},
		{name: "used equals capacity", ann: full(AnnotationUsed, "32768"), want: ok,
			wantStat: NodeStats{Capacity: 32768, Used: 32768, SampledAt: now.Add(-30 * time.Second)}},
		{name: "max capacity", ann: full(AnnotationCapacity, "4194304", AnnotationReserved, "4194304"), want: ok,
			wantStat: NodeStats{Capacity: MaxNodePIDs, Reserved: MaxNodePIDs, Used: 1200, SampledAt: now.Add(-30 * time.Second)}},
		{name: "capacity above 2^22", ann: full(AnnotationCapacity, "4194305"), want: invalid, wantKey: AnnotationCapacity},
		{name: "max int64 capacity", ann: full(AnnotationCapacity, "9223372036854775807", AnnotationReserved, "9223372036854775807"),
			want: invalid, wantKey: AnnotationCapacity},

		{name: "capacity missing", ann: full(AnnotationCapacity, "<delete>"), want: invalid, wantKey: AnnotationCapacity},
		{name: "used missing", ann: full(AnnotationUsed, "<delete>"), want: invalid, wantKey: AnnotationUsed},
		{name: "sampled-at missing", ann: full(AnnotationSampledAt, "<delete>"), want: invalid, wantKey: AnnotationSampledAt},
		{name: "only sampled-at", ann: ann(AnnotationSampledAt, at), want: invalid, wantKey: AnnotationCapacity},
		{name: "capacity empty", ann: full(AnnotationCapacity, ""), want: invalid, wantKey: AnnotationCapacity},
		{name: "capacity not a number", ann: full(AnnotationCapacity, "lots"), want: invalid, wantKey: AnnotationCapacity},
		{name: "capacity with unit", ann: full(AnnotationCapacity, "32k"), want: invalid, wantKey: AnnotationCapacity},
		{name: "capacity with space", ann: full(AnnotationCapacity, " 32768"), want: invalid, wantKey: AnnotationCapacity},
		{name: "capacity hex", ann: full(AnnotationCapacity, "0x8000"), want: invalid, wantKey: AnnotationCapacity},
		{name: "capacity overflows", ann: full(AnnotationCapacity, "9223372036854775808"), want: invalid, wantKey: AnnotationCapacity},
		{name: "capacity negative", ann: full(AnnotationCapacity, "-1"), want: invalid, wantKey: AnnotationCapacity},
		{name: "reserved malformed", ann: full(AnnotationReserved, "1.5"), want: invalid, wantKey: AnnotationReserved},
		{name: "reserved negative", ann: full(AnnotationReserved, "-100"), want: invalid, wantKey: AnnotationReserved},
		{name: "reserved above capacity", ann: full(AnnotationReserved, "32769"), want: invalid, wantKey: AnnotationReserved},
		{name: "used malformed", ann: full(AnnotationUsed, "12e2"), want: invalid, wantKey: AnnotationUsed},
		{name: "used negative", ann: full(AnnotationUsed, "-5"), want: invalid, wantKey: AnnotationUsed},
		{name: "used above capacity", ann: full(AnnotationUsed, "32769"), want: invalid, wantKey: AnnotationUsed},
		{name: "used above capacity, with sign", ann: full(AnnotationUsed, "+32769"), want: invalid, wantKey: AnnotationUsed},
		{name: "time not RFC 3339", ann: full(AnnotationSampledAt, "2026-05-01 12:00:00"), want: invalid, wantKey: AnnotationSampledAt},
		{name: "time as unix seconds", ann: full(AnnotationSampledAt, "1777636800"), want: invalid, wantKey: AnnotationSampledAt},
		{name: "time empty", ann: full(AnnotationSampledAt, ""), want: invalid, wantKey: AnnotationSampledAt},
		{name: "time in the future beyond skew", ann: full(AnnotationSampledAt, now.Add(ClockSkewAllowance+time.Second).Format(time.RFC3339)),
			want: invalid, wantKey: AnnotationSampledAt},
		{name: "time in the future within skew", ann: full(AnnotationSampledAt, now.Add(ClockSkewAllowance).Format(time.RFC3339)), want: ok,
			wantStat: NodeStats{Capacity: 32768, Used: 1200, SampledAt: now.Add(ClockSkewAllowance)}},

		{name: "stale", ann: full(), maxAge: 10 * time.Second, want: stale,
			wantStat: NodeStats{Capacity: 32768, Used: 1200, SampledAt: now.Add(-30 * time.Second)}},
		{name: "exactly maxAge old is fresh", ann: full(), maxAge: 30 * time.Second, want: ok,
			wantStat: NodeStats{Capacity: 32768, Used: 1200, SampledAt: now.Add(-30 * time.Second)}},
		{name: "ancient sample, no limit", ann: full(AnnotationSampledAt, "0001-01-01T00:00:00Z"), want: ok,
			wantStat: NodeStats{Capacity: 32768, Used: 1200, SampledAt: time.Time{}}},
		{name: "ancient sample, limit", ann: full(AnnotationSampledAt, "0001-01-01T00:00:00Z"), maxAge: time.Hour, want: stale,
			wantStat: NodeStats{Capacity: 32768, Used: 1200, SampledAt: time.Time{}}},
		{name: "negative maxAge is no limit", ann: full(), maxAge: -time.Second, want: ok,
			wantStat: NodeStats{Capacity: 32768, Used: 1200, SampledAt: now.Add(-30 * time.Second)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseNode(tc.ann, now, tc.maxAge)
			switch tc.want {
			case ok:
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
			case noStats:
				if !errors.Is(err, ErrNoStats) || !IsNoStats(err) || IsInvalid(err) || IsStale(err) {
					t.Fatalf("want ErrNoStats, got %v", err)
				}
			case invalid:
				var ie *InvalidError
				if !errors.As(err, &ie) || !IsInvalid(err) || IsNoStats(err) || IsStale(err) {
					t.Fatalf("want *InvalidError, got %T %v", err, err)
				}
				if ie.Key != tc.wantKey || ie.Value != tc.ann[tc.wantKey] {
					t.Errorf("InvalidError = %+v, want key %q with value %q", ie, tc.wantKey, tc.ann[tc.wantKey])
				}
				if !strings.Contains(err.Error(), tc.wantKey) {
					t.Errorf("message %q does not name %s", err, tc.wantKey)
				}
				if got != (NodeStats{}) {
					t.Errorf("invalid result carries stats %+v", got)
				}
			case stale:
				var se *StaleError
				if !errors.As(err, &se) || !IsStale(err) || IsInvalid(err) || IsNoStats(err) {
					t.Fatalf("want *StaleError, got %T %v", err, err)
				}
				if se.MaxAge != tc.maxAge || se.Age <= tc.maxAge {
					t.Errorf("StaleError = %+v, maxAge %s", se, tc.maxAge)
				}
			}
			if tc.want != ok && !IsUnknown(err) {
				t.Errorf("IsUnknown(%v) = false", err)
			}
			if tc.want == ok || tc.want == stale {
				if got.Capacity != tc.wantStat.Capacity || got.Reserved != tc.wantStat.Reserved ||
					got.Used != tc.wantStat.Used || !got.SampledAt.Equal(tc.wantStat.SampledAt) {
					t.Errorf("stats = %+v, want %+v", got, tc.wantStat)
				}
			}
		})
	}
}

func TestIsUnknown(t *testing.T) {
	if IsUnknown(nil) {
		t.Error("IsUnknown(nil) = true")
	}
	if IsUnknown(errors.New("other")) {
		t.Error("IsUnknown(unrelated error) = true")
	}
	wrapped := errors.Join(errors.New("context"), &StaleError{Age: time.Hour, MaxAge: time.Minute})
	if !IsUnknown(wrapped) || !IsStale(wrapped) {
		t.Error("wrapped StaleError not recognised")
	}
}

func TestAllocatableAndFree(t *testing.T) {
	tests := []struct {
		s           NodeStats
		alloc, free int64
	}{
		{NodeStats{Capacity: 32768, Reserved: 1000, Used: 1200}, 31768, 30568},
		{NodeStats{Capacity: 32768, Used: 40000}, 32768, 0},
		{NodeStats{Capacity: 100, Reserved: 100, Used: 0}, 0, 0},
		{NodeStats{Capacity: 100, Reserved: 200}, 0, 0},
		// Values ParseNode never returns must still not overflow.
		{NodeStats{Capacity: math.MinInt64, Reserved: 1}, 0, 0},
		{NodeStats{Capacity: math.MaxInt64, Reserved: math.MinInt64, Used: math.MinInt64}, math.MaxInt64, math.MaxInt64},
		{NodeStats{Capacity: math.MaxInt64, Reserved: 0, Used: math.MaxInt64}, math.MaxInt64, 0},
		{NodeStats{Capacity: 10, Reserved: -5, Used: -5}, 10, 10},
	}
	for _, tc := range tests {
		if got := tc.s.Allocatable(); got != tc.alloc {
			t.Errorf("%+v.Allocatable() = %d, want %d", tc.s, got, tc.alloc)
		}
		if got := tc.s.Free(); got != tc.free {
			t.Errorf("%+v.Free() = %d, want %d", tc.s, got, tc.free)
		}
	}
}

func TestAnnotationsRoundTrip(t *testing.T) {
	in := NodeStats{Capacity: 4194304, Reserved: 2000, Used: 812, SampledAt: time.Date(2026, 5, 1, 13, 59, 30, 900_000_000, time.FixedZone("x", 7200))}
	a := in.Annotations()
	if len(a) != 4 {
		t.Fatalf("want 4 annotations, got %v", a)
	}
	if a[AnnotationSampledAt] != "2026-05-01T11:59:30Z" {
		t.Errorf("sampled-at = %q, want UTC with second resolution", a[AnnotationSampledAt])
	}
	out, err := ParseNode(a, now, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := in
	want.SampledAt = in.SampledAt.Truncate(time.Second)
	if out.Capacity != want.Capacity || out.Reserved != want.Reserved || out.Used != want.Used || !out.SampledAt.Equal(want.SampledAt) {
		t.Errorf("round trip: got %+v, want %+v", out, want)
	}
}

func TestSaturatingAdd(t *testing.T) {
	tests := []struct{ a, b, want int64 }{
		{1, 2, 3},
		{math.MaxInt64, 1, math.MaxInt64},
		{math.MaxInt64 - 1, 1, math.MaxInt64},
		{math.MaxInt64, math.MaxInt64, math.MaxInt64},
		{-5, 3, 3},
		{5, math.MinInt64, 5},
	}
	for _, tc := range tests {
		if got := SaturatingAdd(tc.a, tc.b); got != tc.want {
			t.Errorf("SaturatingAdd(%d, %d) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
