// Package nodesample is what Headroom's scheduler plugins that read a node
// sample from annotations (NodePIDs, NodeIPs) share: their core (Core: the
// wiring, the per-node cache of plugins/internal/nodecache and the summary
// Filter and Score read from it), how a node's free units after placing the
// pod become a score, with the rule for nodes whose headroom is unknown,
// and when a pod that a plugin rejected is worth retrying after a node's
// sample changes or a pod leaves a node.
package nodesample

import (
	"iter"
	"math"
	"math/bits"
	"time"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/pkg/sample"
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

// Normalize is the plugins' NormalizeScore: raw scores (FreeAfter, or
// UnknownRaw) become Scale(raw, best raw), and nodes with unknown headroom
// get unknownScore, or with config.UnknownNodeScoreMeanOfKnown the mean of
// the known nodes' scores, so that they are neither favoured nor penalised
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

// Pods yields the pods of a NodeInfo, for the models' estimates
// (pidstats.EstimateUsedSeq, ipstats.EstimateUsed), without copying them.
func Pods(ni fwk.NodeInfo) iter.Seq[*corev1.Pod] {
	return func(yield func(*corev1.Pod) bool) {
		for _, pi := range ni.GetPods() {
			if !yield(pi.GetPod()) {
				return
			}
		}
	}
}

// Reading is what a queueing hint reads from one version of a Node: the
// sample parsed with the plugin's age limit.
type Reading struct {
	// Err is the parse error: nil when the headroom is known, a stale
	// error (sample.IsStale) when the sample is too old, another error when
	// the annotations are missing or invalid.
	Err error
	// Free is the free units at the reported use; SampledAt the sample's
	// time. Both are meaningful when Err is nil.
	Free      int64
	SampledAt time.Time
}

// NodeChangeHint decides whether a pod that the plugin rejected may now
// pass its Filter on a node that was added (old nil) or whose annotations
// changed. kind names the figure in log lines ("PID", "pod IP"); fits tells
// whether the pod fits cur's figures at the reported use. It queues when
//
//   - the node's headroom became unknown (Filter passes such nodes);
//   - a node was added, or its figures show more free than before, and at
//     its reported use it has room for the pod;
//   - the node carries a newer sample with room for the pod at its reported
//     use (the plugins' estimates add pods placed after the sample; a newer
//     sample takes them in at their measured use, which the hint cannot
//     see), or the old sample was stale;
//
// and skips otherwise: a sample without room, an unchanged sample (another
// annotation changed), a node whose headroom was and is unknown.
func NodeChangeHint(logger klog.Logger, kind string, pod *corev1.Pod, node *corev1.Node, old *Reading, cur Reading, fits bool) fwk.QueueingHint {
	if cur.Err != nil {
		if old == nil || old.Err == nil {
			logger.V(5).Info("Node's "+kind+" headroom is unknown now, which Filter passes", "pod", klog.KObj(pod), "node", klog.KObj(node), "reason", cur.Err)
			return fwk.Queue
		}
		logger.V(5).Info("Node's "+kind+" headroom was and is unknown", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.QueueSkip
	}
	if !fits {
		logger.V(5).Info("Node has too little "+kind+" headroom for the pod even at its reported use", "pod", klog.KObj(pod), "node", klog.KObj(node),
			"free", cur.Free)
		return fwk.QueueSkip
	}
	switch {
	case old == nil:
		logger.V(5).Info("Node added with "+kind+" headroom for the pod", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.Queue
	case sample.IsStale(old.Err):
		// Fresh, and maybe rejecting, when the pod was last tried.
		logger.V(5).Info("Node's stale "+kind+" sample was replaced by one with room", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.Queue
	case old.Err != nil:
		// No or invalid annotations before: Filter passed the node already.
		logger.V(5).Info("Node's "+kind+" headroom was unknown before, so it did not reject the pod there", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.QueueSkip
	case cur.Free > old.Free:
		logger.V(5).Info("Node reports more free "+kind+"s", "pod", klog.KObj(pod), "node", klog.KObj(node),
			"oldFree", old.Free, "newFree", cur.Free)
		return fwk.Queue
	case cur.SampledAt.After(old.SampledAt):
		logger.V(5).Info("Node has a newer "+kind+" sample with room for the pod", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.Queue
	}
	logger.V(5).Info("Node's "+kind+" figures show no more room", "pod", klog.KObj(pod), "node", klog.KObj(node))
	return fwk.QueueSkip
}

// PodDeleteHint decides whether a pod that the plugin rejected may now pass
// its Filter after deleted left its node. It queues when deleted was placed
// after its node's sample and counted (counts: it adds to the estimate at
// all), since the estimate drops by its share, and when the node's sample
// is stale (Filter passes the node now, though it may have rejected the pod
// while the sample was fresh; nothing else requeues for age). A pod that
// was in the sample frees its share in the next sample, which comes as a
// node update. read parses a node's sample with the plugin's age limit.
// Without a node lister, every deletion of an assigned pod queues.
//
// Terminal pods leave the scheduler's cache through this event too, and
// stop counting then, so counts must not look at the phase.
func PodDeleteHint(logger klog.Logger, kind string, pod, deleted *corev1.Pod, nodes corelisters.NodeLister,
	read func(*corev1.Node) Reading, counts func(*corev1.Pod) bool) fwk.QueueingHint {
	nodeName := deleted.Spec.NodeName
	if nodeName == "" {
		nodeName = deleted.Status.NominatedNodeName
	}
	if nodeName == "" {
		logger.V(5).Info("Deleted pod was not on a node", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted))
		return fwk.QueueSkip
	}
	if nodes == nil {
		return fwk.Queue
	}
	node, err := nodes.Get(nodeName)
	if err != nil {
		// The node is gone too; its deletion is no reason to retry.
		logger.V(5).Info("Deleted pod's node is not known", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted), "node", nodeName)
		return fwk.QueueSkip
	}
	r := read(node)
	switch {
	case sample.IsStale(r.Err):
		return fwk.Queue
	case r.Err != nil:
		logger.V(5).Info("Deleted pod's node has unknown "+kind+" headroom, which is not filtered", "pod", klog.KObj(pod), "node", nodeName)
		return fwk.QueueSkip
	}
	if sample.InSample(deleted, r.SampledAt) {
		logger.V(5).Info("Deleted pod was in its node's "+kind+" sample; the next sample shows the room", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted), "node", nodeName)
		return fwk.QueueSkip
	}
	if !counts(deleted) {
		return fwk.QueueSkip
	}
	logger.V(5).Info("Deleted pod's "+kind+"s no longer count on its node", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted), "node", nodeName)
	return fwk.Queue
}

// The summary (nodecache.Summary) that NodePIDs and NodeIPs keep of a node,
// all that Filter and Score read of it on a hit: the estimated free units,
// the room above the plugin's floor (the most a pod may need and still pass
// Filter) and the last time, in Unix nanoseconds, at which the sample may be
// used.
const (
	sumFree = iota
	sumRoom
	sumUsableUntil
)

// Summarize is the plugins' nodecache.SummaryFunc core: free and room of a
// sample parsed with parseErr, which goes stale after staleAfter (zero: never).
func Summarize(free, room int64, staleAfter time.Time, parseErr error) nodecache.Summary {
	var s nodecache.Summary
	switch {
	case parseErr != nil:
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

// bounds are what the plugins' caches keep over the snapshot's nodes
// (nodecache.Refresh): the least room and the least free units of the nodes
// whose annotations are valid, stale or not (Filter passes a stale node and
// Score gives it the unknown score, so counting it only makes the bounds
// lower than they need be), and the least time until which a sample may be
// used (math.MinInt64 when a node's annotations are missing or invalid).
var bounds = []nodecache.Bound{{Figure: sumRoom}, {Figure: sumFree}, {Figure: sumUsableUntil}}

// Usable reports whether the summarised node's headroom is known at now:
// valid annotations and a sample no older than the plugin's MaxSampleAge.
func Usable(s nodecache.Summary, now time.Time) bool { return now.UnixNano() <= s[sumUsableUntil] }

// Free is the summarised node's estimated free units.
func Free(s nodecache.Summary) int64 { return s[sumFree] }

// Room is the summarised node's free units above the plugin's floor.
func Room(s nodecache.Summary) int64 { return s[sumRoom] }
