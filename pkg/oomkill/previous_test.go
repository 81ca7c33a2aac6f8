package oomkill

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestWithPreviousBuildsTheSameModel: a model that takes its pods'
// declarations from an earlier model of the node (WithPrevious) is, field
// for field, the model built from scratch, as the scheduler changes nodes:
// pods removed (the last moved into the gap, as NodeInfo removes them) and
// added at the end, a new memory sample, now and then a node whose memory
// or an Estimate that changed, so that nothing may be taken.
func TestWithPreviousBuildsTheSameModel(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	estimates := []Estimate{DefaultEstimate, {100, 0}, {300, 250}}
	serial := 0
	newPod := func(capacity int64) *corev1.Pod {
		serial++
		var p *corev1.Pod
		if r.IntN(2) == 0 {
			p = propertyPod(r, "ns", "")
		} else {
			p = parityPod(r, capacity)
		}
		p.Name = fmt.Sprintf("p%04d", serial)
		p.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", serial))
		return inSample(p, serial)
	}
	sampleOf := func(pods []*corev1.Pod) []Option {
		if r.IntN(2) == 0 {
			return nil // declared-only
		}
		held := map[*corev1.Pod]int64{}
		for _, p := range pods {
			if r.IntN(3) > 0 {
				held[p] = quarter(r, 16)
			}
		}
		return []Option{WithMemorySample(memSample(quarter(r, 64), held))}
	}
	var reused int
	for trial := range 1500 {
		capacity := []int64{4 * Gi, 16 * Gi, 64 * Gi}[r.IntN(3)] + r.Int64N(Gi)
		allocatable := capacity - r.Int64N(capacity/4)
		node := testNode("n", capacity, allocatable)
		est := estimates[r.IntN(len(estimates))]
		var before []*corev1.Pod
		for range r.IntN(30) {
			before = append(before, newPod(capacity))
		}
		prev, err := NewNode(node, before, est, sampleOf(before)...)
		if err != nil {
			t.Fatal(err)
		}

		after := slices.Clone(before)
		for range r.IntN(3) {
			if len(after) > 0 {
				i := r.IntN(len(after))
				after[i] = after[len(after)-1]
				after = after[:len(after)-1]
			}
		}
		for range r.IntN(3) {
			after = append(after, newPod(capacity))
		}
		switch r.IntN(8) {
		case 0:
			node = testNode("n", capacity, allocatable-r.Int64N(allocatable/2+1))
		case 1:
			node = testNode("n", capacity+Gi, allocatable)
		case 2:
			est = estimates[r.IntN(len(estimates))]
		}
		opts := sampleOf(after)
		want, err := NewNode(node, after, est, opts...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := NewNode(node, after, est, append(opts, WithPrevious(prev))...)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: with the previous model\n%+v\nfrom scratch\n%+v", trial, got.KillOrder(), want.KillOrder())
		}
		if prev.reusableFor(want) != nil && len(before) > 0 {
			reused++
		}
	}
	if reused < 700 {
		t.Fatalf("%d trials could take declarations from the previous model: the test no longer covers reuse", reused)
	}
}

