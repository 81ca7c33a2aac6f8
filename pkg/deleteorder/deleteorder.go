package deleteorder

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/controller"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

// DefaultPriorityAnnotation is the pod annotation whose int32 value ranks a
// pod for eviction before every upstream rule; a higher value goes first.
const DefaultPriorityAnnotation = "controller.alpha.kubernetes.io/delete-priority"

// Order is the delete order with a configurable priority annotation key.
// The zero value uses DefaultPriorityAnnotation.
type Order struct {
	// PriorityAnnotation is the pod annotation holding the delete priority.
	// Empty means DefaultPriorityAnnotation.
	PriorityAnnotation string
}

// Sort sorts pods in place, the pod to evict first at index 0, with the
// priority annotation DefaultPriorityAnnotation. now is the reference time of
// upstream's logarithmic age comparison.
func Sort(pods []*corev1.Pod, now time.Time) {
	Order{PriorityAnnotation: DefaultPriorityAnnotation}.Sort(pods, now)
}

// Sort sorts pods in place, the pod to evict first at index 0: higher
// delete priority first, then the ReplicaSet controller's scale-down order
// (controller.ActivePodsWithRanks with Ranks(pods) and Now = now). The sort is
// stable, so pods that compare equal keep their input order. Sort never fails:
// a priority that does not parse counts as 0; use Priority to report it.
func (o Order) Sort(pods []*corev1.Pod, now time.Time) {
	if len(pods) < 2 {
		return
	}
	sort.Stable(o.newSorter(pods, now))
}

// Priority returns the pod's delete priority. A missing annotation is 0 and no
// error; a value that is not a base-10 int32 (surrounding whitespace included)
// is 0 and an error naming the pod, the key and the value.
func (o Order) Priority(pod *corev1.Pod) (int32, error) {
	return ParsePriority(pod, o.Key())
}

// Key is the annotation holding the delete priority.
func (o Order) Key() string {
	if o.PriorityAnnotation == "" {
		return DefaultPriorityAnnotation
	}
	return o.PriorityAnnotation
}

// ParsePriority returns the int32 held by the pod's annotation key; see
// Order.Priority. The error wraps strconv.ErrSyntax or strconv.ErrRange.
func ParsePriority(pod *corev1.Pod, key string) (int32, error) {
	v, ok := pod.Annotations[key]
	if !ok {
		return 0, nil
	}
	p, err := strconv.ParseInt(v, 10, 32)
	if err == nil {
		return int32(p), nil
	}
	cause := err
	var numErr *strconv.NumError
	if errors.As(err, &numErr) {
		cause = numErr.Err
	}
	what := "is not a base-10 integer"
	if errors.Is(cause, strconv.ErrRange) {
		what = "is out of the int32 range"
	}
	return 0, fmt.Errorf("pod %s/%s: annotation %s=%s %s, using 0: %w",
		pod.Namespace, pod.Name, key, sample.Quote(v), what, cause)
}

// Ranks returns, for each pod, the number of active pods in pods (not
// Succeeded, not Failed, not being deleted) that are on the same node and have
// the same controller owner (its namespace and UID), the pod itself included
// when it is active.
// This is the rank the ReplicaSet controller gives a pod on scale-down
// (getPodsRankedByRelatedPodsOnSameNode), with the owner UID in place of the
// ReplicaSet because Headroom sorts the pods of many controllers together.
//
// An owner is namespaced, and the ReplicaSet controller counts only its own
// pods, all in its namespace: a pod of another namespace whose ownerReference
// names the same UID is not its sibling, so that no tenant can raise another's
// ranks by claiming its owner.
//
// Unscheduled pods of one owner count together, under the empty node name,
// exactly as the ReplicaSet controller counts them. A pod without a
// controller owner has rank 0: it has no siblings that would stand in for
// it, and nothing recreates it once evicted, so it must never look doubled
// up.
func Ranks(pods []*corev1.Pod) []int {
	type group struct {
		node, namespace string
		owner           types.UID
	}
	groupOf := func(pod *corev1.Pod) (group, bool) {
		ref := metav1.GetControllerOfNoCopy(pod)
		if ref == nil {
			return group{}, false
		}
		return group{node: pod.Spec.NodeName, namespace: pod.Namespace, owner: ref.UID}, true
	}

	active := make(map[group]int)
	for _, pod := range pods {
		if g, ok := groupOf(pod); ok && controller.IsPodActive(pod) {
			active[g]++
		}
	}
	ranks := make([]int, len(pods))
	for i, pod := range pods {
		if g, ok := groupOf(pod); ok {
			ranks[i] = active[g]
		}
	}
	return ranks
}

