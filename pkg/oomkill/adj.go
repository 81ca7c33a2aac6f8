package oomkill

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	"k8s.io/kubernetes/pkg/kubelet/qos"
)

// safeSum bounds the sum of a pod's memory requests (containers, init
// containers, pod level) below which the kubelet's oom_score_adj arithmetic
// cannot overflow: with every request in [0, S], the pod-level share per
// container lies in [-S, S], so request + share lies in [-S, 2S] and
// 1000 × (request + share) stays within ±2000·S ≤ MaxInt64.
const safeSum = math.MaxInt64 / 2000

// ref names a container the model considers: a regular container, or a
// restartable init container (a sidecar). Both run at steady state; ordinary
// init containers have exited by then.
type ref struct {
	init bool
	i    int
}

func (r ref) of(pod *corev1.Pod) *corev1.Container {
	if r.init {
		return &pod.Spec.InitContainers[r.i]
	}
	return &pod.Spec.Containers[r.i]
}

// refsOf returns the containers of pod the model considers, sidecars first
// (the order the kubelet starts them). A pod without regular containers is
// not a runnable pod (the API rejects it) and yields none.
func refsOf(pod *corev1.Pod, dst []ref) []ref {
	dst = dst[:0]
	if len(pod.Spec.Containers) == 0 {
		return dst
	}
	for i := range pod.Spec.InitContainers {
		if podutil.IsRestartableInitContainer(&pod.Spec.InitContainers[i]) {
			dst = append(dst, ref{init: true, i: i})
		}
	}
	for i := range pod.Spec.Containers {
		dst = append(dst, ref{i: i})
	}
	return dst
}

// kubeletAdjs sets dst[k] to the oom_score_adj the kubelet gives container
// refs[k] of pod on a node with the given memory capacity (> 0). It calls the
// kubelet's own qos.GetContainerOOMScoreAdjust; for a pod whose requests could
// overflow that function's int64 arithmetic it calls it on a normalized copy
// instead (see normalize).
func kubeletAdjs(pod *corev1.Pod, refs []ref, capacity int64, dst []int) {
	p, c := pod, capacity
	if !withinSafeRange(pod) {
		p, c = normalize(pod, capacity)
	}
	for k, r := range refs {
		dst[k] = qos.GetContainerOOMScoreAdjust(p, r.of(p), c)
	}
}

// withinSafeRange reports whether every memory request of pod is
// non-negative and their sum is at most safeSum, so that the kubelet's
// function computes exactly on the original pod.
func withinSafeRange(pod *corev1.Pod) bool {
	var sum int64
	add := func(rl corev1.ResourceList) bool {
		q, ok := rl[corev1.ResourceMemory]
		if !ok {
			return true
		}
		if q.Sign() < 0 {
			return false
		}
		sum = addSat(sum, bytesOf(q))
		return sum <= safeSum
	}
	for i := range pod.Spec.Containers {
		if !add(pod.Spec.Containers[i].Resources.Requests) {
			return false
		}
	}
	for i := range pod.Spec.InitContainers {
		if !add(pod.Spec.InitContainers[i].Resources.Requests) {
			return false
		}
	}
	return pod.Spec.Resources == nil || add(pod.Spec.Resources.Requests)
}

// normalize returns a deep copy of pod, and a capacity, on which the kubelet's
// function cannot overflow and yields the adj that exact arithmetic would give
// on the original:
//
//   - every container memory request r becomes min(r, capacity): the kubelet
//     maps every effective request ≥ capacity to the same clamp value 3
//     (1000 − 1000·r/capacity ≤ 0 < 3), so clamping changes nothing;
//   - the pod-level memory request is rewritten so that the per-container
//     share the kubelet derives from it, (pod request − aggregate container
//     requests) / containers, keeps its value clamped to ±capacity — again
//     every effective request ≥ capacity stays ≥ capacity;
//   - the QoS class is pinned to the original's, since clamping requests
//     against unchanged limits could otherwise turn a Guaranteed pod
//     Burstable.
//
// TestNormalizePreservesAdj checks the equality on random pods the original
// handles without overflow. Only on capacities above safeSum / (3 × containers)
// (petabytes) are capacity and requests scaled down together; adj may then
// differ by rounding from exact arithmetic, which no int64 kubelet computes
// anyway. A negative share (a pod-level request below its containers', which
// the API rejects) is kept only as far as the rewritten request stays ≥ 0.
func normalize(pod *corev1.Pod, capacity int64) (*corev1.Pod, int64) {
	cp := pod.DeepCopy()
	if cp.Status.QOSClass == "" {
		cp.Status.QOSClass = v1qos.GetPodQOS(pod)
	}
	n := int64(len(pod.Spec.Containers) + len(pod.Spec.InitContainers))
	if n == 0 {
		return cp, capacity
	}

	var share int64
	hasPodRequest := false
	if pod.Spec.Resources != nil {
		if q, ok := pod.Spec.Resources.Requests[corev1.ResourceMemory]; ok {
			hasPodRequest = true
			// The kubelet derives no share from a zero pod-level request.
			if q.Sign() > 0 {
				agg := resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{})
				// Both terms lie in [0, MaxInt64]: the difference cannot overflow.
				share = (bytesOf(q) - memoryOf(agg)) / n
				share = min(max(share, -capacity), capacity)
			}
		}
	}

	// Clamped requests sum to at most n·capacity and the rewritten pod-level
	// request to at most 2n·capacity; keep 3n·capacity within safeSum.
	scale := int64(1)
	if limit := safeSum / (3 * n); capacity > limit {
		scale = capacity/limit + 1
	}
	clamp := func(rl corev1.ResourceList) {
		if q, ok := rl[corev1.ResourceMemory]; ok {
			rl[corev1.ResourceMemory] = *resource.NewQuantity(min(bytesOf(q), capacity)/scale, resource.BinarySI)
		}
	}
	for i := range cp.Spec.Containers {
		clamp(cp.Spec.Containers[i].Resources.Requests)
	}
	for i := range cp.Spec.InitContainers {
		clamp(cp.Spec.InitContainers[i].Resources.Requests)
	}
	if hasPodRequest {
		agg := resourcehelper.AggregateContainerRequests(cp, resourcehelper.PodResourcesOptions{})
		podRequest := max(memoryOf(agg)+share/scale*n, 0)
		cp.Spec.Resources.Requests[corev1.ResourceMemory] = *resource.NewQuantity(podRequest, resource.BinarySI)
	}
	return cp, max(capacity/scale, 1)
}
