package nodeips

import (
	"context"
	"errors"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/pkg/sample"
	"github.com/headroom-k8s/headroom/plugins/internal/nodecache"
	"github.com/headroom-k8s/headroom/plugins/internal/nodesample"
)

// nodeEntry is what NodeIPs knows of one node at one NodeInfo generation,
// kept in the plugins' shared per-node cache (plugins/internal/nodecache).
// Everything Filter and Score compare is worked out here, once per change of
// the node or its pods, so that they cost a cache lookup and a comparison.
type nodeEntry struct {
	// node is the Node object the sample was parsed from. Pod changes bump
	// the generation but keep the object, so the annotations need not be
	// parsed (nor an invalid one logged) again.
	node     *corev1.Node
	stats    ipstats.NodeStats // Used as reported
	parseErr error             // from ParseNode, without an age limit
	// estimatedUsed is stats.Used plus the node's pods placed after the
	// sample that take an IP (ipstats.EstimateUsed).
	estimatedUsed int64
	// free is the estimated free pod IPs; room is free less MinFreeIPs,
	// which must be at least the pod's one IP to pass Filter.
	free, room int64
	// staleAfter is when the sample becomes too old to use; zero without an
	// age limit.
	staleAfter time.Time
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

// computeEntry is the cache's ComputeFunc: it parses the node's annotations
// (unless prev was parsed from the same Node object) and estimates its use.
// The clock is only used by ParseNode's clock-skew check; the age of a
// sample is judged at each use, since it changes without the generation
// changing.
func (pl *NodeIPs) computeEntry(ctx context.Context, ni fwk.NodeInfo, prev *nodeEntry) nodeEntry {
	node := ni.Node()
	e := nodeEntry{node: node}
	if prev != nil && prev.node == node {
		e.stats, e.parseErr, e.staleAfter = prev.stats, prev.parseErr, prev.staleAfter
	} else {
		e.stats, e.parseErr = ipstats.ParseNode(node.Annotations, pl.Clock.Now(), 0)
		pl.reportInvalid(ctx, node, prev, &e)
		if e.parseErr == nil && pl.MaxSampleAge > 0 {
			e.staleAfter = e.stats.SampledAt.Add(pl.MaxSampleAge)
		}
	}
	if e.parseErr == nil {
		e.estimatedUsed = ipstats.EstimateUsed(e.stats, nodesample.Pods(ni))
		est := e.stats
		est.Used = e.estimatedUsed
		e.free = est.Free()
		e.room = e.free - pl.minFreeIPs
	}
	return e
}

// reportInvalid tells the operator that a node's pod-IP annotations are
// ignored: a log line and a Warning Event on the Node, once per distinct
// problem (the node agent rewrites the annotations, but the same invalid
// value is reported once), not per scheduling cycle or Node update.
func (pl *NodeIPs) reportInvalid(ctx context.Context, node *corev1.Node, prev, e *nodeEntry) {
	if !sample.IsInvalid(e.parseErr) {
		return
	}
	if prev != nil && prev.parseErr != nil && prev.parseErr.Error() == e.parseErr.Error() {
		return
	}
	// Structured logging has no warning level; Info at V(0) is its warning.
	klog.FromContext(ctx).Info("Node has an invalid pod-IP annotation; its pod-IP headroom counts as unknown",
		"node", klog.KObj(node), "err", e.parseErr)
	var ie *sample.InvalidError
	if errors.As(e.parseErr, &ie) {
		headroommetrics.InvalidAnnotation(Name, ie.Key)
	}
	if pl.Handle != nil && pl.Handle.EventRecorder() != nil {
		pl.Handle.EventRecorder().Eventf(node, nil, corev1.EventTypeWarning, EventReasonInvalidIPs, "Scheduling",
			"%s; the node's pod-IP headroom counts as unknown", e.parseErr)
	}
}
