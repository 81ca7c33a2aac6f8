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

// evictionOrder is the order of a node's pods for eviction, in two layers.
//
// Across workloads (controller owners) it is neutral: spec.priority, lower
// first (lowerPriorityFirst), then the ReplicaSet controller's rules without
// the two annotations a tenant writes on its own pods, delete-priority and
// pod-deletion-cost (deleteorder.SortNeutral). The plan walks this order, so
// which workloads lose how many pods does not depend on any tenant's
// annotations.
//
// Within a workload, its own annotations decide, as the ReplicaSet
// controller uses them: byOwner holds each owner's pods in the full delete
// order (deleteorder.Order.Sort). Once a plan is made on the neutral order,
// each workload's share of it is handed to its pods in that order
// (nodeRelief.honourOwnerOrder).
type evictionOrder struct {
	neutral []*v1.Pod
	byOwner map[types.UID][]*v1.Pod
	// annotated holds the owners of which some pod carries either
	// annotation: only their own order differs from the neutral one.
	annotated sets.Set[types.UID]
}

// newEvictionOrder orders pods; lowerFirst is lowerPriorityFirst.
func newEvictionOrder(o deleteorder.Order, pods []*v1.Pod, now time.Time, lowerFirst bool) evictionOrder {
	// Pods the rules cannot tell apart keep their input order, and the
	// pod lister's order is a map's: by namespace and name first, so that
	// every run, and kubectl headroom evictions, plans the same.
	neutral := slices.Clone(pods)
	slices.SortFunc(neutral, func(a, b *v1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	byOwner := map[types.UID][]*v1.Pod{}
	annotated := sets.New[types.UID]()
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

// effective is the order in which pods would go if every workload's turn in
// the neutral order went to its next pod by its own order: the order the
// plan's evictions follow, and what Plan shows.
func (e evictionOrder) effective() []*v1.Pod {
	out := make([]*v1.Pod, 0, len(e.neutral))
	next := map[types.UID]int{}
	for _, pod := range e.neutral {
		owner := ownerOf(pod)
		out = append(out, e.byOwner[owner][next[owner]])
		next[owner]++
	}
	return out
}

// ownerOf is the UID of the pod's controller owner; a pod without one is a
// workload of its own, keyed by its own UID.
func ownerOf(pod *v1.Pod) types.UID {
	if ref := metav1.GetControllerOfNoCopy(pod); ref != nil {
		return ref.UID
	}
	return "pod/" + pod.UID
}
