package oomkill

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// ErrUnknownMemory is returned (wrapped) by NewNode for a node whose memory
// capacity is missing or not positive, or whose allocatable memory is missing
// or negative: its OOM state is unknown, not safe.
var ErrUnknownMemory = errors.New("memory capacity or allocatable unknown")

// Victim is one container in a node's kill order.
type Victim struct {
	Namespace string
	Pod       string
	PodUID    types.UID
	Container string
	// Sidecar marks a restartable init container.
	Sidecar bool
	// Incoming marks a container of the pod under assessment (ExplainWith).
	Incoming bool
	QOS      corev1.PodQOSClass
	// Adj is the oom_score_adj the kubelet gives the container.
	Adj int
	// Request is the container's memory request in bytes.
	Request int64
	// Worst is the container's worst-case memory in bytes: its limit, or the
	// Estimate when it has none (Estimated).
	Worst     int64
	Estimated bool
	// Swap is what the container has swapped out, as the node's memory
	// sample tells (its pod's headroom.dev/swap-pods figure shared out like
	// Used); 0 where the node reports no swap. The kernel counts it in the
	// container's badness.
	Swap int64
	// Used is what the container holds now, as the node's memory sample
	// tells (its pod's measured working set shared out over its containers
	// by worst case, or what the pod declares when the sample did not
	// measure it; Measured says which); 0 in a model without a sample.
	Used     int64
	Measured bool
	// Points is the kernel's badness in bytes: what the container holds
	// (Used + Swap in a model built on a memory sample, else Worst) + Adj ×
	// totalpages / 1000, totalpages the node's capacity plus its swap.
	Points int64
	// AtRisk marks a container the killer takes to cover the shortfall.
	AtRisk bool
	// AtRiskNow marks one it takes to cover the shortfall now (a model
	// built on a memory sample).
	AtRiskNow bool
}

// Node is the OOM kill model of one node with the pods it holds. It is
// immutable after NewNode and safe for concurrent use.
type Node struct {
	name        string
	capacity    int64
	allocatable int64
	// totalPages is the kernel's totalpages of oom_badness, in bytes: the
	// node's memory capacity plus its swap (a model on a memory sample that
	// reports swap; see "Swap" in the package documentation).
	totalPages int64
	est        Estimate
	victims    []Victim // kill order, first to die first
	points     []int64  // victims[i].Points, for binary search
	prefix     []int64  // prefix[i] = Σ Worst of victims[:i], saturating
	shortfall  int64
	killed     int // victims[:killed] die covering the shortfall

	// The model on a memory sample: what the containers hold now, in kill
	// order, and the node's working set as the shared estimate has it.
	measured     bool
	usedNow      int64
	nowPrefix    []int64 // nowPrefix[i] = Σ Used of victims[:i], saturating
	nowShortfall int64
	nowKilled    int

	// What NewNode read of the pods' declarations, for a later model of the
	// same node (WithPrevious): each counted pod with the index of its
	// first container's figures in declared, in the order given.
	pods     []podDeclared
	declared []declared
}

// podDeclared is a counted pod of a model and where its containers'
// declared figures start.
type podDeclared struct {
	pod   *corev1.Pod
	class corev1.PodQOSClass
	first int32
}

// declared is what NewNode reads of one considered container (refsOf
// order) before any memory sample: its oom_score_adj and its memory request
// and worst case on the node. They depend on the pod object and the node's
// capacity, allocatable memory and Estimate only.
type declared struct {
	request, worst int64
	adj            int32
	estimated      bool
}

// MemoryOf returns node's memory capacity and allocatable memory in bytes,
// as the model reads them, or an error wrapping ErrUnknownMemory when the
// capacity is missing or not positive or the allocatable memory is missing
// or negative.
func MemoryOf(node *corev1.Node) (capacity, allocatable int64, err error) {
	capQ, ok := node.Status.Capacity[corev1.ResourceMemory]
	if !ok || capQ.Sign() <= 0 {
		return 0, 0, fmt.Errorf("node %s: memory capacity missing or not positive: %w", node.Name, ErrUnknownMemory)
	}
	allocQ, ok := node.Status.Allocatable[corev1.ResourceMemory]
	if !ok || allocQ.Sign() < 0 {
		return 0, 0, fmt.Errorf("node %s: allocatable memory missing or negative: %w", node.Name, ErrUnknownMemory)
	}
	return bytesOf(capQ), bytesOf(allocQ), nil
}

