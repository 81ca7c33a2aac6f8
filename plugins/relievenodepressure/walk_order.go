package relievenodepressure

import (
	"cmp"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"

	"github.com/headroom-k8s/headroom/pkg/deleteorder"
)

// walk is the order in which the plan takes its next pod with the
// projection st: the ranking of the pending trigger that reclaims first
// (ranker; for PIDs and memory the kubelet's, memory first), or, where
// none is (the OOM trigger alone), the neutral order. by is the ranker
// whose ranking it is; nil for the neutral order.
func (n *nodeRelief) walk(st *pressure) (order []*v1.Pod, by ranker) {
	for _, p := range st.by {
		if r, ok := p.(ranker); ok && p.level().pending() && (by == nil || r.reclaimOrder() < by.reclaimOrder()) {
			by = r
		}
	}
	if by == nil {
		return n.order.neutral, nil
	}
	return by.ranking(n), by
}

// ranker is a projection with its own ranking of the node's pods: the
// plan walks the ranking of the pending one that reclaims first (lowest
// reclaimOrder), or the neutral order where none is pending.
type ranker interface {
	ranking(n *nodeRelief) []*v1.Pod
	reclaimOrder() int
	// victimOrder: the ranking is the order in which the kubelet would
	// evict the pods, so the pods after one that cannot move are not the
	// pressure's cause and the walk ends there. Otherwise each pod of the
	// ranking is a cause of its own (ipStarved's starved pods).
	victimOrder() bool
}

// kubeletRanking is the node's pods as the kubelet's eviction manager
// ranks them for m's signal, with the node agent's figures as its stats:
// the neutral order breaks ties. A pod the list does not name held less than
// every listed one (or, on a complete list, nothing), where the kubelet,
// which has stats for every running pod, ranks it by what it holds: it is
// ranked by what the plan counts it at, its list's bound, and after a listed
// pod with the same figure. (The kubelet ranks a pod it has no stats for
// first; every pod the node agent's sample held had stats there.)
func (n *nodeRelief) kubeletRanking(m *measured) []*v1.Pod {
	if r := n.rankings[m.key]; r != nil {
		return r
	}
	lowerFirst := *n.args.LowerPriorityFirst
	keys := make(map[types.UID]rankKey, len(n.order.neutral))
	for _, pod := range n.order.neutral {
		k := rankKey{}
		k.held, k.listed = m.pods.LookupPod(pod)
		if !k.listed {
			k.held, _ = m.gain(pod)
		}
		if m.requested != nil {
			k.request = m.requested(pod)
		}
		if lowerFirst {
			k.priority = corev1helpers.PodPriority(pod)
		}
		keys[pod.UID] = k
	}
	order := slices.Clone(n.order.neutral)
	slices.SortStableFunc(order, func(a, b *v1.Pod) int { return m.rank(keys[a.UID], keys[b.UID]) })
	if n.rankings == nil {
		n.rankings = map[string][]*v1.Pod{}
	}
	n.rankings[m.key] = order
	return order
}

// rankKey is what the kubelet ranks a pod by for one signal.
type rankKey struct {
	// held is the pod's figure: its measured one where the node's list names
	// it (listed), otherwise what the plan counts it at (measured.gain),
	// which for a pod the sample held is at most the smallest listed figure.
	held    int64
	listed  bool
	request int64
	// priority is spec.priority; 0 for every pod when lowerPriorityFirst
	// is off.
	priority int32
}

// rankMemoryPressure compares two pods as the kubelet's rankMemoryPressure
// of Kubernetes v1.36 does (pkg/kubelet/eviction: orderedBy(
// exceedMemoryRequests, priority, memory)): the pod whose working set
// exceeds its memory request first, then lower priority, then the larger
// working set above request. TestKubeletRanksAsThePlan drives the kubelet's
// eviction manager itself to check it.
func rankMemoryPressure(a, b rankKey) int {
	return cmp.Or(
		cmpBool(a.held > a.request, b.held > b.request),
		cmp.Compare(a.priority, b.priority),
		cmp.Compare(b.held-b.request, a.held-a.request),
		cmpBool(a.listed, b.listed),
	)
}

// rankPIDPressure compares two pods as the kubelet's rankPIDPressure of
// Kubernetes v1.36 does (orderedBy(priority, process)): lower priority
// first, then more processes.
func rankPIDPressure(a, b rankKey) int {
	return cmp.Or(
		cmp.Compare(a.priority, b.priority),
		cmp.Compare(b.held, a.held),
		cmpBool(a.listed, b.listed),
	)
}

