package oomkill

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

const (
	Mi = int64(1) << 20
	Gi = int64(1) << 30
)

func bytesQ(v int64) resource.Quantity { return *resource.NewQuantity(v, resource.BinarySI) }

func testNode(name string, capacity, allocatable int64) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{
			Capacity:    corev1.ResourceList{corev1.ResourceMemory: bytesQ(capacity)},
			Allocatable: corev1.ResourceList{corev1.ResourceMemory: bytesQ(allocatable)},
		},
	}
}

// ctr describes a container; a zero request or limit is left unset.
type ctr struct {
	name     string
	req, lim int64
	cpu      bool // request and limit one CPU, as Guaranteed pods need
	init     bool // an init container
	sidecar  bool // an init container with restartPolicy Always
}

func (c ctr) container() corev1.Container {
	out := corev1.Container{Name: c.name}
	if c.req > 0 || c.cpu {
		out.Resources.Requests = corev1.ResourceList{}
	}
	if c.lim > 0 || c.cpu {
		out.Resources.Limits = corev1.ResourceList{}
	}
	if c.req > 0 {
		out.Resources.Requests[corev1.ResourceMemory] = bytesQ(c.req)
	}
	if c.lim > 0 {
		out.Resources.Limits[corev1.ResourceMemory] = bytesQ(c.lim)
	}
	if c.cpu {
		out.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
		out.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("1")
	}
	if c.sidecar {
		always := corev1.ContainerRestartPolicyAlways
		out.RestartPolicy = &always
	}
	return out
}

func testPod(ns, name string, cs ...ctr) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name)},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, c := range cs {
		if c.init || c.sidecar {
			p.Spec.InitContainers = append(p.Spec.InitContainers, c.container())
		} else {
			p.Spec.Containers = append(p.Spec.Containers, c.container())
		}
	}
	return p
}

func guaranteed(name string, mem int64) *corev1.Pod {
	return testPod("default", name, ctr{name: "app", req: mem, lim: mem, cpu: true})
}

func burstable(name string, req, lim int64) *corev1.Pod {
	return testPod("default", name, ctr{name: "app", req: req, lim: lim})
}

func bestEffort(name string) *corev1.Pod {
	return testPod("default", name, ctr{name: "app"})
}
