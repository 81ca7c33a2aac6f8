package figure

import (
	"context"
	"math"
	"math/bits"
	"time"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/plugins/internal/nodecache"
)

// UnknownRaw marks, between Score and NormalizeScore, a node whose headroom
// is unknown; Normalize gives it the configured score.
const UnknownRaw int64 = -1

// FreeAfter is what a node with free units (estimated) has left after
// placing a pod that needs need of them: the raw score, never negative.
func FreeAfter(free, need int64) int64 {
	if need >= free {
		return 0
	}
	return free - need
}

// Scale maps a raw score (free units after placement) onto
// [0, MaxNodeScore] relative to the best node: ⌊raw·100/best⌋. Only a node
// with the most free units reaches MaxNodeScore, so with the plugin alone
// each pod goes to a node with the most left. The product is taken in 128
// bits, so any int64 works.
func Scale(raw, best int64) int64 {
	if best <= 0 || raw <= 0 {
		return fwk.MinNodeScore
	}
	raw = min(raw, best)
	hi, lo := bits.Mul64(uint64(raw), uint64(fwk.MaxNodeScore))
	// raw ≤ best, so hi < best and the quotient fits in 64 bits.
	q, _ := bits.Div64(hi, lo, uint64(best))
	return int64(q)
}

// Normalize is NormalizeScore: raw scores (FreeAfter, or UnknownRaw)
// become Scale(raw, best raw), and nodes with unknown headroom get
// unknownScore, or with config.UnknownNodeScoreMeanOfKnown the mean of the
// known nodes' scores, so that they are neither favoured nor penalised
// against them. It allocates nothing.
func Normalize(scores fwk.NodeScoreList, unknownScore int64) {
	var best int64
	for i := range scores {
		best = max(best, scores[i].Score)
	}
	var sum, known int64
	for i := range scores {
		if scores[i].Score != UnknownRaw {
			scores[i].Score = Scale(scores[i].Score, best)
			sum += scores[i].Score // at most MaxNodeScore per node: no overflow
			known++
		}
	}
	unknown := unknownScore
	if unknown == config.UnknownNodeScoreMeanOfKnown {
		unknown = fwk.MaxNodeScore / 2 // no known node: PreScore skips, but stay defined
		if known > 0 {
			unknown = sum / known
		}
	}
	for i := range scores {
		if scores[i].Score == UnknownRaw {
			scores[i].Score = unknown
		}
	}
}

// The summary (nodecache.Summary) the plugin keeps of a node, all that
// Filter and Score read of it on a hit: the estimated free units, the room
// above the floor (the most a pod may need and still pass Filter) and the
// last time, in Unix nanoseconds, at which the sample may be used.
const (
	sumFree = iota
	sumRoom
	sumUsableUntil
)

// summarize is the summary of a sample read with err, with free and room,
// which goes stale after staleAfter (zero: never).
func summarize(free, room int64, staleAfter time.Time, err error) nodecache.Summary {
	var s nodecache.Summary
	switch {
	case err != nil:
		// Unknown headroom: never usable, and no limit on the least room
		// over the nodes (bounds), since Filter passes the node.
		s[sumUsableUntil] = math.MinInt64
		s[sumFree], s[sumRoom] = math.MaxInt64, math.MaxInt64
		return s
	case staleAfter.IsZero():
		s[sumUsableUntil] = math.MaxInt64
	default:
		s[sumUsableUntil] = staleAfter.UnixNano()
	}
	s[sumFree], s[sumRoom] = free, room
	return s
}

// bounds are what the per-node state keeps over the snapshot's nodes
// (Refresh): the least room and the least free units of the nodes whose
// annotations are valid, stale or not (Filter passes a stale node and Score
// gives it the unknown score, so counting it only makes the bounds lower
// than they need be), and the least time until which a sample may be used
// (math.MinInt64 when a node's annotations are missing or invalid).
var bounds = []nodecache.Bound{{Figure: sumRoom}, {Figure: sumFree}, {Figure: sumUsableUntil}}

// usable reports whether the summarised node's headroom is known at now:
// valid annotations and a sample no older than MaxSampleAge.
func usable(s nodecache.Summary, now time.Time) bool { return now.UnixNano() <= s[sumUsableUntil] }

// room is the summarised node's free units above its floor.
func room(s nodecache.Summary) int64 { return s[sumRoom] }

// scoreOf is Score's raw score of a node with known headroom for a pod
// that needs need units: the free units after placement, up to Ample.
func (pl *Plugin[S]) scoreOf(sum nodecache.Summary, need int64) int64 {
	raw := FreeAfter(sum[sumFree], need)
	if pl.settings.Ample > 0 {
		raw = min(raw, pl.settings.Ample)
	}
	return raw
}

// ampleEverywhere reports whether Score would give each of nodes (the
// candidates) the same score, MaxNodeScore: every candidate with valid
// annotations keeps Ample units free after placement (so each raw score is
// Ample, the best), and a candidate of unknown headroom would get
// MaxNodeScore too (UnknownScore is the mean of the known nodes' scores or
// MaxNodeScore) or there is none, stale samples included. PreScore then
// skips Score: it would change no ranking.
func (pl *Plugin[S]) ampleEverywhere(ctx context.Context, state fwk.CycleState, nodes []fwk.NodeInfo, need int64, now time.Time) bool {
	ample := pl.settings.Ample
	if ample <= 0 {
		return false
	}
	unknown := pl.settings.UnknownScore
	unknownScoresMax := unknown == config.UnknownNodeScoreMeanOfKnown || unknown == fwk.MaxNodeScore
	// A lower least can only make it fail: a claim for nodecache.Claim.
	_, ok := pl.nodes.Claim(ctx, state, nodes, func(b nodecache.Bounds) bool {
		if b.Least[sumFree] < ample || b.Least[sumFree]-ample < need {
			return false
		}
		return unknownScoresMax || now.UnixNano() <= b.Least[sumUsableUntil]
	})
	return ok
}

// fitsEveryNode refreshes the per-node state for the cycle (PreFilter
// calls it) and returns the bounds when every node of the snapshot with
// known headroom has room for need units: Filter then passes every
// NodeInfo they cover without reading its summary, and judges the others
// (copies with nominated pods added) one by one. Otherwise, or without a
// snapshot, it returns the zero Bounds, which cover nothing.
func (pl *Plugin[S]) fitsEveryNode(ctx context.Context, state fwk.CycleState, need int64) nodecache.Bounds {
	b, ok := pl.nodes.Refresh(ctx, state)
	if !ok || need > room(b.Least) {
		return nodecache.Bounds{}
	}
	return b
}

// known returns the node's summary and whether its headroom is known at
// now (valid annotations, a fresh sample). It allocates nothing.
func (pl *Plugin[S]) known(ctx context.Context, ni fwk.NodeInfo, now time.Time) (nodecache.Summary, bool) {
	sum := pl.nodes.Summary(ctx, ni)
	return sum, usable(sum, now)
}

// anyKnown reports whether one of the nodes has known headroom at now.
func (pl *Plugin[S]) anyKnown(ctx context.Context, nodes []fwk.NodeInfo, now time.Time) bool {
	for _, ni := range nodes {
		if ni.Node() == nil {
			continue
		}
		if _, ok := pl.known(ctx, ni, now); ok {
			return true
		}
	}
	return false
}
