package pidstats

import (
	"testing"
	"time"
)

func TestCheckAge(t *testing.T) {
	s := NodeStats{Capacity: 100, Used: 10, SampledAt: now.Add(-time.Minute)}
	tests := []struct {
		name   string
		maxAge time.Duration
		stale  bool
	}{
		{name: "no limit", maxAge: 0},
		{name: "negative limit means none", maxAge: -time.Second},
		{name: "younger than the limit", maxAge: 2 * time.Minute},
		{name: "exactly the limit", maxAge: time.Minute},
		{name: "older than the limit", maxAge: 59 * time.Second, stale: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := s.CheckAge(now, tc.maxAge)
			if IsStale(err) != tc.stale || (err != nil && !tc.stale) {
				t.Fatalf("CheckAge(maxAge %s) = %v, want stale %v", tc.maxAge, err, tc.stale)
			}
			// ParseNode applies the same rule.
			_, perr := ParseNode(s.Annotations(), now, tc.maxAge)
			if IsStale(perr) != tc.stale {
				t.Fatalf("ParseNode stale = %v, CheckAge stale = %v", IsStale(perr), tc.stale)
			}
		})
	}
}
