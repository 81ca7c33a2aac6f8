package oomkill

import (
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	v1qos "k8s.io/kubernetes/pkg/apis/core/v1/helper/qos"
)

// benchNode returns a 256Gi node holding pods pods of mixed QoS: a fifth
// BestEffort, a fifth Guaranteed, the rest Burstable, every third of those
// with a sidecar.
func benchNode(pods int) (*Node, []*corev1.Pod) {
	var list []*corev1.Pod
	for i := range pods {
		name := fmt.Sprintf("pod-%03d", i)
		req := int64(64+i%16*64) * Mi
		switch {
		case i%5 == 0:
			list = append(list, bestEffort(name))
		case i%5 == 1:
			list = append(list, guaranteed(name, req))
		case i%3 == 0:
			list = append(list, testPod("default", name,
				ctr{name: "app", req: req, lim: 4 * req},
				ctr{name: "proxy", req: 32 * Mi, lim: 128 * Mi, sidecar: true}))
		default:
			list = append(list, burstable(name, req, 2*req))
		}
	}
	for _, p := range list {
		p.Status.QOSClass = v1qos.ComputePodQOS(p) // as the API server sets it
	}
	n, err := NewNode(testNode("bench", 256*Gi, 250*Gi), list, DefaultEstimate)
	if err != nil {
		panic(err)
	}
	return n, list
}

func benchIncoming() *corev1.Pod {
	return testPod("default", "incoming",
		ctr{name: "app", req: 512 * Mi, lim: 2 * Gi},
		ctr{name: "worker", req: 256 * Mi},
		ctr{name: "proxy", req: 32 * Mi, lim: 128 * Mi, sidecar: true})
}

var sink Assessment

func BenchmarkAssess(b *testing.B) {
	for _, pods := range []int{10, 110, 250} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			n, _ := benchNode(pods)
			in := NewIncoming(benchIncoming())
			n.Assess(in) // derive the pod's figures for this node shape
			b.ReportAllocs()
			for b.Loop() {
				sink = n.Assess(in)
			}
		})
	}
}

func BenchmarkNewNode(b *testing.B) {
	for _, pods := range []int{10, 110, 250} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			_, list := benchNode(pods)
			node := testNode("bench", 256*Gi, 250*Gi)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := NewNode(node, list, DefaultEstimate); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkNewNodeWithPrevious is NewNode for a node that changed since its
// last model (WithPrevious): a new sample on the node (the same pods), a
// pod placed on it (one pod more), and a pod reported running (a new
// object of its last pod, its status alone changed).
func BenchmarkNewNodeWithPrevious(b *testing.B) {
	for _, pods := range []int{10, 110, 250} {
		_, list := benchNode(pods + 1)
		for _, p := range list {
			p.Generation = 1 // as the API server sets it
		}
		running := slices.Clone(list[:pods])
		last := running[pods-1].DeepCopy()
		last.Status.Phase = corev1.PodRunning
		last.Status.ContainerStatuses = append(last.Status.ContainerStatuses, corev1.ContainerStatus{Name: last.Spec.Containers[0].Name, Ready: true})
		running[pods-1] = last
		node := testNode("bench", 256*Gi, 250*Gi)
		for _, change := range []struct {
			name          string
			before, after []*corev1.Pod
		}{
			{"sample", list[:pods], list[:pods]},
			{"placed", list[:pods], list},
			{"running", list[:pods], running},
		} {
			b.Run(fmt.Sprintf("pods=%d/%s", pods, change.name), func(b *testing.B) {
				prev, err := NewNode(node, change.before, DefaultEstimate)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				for b.Loop() {
					if _, err := NewNode(node, change.after, DefaultEstimate, WithPrevious(prev)); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
