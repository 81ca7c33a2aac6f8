package oomkill

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"

	"github.com/headroom-k8s/headroom/pkg/memstats"
)

// podMemory is what the model reads of a pod's memory declarations, as the
// scheduler and the kubelet read them: component-helpers' PodRequests and
// PodLimits with the scheduler's options (memstats.ResourceOptions), so a
// pod being resized in place counts the larger of what it asks for, what
// the kubelet allocated and what runs, and pod-level resources (KEP-2837)
// count as the kubelet enforces them.
type podMemory struct {
	// requests and limits are each considered container's effective memory
	// request and limit in bytes, by ref; 0 when unset.
	requests, limits []int64
	// podLimit is the memory limit of the pod's cgroup where the pod sets a
	// pod-level memory limit: the kubelet's ResourceConfigForPod takes it
	// from PodLimits, overhead included (PodLimits adds overhead to a
	// non-zero limit). 0 otherwise: a pod whose containers all have limits
	// has its cgroup at their sum (plus overhead), which caps nothing they
	// do not cap themselves, and a pod with an unlimited container and no
	// pod-level limit has no limit at all.
	podLimit int64

	// Scratch reused from pod to pod (NewNode reads a node's pods with one
	// podMemory): the per-container figures and the helpers' result map.
	regular, sidecar []int64
	reuse            corev1.ResourceList
}

// readPodMemory reads pod's memory declarations for refs (refsOf) into pm,
// reusing its slices.
func readPodMemory(pod *corev1.Pod, refs []ref, pm *podMemory) {
	opts := memstats.ResourceOptions()
	if pm.reuse == nil {
		pm.reuse = corev1.ResourceList{}
	}
	opts.Reuse = pm.reuse
	pm.requests = pm.perContainer(pod, refs, opts, resourcehelper.AggregateContainerRequests, pm.requests)
	pm.limits = pm.perContainer(pod, refs, opts, resourcehelper.AggregateContainerLimits, pm.limits)
	opts.Reuse = nil
	pm.podLimit = 0
	if !opts.SkipPodLevelResources && pod.Spec.Resources != nil && memoryOf(pod.Spec.Resources.Limits) > 0 {
		pm.podLimit = memoryOf(resourcehelper.PodLimits(pod, opts))
	}
}

// perContainer returns each ref's effective memory figure as aggregate
// (AggregateContainerRequests or AggregateContainerLimits) sees it: the
// helper calls ContainerFn with each regular container's figures in order,
// then with each init container's, where a sidecar's are the running sum
// of the sidecars so far (its own is the difference).
func (pm *podMemory) perContainer(pod *corev1.Pod, refs []ref, opts resourcehelper.PodResourcesOptions,
	aggregate func(*corev1.Pod, resourcehelper.PodResourcesOptions) corev1.ResourceList, dst []int64) []int64 {
	pm.regular = slices.Grow(pm.regular[:0], len(pod.Spec.Containers))[:len(pod.Spec.Containers)]
	pm.sidecar = slices.Grow(pm.sidecar[:0], len(pod.Spec.InitContainers))[:len(pod.Spec.InitContainers)]
	regular, sidecar := pm.regular, pm.sidecar
	clear(regular)
	clear(sidecar)
	var r, i int
	var sidecars int64 // the running sum of the sidecars' figures so far
	opts.ContainerFn = func(rl corev1.ResourceList, t resourcehelper.ContainerType) {
		switch {
		case t == resourcehelper.Containers && r < len(regular):
			regular[r] = memoryOf(rl)
			r++
		case t == resourcehelper.InitContainers && i < len(sidecar):
			if podutil.IsRestartableInitContainer(&pod.Spec.InitContainers[i]) {
				sum := memoryOf(rl)
				sidecar[i] = subFloor(sum, sidecars)
				sidecars = sum
			}
			i++
		}
	}
	aggregate(pod, opts)
	dst = slices.Grow(dst[:0], len(refs))[:len(refs)]
	for k, ref := range refs {
		if ref.init {
			dst[k] = sidecar[ref.i]
		} else {
			dst[k] = regular[ref.i]
		}
	}
	return dst
}

// worsts sets worst[k] to the worst-case memory of container k of a pod
// (requests, limits and podLimit as podMemory holds them) on a node with
// the given allocatable memory, and estimated[k] (when not nil) to whether
// it has no limit of its own, and returns the pod's total. A pod-level
// limit caps the pod, not each container: all of them live in the pod's
// cgroup, so where their worst cases add up to more than it, they are
// scaled down to it in proportion (spread), none beyond its own.
func (e Estimate) worsts(requests, limits []int64, podLimit, allocatable int64, worst []int64, estimated []bool) int64 {
	var total int64
	for k := range requests {
		w, est := e.worst(requests[k], limits[k], allocatable)
		worst[k] = w
		if estimated != nil {
			estimated[k] = est
		}
		total = addSat(total, w)
	}
	if podLimit > 0 && total > podLimit {
		spread(podLimit, worst, worst)
		total = podLimit
	}
	return total
}

// podWorstOf is the total worsts returns, without the per-container figures.
func (e Estimate) podWorstOf(requests, limits []int64, podLimit, allocatable int64) int64 {
	var total int64
	for k := range requests {
		w, _ := e.worst(requests[k], limits[k], allocatable)
		total = addSat(total, w)
	}
	if podLimit > 0 {
		total = min(total, podLimit)
	}
	return total
}

// allocatedPod returns pod as the kubelet passes it to the OOM score
// function: with the allocated memory requests (status.containerStatuses[].
// allocatedResources, where the kubelet reports them) in the spec; "the
// pod argument should contain the allocated resources in the spec"
// (qos.GetContainerOOMScoreAdjust). pod itself when nothing differs.
func allocatedPod(pod *corev1.Pod) *corev1.Pod {
	var cp *corev1.Pod
	set := func(statuses []corev1.ContainerStatus, containers func(*corev1.Pod) []corev1.Container) {
		for s := range statuses {
			q, ok := statuses[s].AllocatedResources[corev1.ResourceMemory]
			if !ok {
				continue
			}
			for c, ctr := range containers(pod) {
				if ctr.Name != statuses[s].Name {
					continue
				}
				if cur, ok := ctr.Resources.Requests[corev1.ResourceMemory]; ok && cur.Cmp(q) == 0 {
					break
				}
				if cp == nil {
					cp = pod.DeepCopy()
				}
				ctrs := containers(cp)
				if ctrs[c].Resources.Requests == nil {
					ctrs[c].Resources.Requests = corev1.ResourceList{}
				}
				ctrs[c].Resources.Requests[corev1.ResourceMemory] = q.DeepCopy()
				break
			}
		}
	}
	set(pod.Status.ContainerStatuses, func(p *corev1.Pod) []corev1.Container { return p.Spec.Containers })
	set(pod.Status.InitContainerStatuses, func(p *corev1.Pod) []corev1.Container { return p.Spec.InitContainers })
	if cp == nil {
		return pod
	}
	return cp
}
