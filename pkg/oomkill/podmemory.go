package oomkill

import (
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"

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
	// podMemory): perContainer's (per Kubernetes minor) and the helpers'
	// result map.
	containerScratch
	reuse corev1.ResourceList
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
