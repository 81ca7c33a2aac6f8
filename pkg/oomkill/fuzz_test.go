package oomkill

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fuzzSource turns fuzz bytes into model inputs; it reads zeros once the
// bytes run out.
type fuzzSource struct{ b []byte }

func (s *fuzzSource) byte() byte {
	if len(s.b) == 0 {
		return 0
	}
	c := s.b[0]
	s.b = s.b[1:]
	return c
}

func (s *fuzzSource) int64() int64 {
	var buf [8]byte
	n := copy(buf[:], s.b)
	s.b = s.b[n:]
	return int64(binary.BigEndian.Uint64(buf[:]))
}

// quantity draws a memory quantity, often at the edges of int64.
func (s *fuzzSource) quantity() (resource.Quantity, bool) {
	k := int64(s.byte())
	switch s.byte() % 14 {
	case 0:
		return resource.Quantity{}, false
	case 1:
		return bytesQ(k * Mi), true
	case 2:
		return bytesQ(k * Gi), true
	case 3:
		return bytesQ(math.MaxInt64 - k), true
	case 4:
		return bytesQ(math.MaxInt64/1000 + k - 128), true
	case 5:
		return bytesQ(safeSum + k - 128), true
	case 6:
		return bytesQ(s.int64()), true // any int64, negative included
	case 7:
		return resource.MustParse([]string{"10E", "1e30", "9.3E", "8Ei", "-1e30", "0.5", "1m"}[k%7]), true
	case 8:
		return bytesQ(0), true
	case 9:
		return bytesQ(-k), true
	default:
		return bytesQ(k * 64 * Mi), true
	}
}

func (s *fuzzSource) pod(ns, name string) *corev1.Pod {
	pod := &corev1.Pod{}
	pod.Namespace, pod.Name = ns, name
	pod.Status.Phase = corev1.PodRunning
	flags := s.byte()
	container := func(name string) corev1.Container {
		c := corev1.Container{Name: name}
		c.Resources.Requests = corev1.ResourceList{}
		c.Resources.Limits = corev1.ResourceList{}
		if q, ok := s.quantity(); ok {
			c.Resources.Requests[corev1.ResourceMemory] = q
			if flags&1 != 0 { // Guaranteed: limits equal requests
				c.Resources.Limits[corev1.ResourceMemory] = q
				c.Resources.Requests[corev1.ResourceCPU] = resource.MustParse("1")
				c.Resources.Limits[corev1.ResourceCPU] = resource.MustParse("1")
			}
		}
		if q, ok := s.quantity(); ok && flags&1 == 0 {
			c.Resources.Limits[corev1.ResourceMemory] = q
		}
		return c
	}
	for i := range int(s.byte() % 4) { // zero regular containers is possible
		pod.Spec.Containers = append(pod.Spec.Containers, container(fmt.Sprintf("c%d", i)))
	}
	for i := range int(s.byte() % 3) {
		c := container(fmt.Sprintf("i%d", i))
		if s.byte()%2 == 0 {
			always := corev1.ContainerRestartPolicyAlways
			c.RestartPolicy = &always
		}
		pod.Spec.InitContainers = append(pod.Spec.InitContainers, c)
	}
	if flags&2 != 0 {
		pod.Spec.Resources = &corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
		if q, ok := s.quantity(); ok {
			pod.Spec.Resources.Requests[corev1.ResourceMemory] = q
		}
		if q, ok := s.quantity(); ok {
			pod.Spec.Resources.Limits[corev1.ResourceMemory] = q
		}
	}
	if flags&4 != 0 {
		priority := int32(2000001000)
		pod.Spec.Priority = &priority
	}
	if flags&8 != 0 {
		pod.Status.Phase = corev1.PodSucceeded
	}
	if flags&16 != 0 { // being resized in place: allocated and running figures in status
		for _, c := range pod.Spec.Containers {
			cs := corev1.ContainerStatus{Name: c.Name, AllocatedResources: corev1.ResourceList{},
				Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}}
			if q, ok := s.quantity(); ok {
				cs.AllocatedResources[corev1.ResourceMemory] = q
				cs.Resources.Requests[corev1.ResourceMemory] = q
			}
			if q, ok := s.quantity(); ok {
				cs.Resources.Limits[corev1.ResourceMemory] = q
			}
			pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, cs)
		}
	}
	if flags&64 != 0 { // terminating, its containers exited or not
		pod.DeletionTimestamp = &metav1.Time{}
		for i := range pod.Status.ContainerStatuses {
			if s.byte()%2 == 0 {
				pod.Status.ContainerStatuses[i].State.Terminated = &corev1.ContainerStateTerminated{}
			}
		}
	}
	if flags&32 != 0 {
		if q, ok := s.quantity(); ok {
			pod.Spec.Overhead = corev1.ResourceList{corev1.ResourceMemory: q}
		}
	}
	return pod
}

func FuzzAssess(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 2, 0, 16, 3, 200, 100, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})
	f.Add([]byte{3, 3, 1, 1, 7, 3, 3, 3, 3, 2, 0, 1, 1, 3, 3, 3, 6, 6, 1, 0, 2, 2, 5, 5})
	f.Add([]byte(strings.Repeat("\xff\x03\x02\x06\x01", 40)))
	f.Add([]byte(strings.Repeat("\x10\x02\x01\x0a\x07", 60)))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &fuzzSource{b: data}
		node := &corev1.Node{}
		node.Name = "n"
		node.Status.Capacity = corev1.ResourceList{}
		node.Status.Allocatable = corev1.ResourceList{}
		if q, ok := s.quantity(); ok {
			node.Status.Capacity[corev1.ResourceMemory] = q
		}
		if q, ok := s.quantity(); ok {
			node.Status.Allocatable[corev1.ResourceMemory] = q
		}
		est := Estimate{RequestMultiplierPercent: int64(int8(s.byte())) * 10, FractionOfAllocatablePermille: int64(int8(s.byte())) * 10}
		var pods []*corev1.Pod
		for i := range int(s.byte() % 8) {
			pods = append(pods, s.pod("ns", fmt.Sprintf("p%d", i)))
		}
		x := s.pod("", "")
		x.Status.Phase = corev1.PodPending
		x.DeletionTimestamp = nil // the scheduler places no terminating pod

		n, err := NewNode(node, pods, est)
		if err != nil {
			if !errors.Is(err, ErrUnknownMemory) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		checkNode(t, n)
		in := NewIncoming(x)
		a := n.Assess(in)
		if a.RiskPPM < 0 || a.RiskPPM > 1_000_000 || a.CollateralBytes < 0 || a.ShortfallBefore < 0 || a.ShortfallAfter < a.ShortfallBefore {
			t.Fatalf("out of range: %+v", a)
		}
		if a.Rank < -1 || a.Rank > len(n.KillOrder()) {
			t.Fatalf("rank %d with %d containers", a.Rank, len(n.KillOrder()))
		}
		if want := referenceAssess(t, node, pods, x, est); a != want {
			t.Fatalf("Assess = %+v, reference walk %+v", a, want)
		}
		for _, v := range n.KillOrder() {
			if v.Worst < 0 || v.Request < 0 {
				t.Fatalf("negative bytes in %+v", v)
			}
		}
		_ = n.ExplainWith(in).String()
		_ = n.ShortfallWithout(pods...)
	})
}