// TestWithPreviousTakesANewObjectOnlyWhereItDeclaresTheSame: a pod given
// as a new object of the same UID (bound, its status updated, resized,
// its spec changed) gives, with the previous model, field for field the
// model built from scratch; and a new object whose spec, annotations and
// resize status are unchanged (a status update, a binding) takes its
// figures from the previous model.
func TestWithPreviousTakesANewObjectOnlyWhereItDeclaresTheSame(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	memory := func(b int64) corev1.ResourceList { return corev1.ResourceList{corev1.ResourceMemory: bytesQ(b)} }
	serial := 0
	newPod := func(capacity int64) *corev1.Pod {
		serial++
		var p *corev1.Pod
		if r.IntN(2) == 0 {
			p = propertyPod(r, "ns", "")
		} else {
			p = parityPod(r, capacity)
		}
		p.Name = fmt.Sprintf("p%04d", serial)
		p = inSample(p, serial)
		if r.IntN(6) > 0 {
			p.Generation = 1 + r.Int64N(3) // from an API server
		}
		if r.IntN(3) == 0 {
			p.Spec.PriorityClassName = "system-node-critical"
		}
		if r.IntN(3) == 0 { // resized before: less actuated than its spec asks
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: p.Spec.Containers[0].Name,
				Resources: &corev1.ResourceRequirements{Requests: memory(Gi / 16)}})
		}
		return p
	}
	names := func(p *corev1.Pod) []string {
		var ns []string
		for _, c := range append(slices.Clone(p.Spec.Containers), p.Spec.InitContainers...) {
			ns = append(ns, c.Name)
		}
		return ns
	}
	// Each change returns the new object and whether its declarations are
	// the old object's by what sameDeclarations may know (the status of a
	// running pod, a binding).
	changes := []func(p *corev1.Pod) bool{
		func(p *corev1.Pod) bool { // kwok or a kubelet reports it running
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
			for _, n := range names(p) {
				if !slices.ContainsFunc(p.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.Name == n }) {
					p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: n})
				}
			}
			for i := range p.Status.ContainerStatuses {
				cs := &p.Status.ContainerStatuses[i]
				cs.Ready, cs.State = true, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}
			}
			return true
		},
		func(p *corev1.Pod) bool { // bound, with the binding's annotations
			p.Spec.NodeName = "n"
			p.Annotations = map[string]string{"bound-by": "test"}
			return true
		},
		func(p *corev1.Pod) bool { // its spec changed: the API server raises the generation
			c := &p.Spec.Containers[r.IntN(len(p.Spec.Containers))]
			c.Resources.Requests = memory(quarter(r, 8) + Gi/8)
			if p.Generation > 0 {
				p.Generation++
			}
			return false
		},
		func(p *corev1.Pod) bool { // a QoS class in status
			p.Status.QOSClass = []corev1.PodQOSClass{corev1.PodQOSGuaranteed, corev1.PodQOSBurstable, corev1.PodQOSBestEffort}[r.IntN(3)]
			return false
		},
		func(p *corev1.Pod) bool { // a static pod
			p.Annotations = map[string]string{"kubernetes.io/config.source": "file"}
			return false
		},
		func(p *corev1.Pod) bool { // a mirror pod
			p.Annotations = map[string]string{"kubernetes.io/config.mirror": "x"}
			return false
		},
		func(p *corev1.Pod) bool { // memory allocated by a resize
			ns := names(p)
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: ns[r.IntN(len(ns))], AllocatedResources: memory(quarter(r, 8) + Gi/8)})
			return false
		},
		func(p *corev1.Pod) bool { // resources actuated by a resize, now and then infeasible
			ns := names(p)
			p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{Name: ns[r.IntN(len(ns))],
				Resources: &corev1.ResourceRequirements{Requests: memory(quarter(r, 8) + Gi/8), Limits: memory(quarter(r, 8) + Gi)}})
			if r.IntN(2) == 0 {
				p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible})
			}
			return false
		},
		func(p *corev1.Pod) bool { // a resize found infeasible
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodResizePending, Status: corev1.ConditionTrue, Reason: corev1.PodReasonInfeasible})
			return false
		},
	}
	var reused, changed int
	for trial := range 1500 {
		capacity := []int64{4 * Gi, 16 * Gi, 64 * Gi}[r.IntN(3)] + r.Int64N(Gi)
		node := testNode("n", capacity, capacity-r.Int64N(capacity/4))
		var before []*corev1.Pod
		for range 1 + r.IntN(12) {
			before = append(before, newPod(capacity))
		}
		prev, err := NewNode(node, before, DefaultEstimate)
		if err != nil {
			t.Fatal(err)
		}
		after := slices.Clone(before)
		for i, p := range after {
			if r.IntN(2) == 0 {
				continue
			}
			cp := p.DeepCopy()
			same := true
			for range 1 + r.IntN(2) {
				same = changes[r.IntN(len(changes))](cp) && same
			}
			after[i] = cp
			refs := refsOf(cp, nil)
			_, _, took := prev.declaredOf(cp, i, len(refs))
			switch {
			case same && cp.Generation > 0:
				if !took {
					t.Fatalf("trial %d: pod %s, the same declarations, not taken from the previous model", trial, cp.Name)
				}
				reused++
			case !same:
				changed++
			}
		}
		var opts []Option
		if r.IntN(2) == 0 {
			held := map[*corev1.Pod]int64{}
			for _, p := range after {
				held[p] = quarter(r, 16)
			}
			opts = append(opts, WithMemorySample(memSample(quarter(r, 64), held)))
		}
		want, err := NewNode(node, after, DefaultEstimate, opts...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := NewNode(node, after, DefaultEstimate, append(opts, WithPrevious(prev))...)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: with the previous model\n%+v\nfrom scratch\n%+v", trial, got.KillOrder(), want.KillOrder())
		}
	}
	if reused < 500 || changed < 3000 {
		t.Fatalf("%d pods taken from the previous model and %d changed: the test no longer covers both", reused, changed)
	}
}
