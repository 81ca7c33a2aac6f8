package oomkill

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
)

// Incoming is a pod under assessment, prepared once per scheduling cycle.
// Its containers' adj depends on the node's capacity and the worst case of
// an unlimited container on the node's allocatable, so the per-node figures
// are derived on first use for each node shape (capacity, allocatable,
// estimate) and kept: a cluster has few shapes, and Assess is then free of
// allocation. It is safe for concurrent use.
type Incoming struct {
	pod  *corev1.Pod
	qos  corev1.PodQOSClass
	refs []ref
	// mem is the pod's memory declarations (readPodMemory).
	mem podMemory
	// allocated is the pod as the kubelet computes its adj (allocatedPod).
	allocated *corev1.Pod

	// last is the plan used last: nodes of a cluster mostly share a shape,
	// so that is a lock-free hit for Score running in parallel over nodes.
	last  atomic.Pointer[plan]
	mu    sync.RWMutex
	plans map[shape]*plan
}

// shape is what the per-node figures of an incoming pod depend on.
type shape struct {
	capacity, allocatable int64
	// totalPages is the node's totalpages (capacity plus swap).
	totalPages int64
	est        Estimate
	// measured: the node's model is built on a memory sample, so the pod
	// ranks in the kill order by what it will hold when it starts.
	measured bool
}

// plan holds an incoming pod's containers on one node shape, in kill order.
type plan struct {
	shape    shape
	idx      []int // index into Incoming.refs
	adj      []int
	worst    []int64
	points   []int64
	podWorst int64
	// now is what each container holds once started, on a measured node:
	// the pod's memstats.Declared, at most its worst case, shared out by
	// worst case (Node.measure's rule for a pod the sample has not seen).
	now    []int64
	podNow int64
}

// NewIncoming prepares pod for assessment. The pod must not change while the
// Incoming is in use.
func NewIncoming(pod *corev1.Pod) *Incoming {
	in := &Incoming{pod: pod, plans: map[shape]*plan{}}
	if pod == nil {
		return in
	}
	in.qos = v1qos.GetPodQOS(pod)
	in.refs = refsOf(pod, nil)
	readPodMemory(pod, in.refs, &in.mem)
	in.allocated = allocatedPod(pod)
	return in
}

// Pod returns the pod.
func (in *Incoming) Pod() *corev1.Pod { return in.pod }

// QOS returns the pod's QoS class.
func (in *Incoming) QOS() corev1.PodQOSClass { return in.qos }

func (in *Incoming) planFor(n *Node) *plan {
	key := shape{capacity: n.capacity, allocatable: n.allocatable, totalPages: n.totalPages, est: n.est, measured: n.measured}
	if p := in.last.Load(); p != nil && p.shape == key {
		return p
	}
	in.mu.RLock()
	p := in.plans[key]
	in.mu.RUnlock()
	if p != nil {
		in.last.Store(p)
		return p
	}
	p = in.newPlan(key)
	in.mu.Lock()
	if q := in.plans[key]; q != nil {
		p = q
	} else {
		in.plans[key] = p
	}
	in.mu.Unlock()
	in.last.Store(p)
	return p
}

func (in *Incoming) newPlan(s shape) *plan {
	k := len(in.refs)
	p := &plan{shape: s, idx: make([]int, k), adj: make([]int, k), worst: make([]int64, k), points: make([]int64, k), now: make([]int64, k)}
	adj := make([]int, k)
	kubeletAdjs(withQOS(in.allocated, in.qos), in.refs, s.capacity, adj)
	worst := make([]int64, k)
	held := worst // what ranks a container: its worst case, or what it holds on a measured node
	for j := range k {
		p.idx[j] = j
	}
	p.podWorst = s.est.worsts(in.mem.requests, in.mem.limits, in.mem.podLimit, s.allocatable, worst, nil)
	if s.measured {
		// What the pod declares, at most its worst case, so that its worst
		// case is the same on every node of the shape, measured or not.
		held = make([]int64, k)
		spread(s.est.declaredWithin(in.pod, p.podWorst, s.allocatable), worst, held)
	}
	// The same order NewNode gives the containers of one pod.
	slices.SortStableFunc(p.idx, func(a, b int) int {
		return cmp.Or(
			cmp.Compare(badness(held[b], adj[b], s.totalPages), badness(held[a], adj[a], s.totalPages)),
			cmp.Compare(in.refs[a].of(in.pod).Name, in.refs[b].of(in.pod).Name),
		)
	})
	for j, i := range p.idx {
		p.adj[j] = adj[i]
		p.worst[j] = worst[i]
		p.points[j] = badness(held[i], adj[i], s.totalPages)
		if s.measured {
			p.now[j] = held[i]
			p.podNow = addSat(p.podNow, held[i])
		}
	}
	return p
}

// WorstOn returns the pod's worst-case memory on n in bytes: what Assess
// adds to the node's total. Scorers relate collateral to it. Like Assess, it
// allocates nothing once in has seen a node of the same shape.
func (in *Incoming) WorstOn(n *Node) int64 {
	if in == nil || len(in.refs) == 0 {
		return 0
	}
	return in.planFor(n).podWorst
}

// WorstWithin returns the pod's worst-case memory on any node with the given
// allocatable memory under est: what WorstOn returns for such a node. It
// never falls as allocatable grows (only containers without a limit depend
// on it), so on the node with the most allocatable memory of a set it bounds
// the pod's worst case on every node of the set.
func (in *Incoming) WorstWithin(allocatable int64, est Estimate) int64 {
	if in == nil {
		return 0
	}
	return est.podWorstOf(in.mem.requests, in.mem.limits, in.mem.podLimit, allocatable)
}