// NewNode builds the model of node holding pods. Capacity is the node's
// memory capacity (the kubelet derives oom_score_adj from machine memory),
// allocatable its allocatable memory (what pods may use before the node is
// short). Pods whose processes are gone (sample.Terminal: a terminal phase,
// or terminating with every container exited), and pods without
// containers, are ignored; a terminating pod whose processes still run
// counts in full, as the kernel sees it.
func NewNode(node *corev1.Node, pods []*corev1.Pod, est Estimate, opts ...Option) (*Node, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if node == nil {
		return nil, fmt.Errorf("nil node: %w", ErrUnknownMemory)
	}
	capacity, allocatable, err := MemoryOf(node)
	if err != nil {
		return nil, err
	}
	n := &Node{name: node.Name, capacity: capacity, allocatable: allocatable, totalPages: capacity, est: est}
	if o.sample != nil {
		n.totalPages = addSat(capacity, o.sample.SwapTotal)
	}

	size := 0
	for _, pod := range pods {
		if pod != nil {
			size += len(pod.Spec.Containers) + len(pod.Spec.InitContainers)
		}
	}
	n.victims = make([]Victim, 0, size)
	n.declared = make([]declared, 0, size)
	n.measured = o.sample != nil
	prev := o.previous.reusableFor(n)
	var refs []ref
	var adjs []int
	var worst, shares []int64
	var estimated []bool
	var pm podMemory
	for _, pod := range pods {
		if pod == nil || sample.Terminal(pod) {
			continue
		}
		refs = refsOf(pod, refs)
		if len(refs) == 0 {
			continue
		}
		first := len(n.victims)
		class, ds, ok := prev.declaredOf(pod, len(n.pods), len(refs))
		if !ok {
			class = v1qos.GetPodQOS(pod)
			adjs = slices.Grow(adjs[:0], len(refs))[:len(refs)]
			kubeletAdjs(withQOS(allocatedPod(pod), class), refs, n.capacity, adjs)
			readPodMemory(pod, refs, &pm)
			worst = slices.Grow(worst[:0], len(refs))[:len(refs)]
			estimated = slices.Grow(estimated[:0], len(refs))[:len(refs)]
			est.worsts(pm.requests, pm.limits, pm.podLimit, n.allocatable, worst, estimated)
			for k := range refs {
				n.declared = append(n.declared, declared{request: pm.requests[k], worst: worst[k], adj: int32(adjs[k]), estimated: estimated[k]})
			}
		} else {
			n.declared = append(n.declared, ds...)
		}
		n.pods = append(n.pods, podDeclared{pod: pod, class: class, first: int32(first)})
		for k, r := range refs {
			c := r.of(pod)
			d := &n.declared[first+k]
			n.victims = append(n.victims, Victim{
				Namespace: pod.Namespace,
				Pod:       pod.Name,
				PodUID:    pod.UID,
				Container: c.Name,
				Sidecar:   r.init,
				QOS:       class,
				Adj:       int(d.adj),
				Request:   d.request,
				Worst:     d.worst,
				Estimated: d.estimated,
				Points:    badness(d.worst, int(d.adj), n.totalPages),
			})
		}
		if n.measured {
			worst, shares = slices.Grow(worst[:0], len(refs))[:len(refs)], slices.Grow(shares[:0], len(refs))[:len(refs)]
			n.measure(o.sample, pod, first, worst, shares)
		}
	}

	// Highest badness dies first; equal badness falls back to names so the
	// order does not depend on the order pods were listed in. Indices are
	// sorted rather than the (large) victims themselves.
	idx := make([]int, len(n.victims))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(i, j int) int {
		a, b := &n.victims[i], &n.victims[j]
		return cmp.Or(
			cmp.Compare(b.Points, a.Points),
			cmp.Compare(a.Namespace, b.Namespace),
			cmp.Compare(a.Pod, b.Pod),
			cmp.Compare(a.Container, b.Container),
			cmp.Compare(a.PodUID, b.PodUID),
			cmp.Compare(i, j),
		)
	})
	sorted := make([]Victim, len(idx))
	for k, i := range idx {
		sorted[k] = n.victims[i]
	}
	n.victims = sorted

	n.points = make([]int64, len(n.victims))
	n.prefix = make([]int64, len(n.victims)+1)
	for i := range n.victims {
		n.points[i] = n.victims[i].Points
		n.prefix[i+1] = addSat(n.prefix[i], n.victims[i].Worst)
	}
	n.shortfall = subFloor(n.TotalWorst(), n.allocatable)
	n.killed = reach(n.prefix, 0, len(n.victims), n.shortfall, 0)
	for i := range n.killed {
		n.victims[i].AtRisk = true
	}
	if n.measured {
		n.nowPrefix = make([]int64, len(n.victims)+1)
		for i := range n.victims {
			n.nowPrefix[i+1] = addSat(n.nowPrefix[i], n.victims[i].Used)
		}
		n.usedNow = memstats.Estimate(*o.sample, pods, est.DeclaredOn(n.allocatable)).Held
		n.nowShortfall = subFloor(n.usedNow, n.allocatable)
		n.nowKilled = reach(n.nowPrefix, 0, len(n.victims), n.nowShortfall, 0)
		for i := range n.nowKilled {
			n.victims[i].AtRiskNow = true
		}
	}
	return n, nil
}

