package oomrisk

import (
	"context"
	"strconv"

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

// shapeKey is the pod's memory shape as a string: pods of equal keys have
// equal shapes. PreScore takes it for every pod, so it is written by hand
// rather than marshalled: each quantity as its integer value where it has
// one (equal values, equal text), its canonical string otherwise.
func shapeKey(pod *corev1.Pod) string {
	s := shapeOf(pod)
	b := make([]byte, 0, 64)
	b = append(append(b, s.QOS...), '|')
	if s.NodeCritical {
		b = append(b, '!')
	}
	b = appendPairs(append(b, 'c'), s.Containers)
	b = appendPairs(append(b, 'i'), s.InitContainers)
	if s.Pod != nil {
		b = appendPair(append(b, 'p'), *s.Pod)
	}
	if s.Overhead != nil {
		b = appendQuantity(append(b, 'o'), s.Overhead)
	}
	return string(b)
}

func appendPairs(b []byte, pairs []memoryPair) []byte {
	b = strconv.AppendInt(b, int64(len(pairs)), 10)
	for _, p := range pairs {
		b = appendPair(b, p)
	}
	return b
}

// appendPair writes p as r<quantity>l<quantity>, with _ for an absent one,
// s for a sidecar, and a closing ;.
func appendPair(b []byte, p memoryPair) []byte {
	b = append(b, 'r')
	b = appendQuantity(b, p.Request)
	b = append(b, 'l')
	b = appendQuantity(b, p.Limit)
	if p.Sidecar {
		b = append(b, 's')
	}
	return append(b, ';')
}

// appendQuantity writes q as =<integer> or ~<canonical string>, with a
// closing comma, or _ when q is absent.
func appendQuantity(b []byte, q *resource.Quantity) []byte {
	if q == nil {
		return append(b, '_')
	}
	if v, ok := q.AsInt64(); ok {
		return append(strconv.AppendInt(append(b, '='), v, 10), ',')
	}
	return append(append(append(b, '~'), q.String()...), ',')
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
