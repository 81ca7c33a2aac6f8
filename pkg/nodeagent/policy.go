package nodeagent

import (
	"fmt"
	"math"
	"time"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// Policy decides whether a fresh sample is worth a Node write. Every write
// updates the Node object and wakes every Node watcher in the cluster, so
// small moves of the used count are not written.
type Policy struct {
	// HysteresisPIDs and HysteresisPercent (of allocatable PIDs) set the
	// threshold together: used must move by more than the larger of the two
	// since the last write. Zero disables either part.
	HysteresisPIDs    int64
	HysteresisPercent float64
	// MaxInterval bounds the time between writes, so that readers can tell
	// a live reporter from a dead one by the sample's age.
	MaxInterval time.Duration
}

// Threshold is the hysteresis in PIDs for a node with the given allocatable
// PIDs: max(HysteresisPIDs, HysteresisPercent% of allocatable).
func (p Policy) Threshold(allocatable int64) int64 {
	pct := float64(max(allocatable, 0)) * p.HysteresisPercent / 100
	var fromPct int64
	switch {
	case pct >= math.MaxInt64: // converting an out-of-range float is undefined
		fromPct = math.MaxInt64
	case pct > 0:
		fromPct = int64(math.Ceil(pct))
	}
	return max(p.HysteresisPIDs, fromPct, 0)
}

// Decide reports whether cur should be written, given the stats last
// written (nil if none) and the time at which a write becomes due
// regardless of change. The reason is for the log.
func (p Policy) Decide(last *pidstats.NodeStats, dueAt time.Time, cur pidstats.NodeStats, now time.Time) (bool, string) {
	switch {
	case last == nil:
		return true, "first sample"
	case cur.SampledAt.Equal(last.SampledAt):
		// Sampling has been failing: rewriting the same sample would only
		// hide that it is getting old.
		return false, "sample already written"
	case cur.Capacity != last.Capacity:
		return true, fmt.Sprintf("capacity changed from %d to %d", last.Capacity, cur.Capacity)
	case cur.Reserved != last.Reserved:
		return true, fmt.Sprintf("reserved changed from %d to %d", last.Reserved, cur.Reserved)
	}
	// Both are non-negative, so the difference cannot overflow.
	delta := cur.Used - last.Used
	if delta < 0 {
		delta = -delta
	}
	if th := p.Threshold(cur.Allocatable()); delta > th {
		return true, fmt.Sprintf("used moved by %d, more than the hysteresis of %d", delta, th)
	}
	if !now.Before(dueAt) {
		return true, "max interval reached"
	}
	return false, "within hysteresis"
}