// cmpBool puts true first.
func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return -1
	}
	return 1
}

// evictionOrder is the order of a node's pods for eviction, in two layers.
//
// Across workloads (controller owners) the plan walks the kubelet's own
// ranking for the signal that fired (kubeletRanking): for memory, the
// eviction manager's rankMemoryPressure (usage above request first, then
// lower priority, then the most usage above request), for PIDs its
// rankPIDPressure (lower priority, then the most processes), over the
// node agent's measured per-pod figures. Where only the OOM trigger fired,
// which no kubelet signal ranks, it walks the neutral order: spec.priority,
// lower first (lowerPriorityFirst), then the ReplicaSet controller's rules
// without the two annotations a tenant writes on its own pods,
// delete-priority and pod-deletion-cost (deleteorder.SortNeutral). The
// neutral order also breaks the kubelet's ties. Which workloads lose how
// many pods therefore depends on no tenant's annotations.
//
// Within a workload, its own annotations decide, as the ReplicaSet
// controller uses them: byOwner holds each owner's pods in the full delete
// order (deleteorder.Order.Sort). Once a plan is made on the ranking, each
// workload's share of it is handed to its pods in that order
// (nodeRelief.honourOwnerOrder).
type evictionOrder struct {
	neutral []*v1.Pod
	byOwner map[owner][]*v1.Pod
	// annotated holds the owners of which some pod carries either
	// annotation: only their own order differs from the neutral one.
	annotated sets.Set[owner]
}

// owner is a workload: a controller owner, by its namespace and UID, or a
// pod without one.
type owner string

// newEvictionOrder orders pods; lowerFirst is lowerPriorityFirst.
func newEvictionOrder(o deleteorder.Order, pods []*v1.Pod, now time.Time, lowerFirst bool) evictionOrder {
	// Pods the rules cannot tell apart keep their input order, and the
	// pod lister's order is a map's: by namespace and name first, so that
	// every run, and kubectl headroom evictions, plans the same.
	neutral := slices.Clone(pods)
	slices.SortFunc(neutral, func(a, b *v1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	byOwner := map[owner][]*v1.Pod{}
	annotated := sets.New[owner]()
	for _, pod := range neutral {
		owner := ownerOf(pod)
		byOwner[owner] = append(byOwner[owner], pod)
		_, priority := pod.Annotations[o.Key()]
		_, cost := pod.Annotations[v1.PodDeletionCost]
		if priority || cost {
			annotated.Insert(owner)
		}
	}
	o.SortNeutral(neutral, now)
	for owner, group := range byOwner {
		o.Sort(group, now)
		byOwner[owner] = group
	}
	if lowerFirst {
		byPriority := func(a, b *v1.Pod) int {
			return cmp.Compare(corev1helpers.PodPriority(a), corev1helpers.PodPriority(b))
		}
		slices.SortStableFunc(neutral, byPriority)
		for _, group := range byOwner {
			slices.SortStableFunc(group, byPriority)
		}
	}
	return evictionOrder{neutral: neutral, byOwner: byOwner, annotated: annotated}
}

// effective is the order in which pods would go if every annotated
// workload's turn in order (the order a plan walked) went to its next pod by
// its own order: the order the plan's evictions follow, and what Plan
// shows. A workload without either annotation keeps the walk's order, as
// honourOwnerOrder leaves its pods.
func (e evictionOrder) effective(order []*v1.Pod) []*v1.Pod {
	out := make([]*v1.Pod, 0, len(order))
	next := map[owner]int{}
	for _, pod := range order {
		owner := ownerOf(pod)
		if !e.annotated.Has(owner) {
			out = append(out, pod)
			continue
		}
		out = append(out, e.byOwner[owner][next[owner]])
		next[owner]++
	}
	return out
}

// ownerOf is the pod's workload: its controller owner, keyed by the pod's
// namespace and the owner's UID (an ownerReference names an object of the
// pod's own namespace, so a pod of another namespace that claims a
// ReplicaSet's UID is not one of its pods and never takes its turns); a pod
// without one is a workload of its own, keyed by its own UID.
func ownerOf(pod *v1.Pod) owner {
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		return owner(pod.Namespace + "/" + string(ref.UID))
	}
	return owner("pod/" + string(pod.UID))
}
