package nodepids

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/internal/nodecache"
	"github.com/headroom-k8s/headroom/plugins/internal/nodesample"
)

// nodeEntry is what NodePIDs knows of one node at one NodeInfo generation,
// kept in the plugins' shared per-node cache (plugins/internal/nodecache).
// Everything Filter and Score compare is worked out here, once per change of
// the node or its pods, so that they cost a cache lookup and a comparison.
type nodeEntry struct {
	// What Filter and Score read on a hit comes first, in one cache line
	// with the cache's generation.

	// free is the estimated free PIDs; room is free less the floor, the
	// most PIDs a pod may need and still pass Filter (negative when none).
	free, room int64
	// staleAfter is when the sample becomes too old to use; zero without an
	// age limit.
	staleAfter time.Time
	parseErr   error // from ParseNode, without an age limit

	// node is the Node object the sample was parsed from. Pod changes bump
	// the generation but keep the object, so the annotations need not be
	// parsed (nor an invalid one logged) again.
	node  *corev1.Node
	stats pidstats.NodeStats // Used as reported
	// estimatedUsed is stats.Used adjusted for the node's pods since the
	// sample (estimateUsed).
	estimatedUsed int64
}

// summary is what Filter and Score read of the entry on a hit (the cache
// keeps it in the node's slot).
func (e *nodeEntry) summary() nodecache.Summary {
	return nodesample.Summarize(e.free, e.room, e.staleAfter, e.parseErr)
}

// unknownReason returns why the node's headroom is unknown at now, or nil;
// it allocates, so it is for log lines only.
func (e *nodeEntry) unknownReason(now time.Time, maxAge time.Duration) error {
	if e.parseErr != nil {
		return e.parseErr
	}
	return e.stats.CheckAge(now, maxAge)
}

// estimated returns the sample with Used replaced by the estimate.
func (e *nodeEntry) estimated() pidstats.NodeStats {
	s := e.stats
	s.Used = e.estimatedUsed
	return s
}

// computeEntry is the cache's ComputeFunc: it parses the node's annotations
// (unless prev was parsed from the same Node object) and estimates its use.
// The clock is only used by ParseNode's clock-skew check; the age of a
// sample is judged at each use, since it changes without the generation
// changing.
func (pl *NodePIDs) computeEntry(ctx context.Context, ni fwk.NodeInfo, prev *nodeEntry) nodeEntry {
	node := ni.Node()
	e := nodeEntry{node: node}
	if prev != nil && prev.node == node {
		e.stats, e.parseErr, e.staleAfter = prev.stats, prev.parseErr, prev.staleAfter
	} else {
		e.stats, e.parseErr = pidstats.ParseNode(node.Annotations, pl.Clock.Now(), 0)
		pl.reportInvalid(ctx, node, prev, &e)
		if e.parseErr == nil && pl.MaxSampleAge > 0 {
			e.staleAfter = e.stats.SampledAt.Add(pl.MaxSampleAge)
		}
	}
	if e.parseErr == nil {
		e.estimatedUsed = estimateUsed(e.stats, node, ni, pl.defaultPodPIDs)
		est := e.estimated()
		e.free = est.Free()
		e.room = pl.strategy.room(e.free, est.Allocatable())
	}
	return e
}

// estimateUsed is the node's PID use as pkg/pidstats estimates it from the
// sample and the pods the scheduler holds for the node (RelieveNodePressure
// uses the same estimate).
func estimateUsed(stats pidstats.NodeStats, _ *corev1.Node, ni fwk.NodeInfo, defaultPodPIDs int64) int64 {
	return pidstats.EstimateUsedSeq(stats, nodesample.Pods(ni), defaultPodPIDs)
}
