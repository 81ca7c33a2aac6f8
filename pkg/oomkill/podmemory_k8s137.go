//go:build !k8s1.35 && !k8s1.36

// The per-container figures without component-helpers' ContainerFn hook,
// which k8s.io/component-helpers v0.37 removed. k8s1.MINOR is the build tag
// of the Kubernetes minor being built (hack/k8s-minors.txt,
// docs/compatibility.md).

package oomkill

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// containerScratch is perContainer's scratch: a pod holding one container.
type containerScratch struct {
	one corev1.Pod
}

// perContainer returns each ref's effective memory figure as aggregate
// (AggregateContainerRequests or AggregateContainerLimits) sees it: aggregate
// of a copy of pod that holds that container alone. The copy has no
// pod-level status figures, which v0.37's helpers would otherwise take for
// the whole pod's, and keeps the container statuses and the pod's
// conditions (an infeasible resize), so a container's figure is the larger
// of its spec, allocated and actuated ones, as ContainerFn reported it. A
// sidecar alone is its own figure; a plain init container counts 0, as its
// memory is released before the pod's containers start.
func (pm *podMemory) perContainer(pod *corev1.Pod, refs []ref, opts resourcehelper.PodResourcesOptions,
	aggregate func(*corev1.Pod, resourcehelper.PodResourcesOptions) corev1.ResourceList, dst []int64) []int64 {
	one := &pm.one
	*one = *pod
	one.Status.AllocatedResources = nil
	one.Status.Resources = nil
	dst = slices.Grow(dst[:0], len(refs))[:len(refs)]
	for k, ref := range refs {
		one.Spec.Containers, one.Spec.InitContainers = nil, nil
		if ref.init {
			c := &pod.Spec.InitContainers[ref.i]
			if !podutil.IsRestartableInitContainer(c) {
				dst[k] = 0
				continue
			}
			one.Spec.InitContainers = pod.Spec.InitContainers[ref.i : ref.i+1]
		} else {
			one.Spec.Containers = pod.Spec.Containers[ref.i : ref.i+1]
		}
		dst[k] = memoryOf(aggregate(one, opts))
	}
	*one = corev1.Pod{} // keeps no pod alive between calls
	return dst
}
