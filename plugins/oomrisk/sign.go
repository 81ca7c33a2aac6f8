package oomrisk

import (
	"context"
	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
	kubelettypes "k8s.io/kubernetes/pkg/kubelet/types"
)

// memorySignerName keys the fragment SignPod returns.
const memorySignerName = "headroom.dev/OOMRisk.MemoryShape"

// memoryShape is everything of a pod that OOMRisk's score depends on: what
// the kubelet's oom_score_adj reads (QoS class, node criticality, memory
// requests of containers, sidecars and the pod) and the limits that make the
// worst case, and the pod overhead, which with the requests makes what the
// pod is taken to hold on a measured node (memstats.Declared). Names do not
// matter: the model places the incoming pod before every existing container
// of equal badness, whatever it is called.
type memoryShape struct {
	QOS            corev1.PodQOSClass `json:"qos"`
	NodeCritical   bool               `json:"nodeCritical,omitempty"`
	Containers     []memoryPair       `json:"containers"`
	InitContainers []memoryPair       `json:"initContainers,omitempty"`
	Pod            *memoryPair        `json:"pod,omitempty"`
	Overhead       *resource.Quantity `json:"overhead,omitempty"`
}

type memoryPair struct {
	Request *resource.Quantity `json:"request,omitempty"`
	Limit   *resource.Quantity `json:"limit,omitempty"`
	Sidecar bool               `json:"sidecar,omitempty"`
}

// SignPod lets the scheduler's opportunistic batching reuse OOMRisk's scores
// for pods of the same memory shape; a profile with a plugin that cannot
// sign pods loses batching altogether.
func (pl *OOMRisk) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return []fwk.SignFragment{{Key: memorySignerName, Value: shapeOf(pod)}}, nil
}

// shapeKey is the pod's memory shape as a string, "" when it cannot be
// written.
func shapeKey(pod *corev1.Pod) string {
	b, err := json.Marshal(shapeOf(pod))
	if err != nil {
		return ""
	}
	return string(b)
}

func shapeOf(pod *corev1.Pod) memoryShape {
	s := memoryShape{
		QOS:          v1qos.GetPodQOS(pod),
		NodeCritical: kubelettypes.IsNodeCriticalPod(pod),
		Containers:   make([]memoryPair, len(pod.Spec.Containers)),
	}
	for i := range pod.Spec.Containers {
		s.Containers[i] = pairOf(pod.Spec.Containers[i].Resources)
	}
	if len(pod.Spec.InitContainers) > 0 {
		s.InitContainers = make([]memoryPair, len(pod.Spec.InitContainers))
		for i := range pod.Spec.InitContainers {
			c := &pod.Spec.InitContainers[i]
			s.InitContainers[i] = pairOf(c.Resources)
			s.InitContainers[i].Sidecar = c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways
		}
	}
	if pod.Spec.Resources != nil {
		p := pairOf(*pod.Spec.Resources)
		s.Pod = &p
	}
	if q, ok := pod.Spec.Overhead[corev1.ResourceMemory]; ok {
		s.Overhead = &q
	}
	return s
}

func pairOf(r corev1.ResourceRequirements) memoryPair {
	var p memoryPair
	if q, ok := r.Requests[corev1.ResourceMemory]; ok {
		p.Request = &q
	}
	if q, ok := r.Limits[corev1.ResourceMemory]; ok {
		p.Limit = &q
	}
	return p
}
