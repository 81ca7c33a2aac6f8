package oomkill

import (
	corev1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"
)

// sameDeclarations reports whether a and b, two objects of one pod (the
// same UID), give the same declared figures: the QoS class, oom_score_adj,
// requests and worst cases that NewNode reads of a pod. They are read
// from
//   - the spec, equal where metadata.generation is: the API server sets it
//     to 1 at creation and raises it with every change of the spec (a
//     binding sets spec.nodeName without raising it; the figures do not
//     read it). A pod without a generation (not from an API server) is
//     never taken as equal;
//   - the kubelet's static and mirror pod annotations (IsCriticalPod);
//   - the status fields of an in-place resize and the status's QoS class,
//     compared below.
//
// What kwok or a kubelet reports of a running pod (phase, conditions other
// than PodResizePending, container states) is not read; whether the pod's
// processes are gone (sample.Terminal) and what a memory sample measured
// of it NewNode reads of the new object.
func sameDeclarations(a, b *corev1.Pod) bool {
	if a.Generation == 0 || a.Generation != b.Generation {
		return false
	}
	for _, key := range [...]string{kubetypes.ConfigSourceAnnotationKey, kubetypes.ConfigMirrorAnnotationKey} {
		va, oka := a.Annotations[key]
		vb, okb := b.Annotations[key]
		if oka != okb || va != vb {
			return false
		}
	}
	sa, sb := &a.Status, &b.Status
	if sa.QOSClass != sb.QOSClass ||
		resourcehelper.IsPodResizeInfeasible(a) != resourcehelper.IsPodResizeInfeasible(b) ||
		!sameRequirements(sa.Resources, sb.Resources) ||
		!sameList(sa.AllocatedResources, sb.AllocatedResources) {
		return false
	}
	if len(sa.ContainerStatuses)+len(sa.InitContainerStatuses)+len(sb.ContainerStatuses)+len(sb.InitContainerStatuses) == 0 {
		return true
	}
	// The API server accepts two statuses of one name, and a status of a
	// container of the other list ("consumers of those fields must account
	// for unexpected data"): compare what each reader takes of them.
	for _, containers := range [...][]corev1.Container{b.Spec.Containers, b.Spec.InitContainers} {
		for i := range containers {
			ca, cb := helperStatus(sa, containers[i].Name), helperStatus(sb, containers[i].Name)
			if !sameRequirements(ca.Resources, cb.Resources) || !sameList(ca.AllocatedResources, cb.AllocatedResources) {
				return false
			}
		}
	}
	return sameAllocatedMemory(sa.ContainerStatuses, sb.ContainerStatuses) &&
		sameAllocatedMemory(sa.InitContainerStatuses, sb.InitContainerStatuses)
}

// noStatus stands for a container without a status; never written.
var noStatus corev1.ContainerStatus

// helperStatus returns the status of the container name that the resource
// helpers take: they fill one map by name from the containers' statuses,
// then the init containers', so the last of that name wins, an init
// containers' status over the others'.
func helperStatus(s *corev1.PodStatus, name string) *corev1.ContainerStatus {
	if cs := lastStatus(s.InitContainerStatuses, name); cs != nil {
		return cs
	}
	if cs := lastStatus(s.ContainerStatuses, name); cs != nil {
		return cs
	}
	return &noStatus
}

// lastStatus returns the last status of the container name in statuses,
// or nil.
func lastStatus(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := len(statuses) - 1; i >= 0; i-- {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return nil
}

// sameAllocatedMemory reports whether a and b hold, in the same order, the
// same allocated memory of containers of the same names: allocatedPod
// reads every status that has it, one after another.
func sameAllocatedMemory(a, b []corev1.ContainerStatus) bool {
	i, j := 0, 0
	for {
		i, j = nextAllocatedMemory(a, i), nextAllocatedMemory(b, j)
		if i == len(a) || j == len(b) {
			return i == len(a) && j == len(b)
		}
		qa, qb := a[i].AllocatedResources[corev1.ResourceMemory], b[j].AllocatedResources[corev1.ResourceMemory]
		if a[i].Name != b[j].Name || qa.Cmp(qb) != 0 {
			return false
		}
		i, j = i+1, j+1
	}
}

// nextAllocatedMemory returns the index of the first status from i on that
// has allocated memory, or len(statuses).
func nextAllocatedMemory(statuses []corev1.ContainerStatus, i int) int {
	for i < len(statuses) {
		if _, ok := statuses[i].AllocatedResources[corev1.ResourceMemory]; ok {
			return i
		}
		i++
	}
	return i
}

// sameRequirements compares the requests and limits of a and b; a nil
// and an empty ResourceRequirements differ (the helpers read the status's
// resources only where they are set).
func sameRequirements(a, b *corev1.ResourceRequirements) bool {
	if a == nil || b == nil {
		return a == b
	}
	return sameList(a.Requests, b.Requests) && sameList(a.Limits, b.Limits)
}

// sameList reports whether a and b hold the same quantities.
func sameList(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for name, qa := range a {
		qb, ok := b[name]
		if !ok || qa.Cmp(qb) != 0 {
			return false
		}
	}
	return true
}
