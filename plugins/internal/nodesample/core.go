package nodesample

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/plugins/internal/nodecache"
)

// Core is what NodePIDs and NodeIPs share besides their figure: the wiring
// to the scheduler, the per-node cache of entries E (with the summary
// Summarize builds), the unknown-node rule and NormalizeScore. A plugin
// embeds it and sets Cache in its New.
type Core[E any] struct {
	Handle fwk.Handle
	// MaxSampleAge is the age beyond which a sample counts as unknown; 0:
	// no limit.
	MaxSampleAge time.Duration
	// UnknownScore is the score of a node whose headroom is unknown, or
	// config.UnknownNodeScoreMeanOfKnown.
	UnknownScore int64
	// Ample is the free units after placement from which a node scores as
	// well as any (ScoreOf); 0: no limit.
	Ample int64
	Cache *nodecache.Cache[E]
	Clock clock.PassiveClock
	// NodeLister lets the pod-deletion queueing hint look at the pod's
	// node; nil when the handle has no informer factory.
	NodeLister corelisters.NodeLister
}

// NewCore returns the core of a plugin built with handle h; the caller
// sets Cache.
func NewCore[E any](h fwk.Handle, maxSampleAge time.Duration, unknownScore, ample int64) Core[E] {
	c := Core[E]{Handle: h, MaxSampleAge: maxSampleAge, UnknownScore: unknownScore, Ample: ample, Clock: clock.RealClock{}}
	if h != nil && h.SharedInformerFactory() != nil {
		c.NodeLister = h.SharedInformerFactory().Core().V1().Nodes().Lister()
	}
	return c
}

// NewCache returns the per-node cache of a plugin built on Core: it keeps
// the bounds FitsEveryNode and AmpleEverywhere read.
func NewCache[E any](h fwk.Handle, compute nodecache.ComputeFunc[E], summarize nodecache.SummaryFunc[E]) *nodecache.Cache[E] {
	return nodecache.New(h, compute, summarize, bounds...)
}

// ScoreOf is Score's raw score of a node with known headroom for a pod that
// needs need units: the free units after placement, counted up to Ample.
func (c *Core[E]) ScoreOf(sum nodecache.Summary, need int64) int64 {
	raw := FreeAfter(Free(sum), need)
	if c.Ample > 0 {
		raw = min(raw, c.Ample)
	}
	return raw
}

// AmpleEverywhere reports whether Score would give each of nodes (the
// candidates) the same score, MaxNodeScore, for a pod that needs need
// units: every candidate with valid annotations keeps Ample units free after
// placement (so each raw score is Ample, the best), and a candidate of
// unknown headroom would get MaxNodeScore too (UnknownScore is the mean of
// the known nodes' scores or MaxNodeScore) or there is none, stale samples
// included. PreScore then skips Score: it would change no ranking. It
// refreshes the cache for the cycle and reads the bounds over every node
// (nodecache.BoundsFor), which hold for the candidates.
func (c *Core[E]) AmpleEverywhere(ctx context.Context, state fwk.CycleState, nodes []fwk.NodeInfo, need int64, now time.Time) bool {
	if c.Ample <= 0 {
		return false
	}
	b, ok := c.Cache.BoundsFor(ctx, state, nodes)
	if !ok || b.Least[sumFree] < c.Ample || b.Least[sumFree]-c.Ample < need {
		return false
	}
	unknownScoresMax := c.UnknownScore == config.UnknownNodeScoreMeanOfKnown || c.UnknownScore == fwk.MaxNodeScore
	return unknownScoresMax || now.UnixNano() <= b.Least[sumUsableUntil]
}

// FitsEveryNode refreshes the cache for the cycle (PreFilter calls it) and
// returns the bounds when every node of the snapshot with known headroom has
// room for need units: Filter then passes every NodeInfo they cover
// (Bounds.Covers) without reading its summary, and judges the others (copies
// with nominated pods added) as before. Otherwise, or without a snapshot, it
// returns the zero Bounds, which cover nothing.
func (c *Core[E]) FitsEveryNode(ctx context.Context, state fwk.CycleState, need int64) nodecache.Bounds {
	b, ok := c.Cache.Refresh(ctx, state)
	if !ok || need > Room(b.Least) {
		return nodecache.Bounds{}
	}
	return b
}

// Known returns the node's summary and whether its headroom is known at
// now (valid annotations, a fresh sample). It allocates nothing.
func (c *Core[E]) Known(ctx context.Context, ni fwk.NodeInfo, now time.Time) (nodecache.Summary, bool) {
	sum := c.Cache.Summary(ctx, ni)
	return sum, Usable(sum, now)
}

// AnyKnown reports whether one of the nodes has known headroom at now:
// when none has, every node would get the same score, and PreScore skips.
func (c *Core[E]) AnyKnown(ctx context.Context, nodes []fwk.NodeInfo, now time.Time) bool {
	for _, ni := range nodes {
		if ni.Node() == nil {
			continue
		}
		if _, ok := c.Known(ctx, ni, now); ok {
			return true
		}
	}
	return false
}

// NormalizeScore scales the free units after placement (Score's raw
// scores) so that the node with the most scores MaxNodeScore and the
// others in proportion; nodes with unknown headroom get UnknownScore, by
// default the mean of the known nodes' scores.
func (c *Core[E]) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	Normalize(scores, c.UnknownScore)
	return nil
}
