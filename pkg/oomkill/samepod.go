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
// than PodResizePending, container states) is not read.
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
	// The helpers look a container's status up by name in both lists.
	for _, containers := range [...][]corev1.Container{b.Spec.Containers, b.Spec.InitContainers} {
		if !sameResizeStatuses(containers, sa.ContainerStatuses, sb.ContainerStatuses) ||
			!sameResizeStatuses(containers, sa.InitContainerStatuses, sb.InitContainerStatuses) {
			return false
		}
	}
	return true
}

// sameResizeStatuses reports whether, for every container, the status of
// its name that the resource helpers and allocatedPod take (the last) has
// the same resources and allocated resources in a and in b.
func sameResizeStatuses(containers []corev1.Container, a, b []corev1.ContainerStatus) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	for i := range containers {
		ca, cb := lastStatus(a, containers[i].Name), lastStatus(b, containers[i].Name)
		if !sameRequirements(ca.Resources, cb.Resources) || !sameList(ca.AllocatedResources, cb.AllocatedResources) {
			return false
		}
	}
	return true
}

// lastStatus returns the last status of the container name in statuses,
// or an empty one.
func lastStatus(statuses []corev1.ContainerStatus, name string) *corev1.ContainerStatus {
	for i := len(statuses) - 1; i >= 0; i-- {
		if statuses[i].Name == name {
			return &statuses[i]
		}
	}
	return &corev1.ContainerStatus{}
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