// reusableFor returns p when a model of node n may take its pods'
// declared figures from it: the same capacity, allocatable memory and
// Estimate, on which alone (with the pod object) they depend. nil
// otherwise.
func (p *Node) reusableFor(n *Node) *Node {
	if p == nil || p.capacity != n.capacity || p.allocatable != n.allocatable || p.est != n.est {
		return nil
	}
	return p
}

// declaredOf returns the QoS class and the declared figures p read of pod,
// the same object, with count containers; hint is where pod is likely to be
// among p's pods (the scheduler adds a node's pods at the end of its list).
func (p *Node) declaredOf(pod *corev1.Pod, hint, count int) (corev1.PodQOSClass, []declared, bool) {
	if p == nil {
		return "", nil, false
	}
	i := hint
	if i >= len(p.pods) || p.pods[i].pod != pod {
		i = slices.IndexFunc(p.pods, func(d podDeclared) bool { return d.pod == pod })
	}
	if i < 0 && pod.UID != "" {
		// A new object of the same pod (bound, its status updated): its
		// figures are the old object's where what they are read from is.
		i = slices.IndexFunc(p.pods, func(d podDeclared) bool { return d.pod.UID == pod.UID })
		if i >= 0 && !sameDeclarations(p.pods[i].pod, pod) {
			return "", nil, false
		}
	}
	if i < 0 {
		return "", nil, false
	}
	first, end := int(p.pods[i].first), len(p.declared)
	if i+1 < len(p.pods) {
		end = int(p.pods[i+1].first)
	}
	if end-first != count {
		return "", nil, false
	}
	return p.pods[i].class, p.declared[first:end], true
}

// withQOS returns pod, or a shallow copy of it carrying its QoS class in
// status, so that the kubelet's function reads the class instead of
// recomputing it for every container. Pods from the API server carry it.
func withQOS(pod *corev1.Pod, class corev1.PodQOSClass) *corev1.Pod {
	if pod.Status.QOSClass != "" {
		return pod
	}
	cp := *pod
	cp.Status.QOSClass = class
	return &cp
}

// reach returns the smallest t in [lo, hi] with prefix[t] + extra ≥ target,
// or hi when there is none. prefix is non-decreasing.
func reach(prefix []int64, lo, hi int, target, extra int64) int {
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if addSat(prefix[mid], extra) >= target {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// ahead returns the number of containers with badness strictly above p: a
// container of badness p placed there goes before every existing container
// of equal badness.
func (n *Node) ahead(p int64) int {
	lo, hi := 0, len(n.points)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if n.points[mid] > p {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Name returns the node's name.
func (n *Node) Name() string { return n.name }

// Capacity returns the node's memory capacity in bytes.
func (n *Node) Capacity() int64 { return n.capacity }

// Allocatable returns the node's allocatable memory in bytes.
func (n *Node) Allocatable() int64 { return n.allocatable }

// Estimate returns the no-limit estimate the model was built with.
func (n *Node) Estimate() Estimate { return n.est }

// TotalWorst returns the worst-case memory of all containers, in bytes.
func (n *Node) TotalWorst() int64 { return n.prefix[len(n.victims)] }

// Shortfall returns max(0, TotalWorst − Allocatable), in bytes.
func (n *Node) Shortfall() int64 { return n.shortfall }

// AtRiskBytes returns the worst-case memory of the containers at risk.
func (n *Node) AtRiskBytes() int64 { return n.prefix[n.killed] }

// KillOrder returns a copy of the kill order, first to die first.
func (n *Node) KillOrder() []Victim { return slices.Clone(n.victims) }

// PodWorst returns the worst-case memory the model counts for pod on this
// node, in bytes; 0 when the model does not hold the pod (not on the node, or
// terminal).
func (n *Node) PodWorst(pod *corev1.Pod) int64 {
	var sum int64
	for i := range n.victims {
		if samePod(&n.victims[i], pod) {
			sum = addSat(sum, n.victims[i].Worst)
		}
	}
	return sum
}

// ShortfallWithout returns the shortfall the node would have without pods,
// e.g. after evicting them. Pods the model does not hold change nothing.
func (n *Node) ShortfallWithout(pods ...*corev1.Pod) int64 {
	var kept int64
	for i := range n.victims {
		if !slices.ContainsFunc(pods, func(p *corev1.Pod) bool { return samePod(&n.victims[i], p) }) {
			kept = addSat(kept, n.victims[i].Worst)
		}
	}
	return subFloor(kept, n.allocatable)
}

// samePod matches by UID, or by namespace and name when either UID is unset.
func samePod(v *Victim, pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	if v.PodUID != "" && pod.UID != "" {
		return v.PodUID == pod.UID
	}
	return v.Namespace == pod.Namespace && v.Pod == pod.Name
}
