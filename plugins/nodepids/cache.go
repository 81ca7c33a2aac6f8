package nodepids

import (
	"context"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// nodeEntry is what NodePIDs knows of one node at one NodeInfo generation:
// its parsed sample, or why it has none, and the use estimated from the
// sample and the node's pods.
type nodeEntry struct {
	generation int64
	// node is the Node object the sample was parsed from. Pod changes bump
	// the generation but keep the object, so the annotations need not be
	// parsed (nor an invalid one logged) again.
	node     *corev1.Node
	stats    pidstats.NodeStats // Used as reported
	parseErr error              // from ParseNode, without an age limit
	// estimatedUsed is stats.Used plus the pods placed after the sample.
	estimatedUsed int64
}

// estimated returns the sample with Used replaced by the estimate.
func (e *nodeEntry) estimated() pidstats.NodeStats {
	s := e.stats
	s.Used = e.estimatedUsed
	return s
}

// nodeCache keeps a nodeEntry per node across scheduling cycles. The
// scheduler bumps a NodeInfo's generation (one process-wide counter) on
// every change to the node or its pods, so an entry of the same generation
// is exact. Filter and Score read it in parallel for different nodes: a hit
// is a lock-free load that allocates nothing.
type nodeCache struct {
	defaultPodPIDs int64
	entries        sync.Map // node name → *nodeEntry
	size           atomic.Int64

	// recorder receives the Warning Events about invalid node annotations;
	// nil records none.
	recorder events.EventRecorder
}

// get returns the entry for ni, computing it on a miss. now is only used by
// ParseNode's clock-skew check; the age of a sample is judged by the caller
// at each use, since it changes without the generation changing. Only
// entries of the snapshot's own NodeInfos are stored (store): the scheduler
// also filters temporary copies (nominated pods, preemption dry runs) whose
// generation moves on every copy, and storing those would evict the
// snapshot's entry each cycle.
func (c *nodeCache) get(ctx context.Context, ni fwk.NodeInfo, now time.Time, store bool) *nodeEntry {
	node := ni.Node()
	generation := ni.GetGeneration()
	var prev *nodeEntry
	if v, ok := c.entries.Load(node.Name); ok {
		prev = v.(*nodeEntry)
		if prev.generation == generation {
			return prev
		}
	}

	e := &nodeEntry{generation: generation, node: node}
	if prev != nil && prev.node == node {
		e.stats, e.parseErr = prev.stats, prev.parseErr
	} else {
		e.stats, e.parseErr = pidstats.ParseNode(node.Annotations, now, 0)
		c.reportInvalid(ctx, node, prev, e)
	}
	if e.parseErr == nil {
		e.estimatedUsed = pidstats.EstimateUsedSeq(e.stats, podsOf(ni), c.defaultPodPIDs)
	}
	if !store {
		return e
	}
	if _, loaded := c.entries.Swap(node.Name, e); !loaded {
		c.size.Add(1)
	}
	return e
}

func podsOf(ni fwk.NodeInfo) iter.Seq[*corev1.Pod] {
	return func(yield func(*corev1.Pod) bool) {
		for _, pi := range ni.GetPods() {
			if !yield(pi.GetPod()) {
				return
			}
		}
	}
}

// prune drops the entries of nodes that lister no longer holds, once there
// are more entries than nodes, so deleted nodes do not accumulate.
func (c *nodeCache) prune(lister fwk.NodeInfoLister) {
	all, err := lister.List()
	if err != nil || c.size.Load() <= int64(len(all)) {
		return
	}
	c.entries.Range(func(name, v any) bool {
		if _, err := lister.Get(name.(string)); err != nil && c.entries.CompareAndDelete(name, v) {
			c.size.Add(-1)
		}
		return true
	})
}

// len returns the number of cached nodes.
func (c *nodeCache) len() int { return int(c.size.Load()) }
