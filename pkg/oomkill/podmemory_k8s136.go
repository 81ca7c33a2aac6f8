//go:build k8s1.35 || k8s1.36

// The per-container figures through component-helpers' ContainerFn hook
// (k8s.io/component-helpers v0.35, v0.36). k8s1.MINOR is the build tag of
// the Kubernetes minor being built (hack/k8s-minors.txt, docs/compatibility.md).

package oomkill

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	podutil "k8s.io/kubernetes/pkg/api/v1/pod"
)

// containerScratch is perContainer's scratch: the figures ContainerFn
// reports, per regular and per init container.
type containerScratch struct {
	regular, sidecar []int64
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
