package oomkill

import (
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/headroom-k8s/headroom/pkg/memstats"
)

// An Option changes how NewNode builds a node's model.
type Option func(*options)

type options struct {
	sample   *memstats.NodeStats
	previous *Node
}

// WithPrevious lets NewNode take, from prev (a model of the same node
// built before, nil for none), what it read of the pods they share: the
// same pod objects, which the scheduler and the API's informers never
// modify, and new objects of a pod (the same UID) whose spec (the same
// metadata.generation), static and mirror pod annotations, QoS class and
// resize status are the old object's: a pod bound, or whose status alone
// changed (sameDeclarations). Their oom_score_adj, requests and worst
// cases are not worked out again where the node's capacity, allocatable
// memory and Estimate are prev's; the model is the one NewNode builds
// without it. A pod object modified in place after prev was built must
// not be passed.
func WithPrevious(prev *Node) Option {
	return func(o *options) { o.previous = prev }
}

// WithMemorySample builds the model on the node's measured memory (see the
// package documentation, "Measured memory"). Without it, or for a node
// whose sample is unknown, the model is the declared-only one.
func WithMemorySample(s memstats.NodeStats) Option {
	return func(o *options) { o.sample = &s }
}

// noRequest is what a pod without a memory request is taken to hold when
// nothing measured it: the estimate of a container without a limit or a
// request on the node, the same figure the declared model counts for it.
func (e Estimate) noRequest(allocatable int64) int64 {
	w, _ := e.worst(0, 0, allocatable)
	return w
}

// spread shares a pod's bytes out over its containers in proportion to
// their worst case, the rest of the division going to the last one, so the
// shares sum to bytes exactly. worst[k] are the containers' worst cases.
func spread(bytes int64, worst []int64, dst []int64) {
	var total int64
	for _, w := range worst {
		total = addSat(total, w)
	}
	left := bytes
	for k, w := range worst {
		if k == len(worst)-1 {
			dst[k] = left
			break
		}
		share := left
		if total > 0 {
			share = min(mulDiv(bytes, w, total), left)
		} else {
			share = bytes / int64(len(worst))
		}
		dst[k] = share
		left -= share
	}
}

// measure sets the containers of pod, victims[first:], to what they hold
// now as the sample tells (memstats.NodeStats.PodHeld). A measured pod's
// figure counts at most the node's capacity (no cgroup holds more), and a
// container's worst case is raised to what it holds: no container can grow
// to less than it holds. A pod the sample did not measure counts what it
// declares, at most its worst case (declaredWithin), as an incoming pod does.
func (n *Node) measure(s *memstats.NodeStats, pod *corev1.Pod, first int, worst, shares []int64) {
	vs := n.victims[first:]
	var podWorst int64
	for k := range vs {
		worst[k] = vs[k].Worst
		podWorst = addSat(podWorst, vs[k].Worst)
	}
	held, measured := s.PodHeld(pod, n.est.declaredWithin(pod, podWorst, n.allocatable))
	if measured {
		held = min(held, n.capacity)
	}
	spread(held, worst[:len(vs)], shares)
	if held > podWorst {
		n.overLimits(vs, held, worst, shares)
	}
	for k := range vs {
		vs[k].Used = shares[k]
		vs[k].Measured = measured
		vs[k].Worst = max(vs[k].Worst, vs[k].Used)
	}
	// What the pod has swapped out counts in its badness as the kernel's
	// oom_badness counts swap entries; shared out like what it holds.
	spread(s.PodSwap(pod), worst[:len(vs)], shares)
	for k := range vs {
		vs[k].Swap = shares[k]
		vs[k].Points = badness(addSat(vs[k].Used, vs[k].Swap), vs[k].Adj, n.totalPages)
	}
}

// overLimits shares out a pod's measured figure beyond its worst case (held
// > Σ worst) so that no container with a memory limit holds more than it:
// its cgroup cannot. The limited containers get their limit, the rest goes
// to the containers without one by their estimate; a pod whose containers
// all have limits keeps the proportional shares (its figure counts the pod's
// own cgroup, e.g. the sandbox, beyond them).
func (n *Node) overLimits(vs []Victim, held int64, worst, shares []int64) {
	var limited int64
	var open []int64
	var openAt []int
	for k := range vs {
		if vs[k].Estimated {
			open, openAt = append(open, worst[k]), append(openAt, k)
		} else {
			limited = addSat(limited, worst[k])
		}
	}
	if len(open) == 0 {
		return
	}
	rest := make([]int64, len(open))
	spread(held-limited, open, rest)
	for k := range vs {
		if !vs[k].Estimated {
			shares[k] = worst[k]
		}
	}
	for i, k := range openAt {
		shares[k] = rest[i]
	}
}

// declaredWithin is what a pod nothing measured is taken to hold:
// memstats.Declared (its effective request, or the estimate of a container
// without a limit or request when it requests nothing), at most podWorst,
// its worst case on the node. The effective request counts init containers
// and overhead, which a pod at steady state may not hold, so without the cap
// a pod would weigh more once bound than it did when it was scored.
func (e Estimate) declaredWithin(pod *corev1.Pod, podWorst, allocatable int64) int64 {
	return min(memstats.Declared(pod, e.noRequest(allocatable)), podWorst)
}

// DeclaredOn returns what a pod nothing measured is taken to hold on a node
// with the given allocatable memory: its memstats.Declared, at most its
// worst case there (declaredWithin). It is the declared function of the
// shared estimate of a node's working set (memstats.Estimate): OOMRisk's
// model (Node.UsedNow), kubectl-headroom and RelieveNodePressure's memory
// trigger pass it, so that they count a node's working set alike.
func (e Estimate) DeclaredOn(allocatable int64) func(*corev1.Pod) int64 {
	return func(p *corev1.Pod) int64 { return e.declaredWithin(p, e.podWorst(p, allocatable), allocatable) }
}

// podWorst is the pod's worst case on a node with the given allocatable
// memory: what NewNode counts for it.
func (e Estimate) podWorst(pod *corev1.Pod, allocatable int64) int64 {
	return NewIncoming(pod).WorstWithin(allocatable, e)
}

// Measured reports whether the model is built on a memory sample.
func (n *Node) Measured() bool { return n.measured }

// UsedNow returns the node's working set as the shared estimate has it
// (memstats.Estimate); 0 for a model without a sample.
func (n *Node) UsedNow() int64 { return n.usedNow }

// ShortfallNow returns max(0, UsedNow − Allocatable): how far the node's
// working set is beyond what the node gives its pods now.
func (n *Node) ShortfallNow() int64 { return n.nowShortfall }

// AtRiskNowBytes returns what the containers the killer takes now to cover
// ShortfallNow hold.
func (n *Node) AtRiskNowBytes() int64 {
	if !n.measured {
		return 0
	}
	return n.nowPrefix[n.nowKilled]
}

// MemorySampleOf reads node's memory sample (memstats.ParseNode) and returns
// the options that build the model on it: none, and why, when the sample is
// missing, invalid or older than maxAge (the model is then declared-only,
// the unknown rule). OOMRisk, RelieveNodePressure and kubectl-headroom read
// a node's sample with it, so they judge it alike. stats.Pods.Err reports a
// malformed per-pod list, which leaves the sample usable.
func MemorySampleOf(node *corev1.Node, now time.Time, maxAge time.Duration) (opts []Option, stats memstats.NodeStats, err error) {
	stats, err = memstats.ParseNode(node.Annotations, now, maxAge)
	if err != nil {
		return nil, stats, err
	}
	return []Option{WithMemorySample(stats)}, stats, nil
}