// sorter orders pods by delete priority and then by upstream's comparator.
// Priority is a total preorder tried first, so the combination is a strict
// weak order wherever upstream's comparator is one.
type sorter struct {
	upstream controller.ActivePodsWithRanks
	priority []int32
}

func (o Order) newSorter(pods []*corev1.Pod, now time.Time) sorter {
	key := o.Key()
	priority := make([]int32, len(pods))
	for i, pod := range pods {
		// Errors are the caller's to report (Priority); here they count as 0.
		priority[i], _ = ParsePriority(pod, key)
	}
	return sorter{
		upstream: controller.ActivePodsWithRanks{Pods: pods, Rank: Ranks(pods), Now: metav1.NewTime(now)},
		priority: priority,
	}
}

func (s sorter) Len() int { return len(s.priority) }

func (s sorter) Swap(i, j int) {
	// Upstream swaps Pods and Rank together; the priorities follow them.
	s.upstream.Swap(i, j)
	s.priority[i], s.priority[j] = s.priority[j], s.priority[i]
}

func (s sorter) Less(i, j int) bool {
	if s.priority[i] != s.priority[j] {
		return s.priority[i] > s.priority[j]
	}
	return s.upstream.Less(i, j)
}

// SortNeutral sorts pods in place as Sort would if no pod carried the
// priority annotation or upstream's controller.kubernetes.io/pod-deletion-cost:
// the ReplicaSet controller's order by what no annotation on a pod can change
// (scheduled, phase, readiness, doubled up, ready time, restarts, age). Both
// annotations are written by whoever may edit a workload's pods, and the
// ReplicaSet controller compares them only among one ReplicaSet's pods; an
// order across workloads that read them would let one tenant push evictions
// onto another's pods. Use Sort within one controller owner's pods.
func (o Order) SortNeutral(pods []*corev1.Pod, now time.Time) {
	if len(pods) < 2 {
		return
	}
	key := o.Key()
	bare := make([]*corev1.Pod, len(pods))
	for i, pod := range pods {
		bare[i] = withoutAnnotations(pod, key, corev1.PodDeletionCost)
	}
	s := neutralSorter{
		sorter: sorter{
			upstream: controller.ActivePodsWithRanks{Pods: bare, Rank: Ranks(bare), Now: metav1.NewTime(now)},
			priority: make([]int32, len(pods)),
		},
		pods: pods,
	}
	sort.Stable(s)
}

// withoutAnnotations returns pod, or a shallow copy of it without the keys.
func withoutAnnotations(pod *corev1.Pod, keys ...string) *corev1.Pod {
	has := false
	for _, k := range keys {
		_, ok := pod.Annotations[k]
		has = has || ok
	}
	if !has {
		return pod
	}
	bare := *pod
	bare.Annotations = make(map[string]string, len(pod.Annotations))
	for k, v := range pod.Annotations {
		bare.Annotations[k] = v
	}
	for _, k := range keys {
		delete(bare.Annotations, k)
	}
	return &bare
}

// neutralSorter sorts the annotation-free copies and moves the pods with
// them.
type neutralSorter struct {
	sorter
	pods []*corev1.Pod
}

func (s neutralSorter) Swap(i, j int) {
	s.sorter.Swap(i, j)
	s.pods[i], s.pods[j] = s.pods[j], s.pods[i]
}
