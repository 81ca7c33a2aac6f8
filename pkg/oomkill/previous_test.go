package oomkill

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/headroom-k8s/headroom/pkg/memstats"
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
		p := serialPod(r, capacity, serial)
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
// its spec changed, terminating) gives, with the previous model, field for
// field the model built from scratch; and a new object whose spec,
// annotations and resize status are unchanged (a status update, a binding,
// a deletion) takes its figures from the previous model.
func TestWithPreviousTakesANewObjectOnlyWhereItDeclaresTheSame(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	memory := func(b int64) corev1.ResourceList { return corev1.ResourceList{corev1.ResourceMemory: bytesQ(b)} }
	serial := 0
	newPod := func(capacity int64) *corev1.Pod {
		serial++
		p := inSample(serialPod(r, capacity, serial), serial)
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
	// Each change returns the new object and whether its declarations are
	// the old object's by what sameDeclarations may know (the status of a
	// running pod, a binding).
	changes := []func(p *corev1.Pod) bool{
		func(p *corev1.Pod) bool { // kwok or a kubelet reports it running
			p.Status.Phase = corev1.PodRunning
			p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
			setEveryContainer(p, true, corev1.ContainerState{Running: &corev1.ContainerStateRunning{}})
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
			ns := containerNames(p)
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: ns[r.IntN(len(ns))], AllocatedResources: memory(quarter(r, 8) + Gi/8)})
			return false
		},
		func(p *corev1.Pod) bool { // resources actuated by a resize, now and then infeasible
			ns := containerNames(p)
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
		func(p *corev1.Pod) bool { // terminating, its processes still running: it counts in full
			p.DeletionTimestamp = &metav1.Time{}
			return true
		},
		func(p *corev1.Pod) bool { // terminating, every container exited: it counts no more
			p.DeletionTimestamp = &metav1.Time{}
			setEveryContainer(p, false, corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{}})
			return true
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

// TestWithPreviousRereadsAStatusThatChangesTheFigures: a new object of the
// same pod and generation whose status differs only where the figures read
// it gives the model built from scratch. The API server accepts two
// statuses of one container name, and a status of a container in the other
// list: the kubelet's oom_score_adj reads every status with allocated
// memory (allocatedPod), the resource helpers the last of a name, an init
// container's over the others'. A pod-level limit counts as actuated
// (status.resources) where a resize raised it.
func TestWithPreviousRereadsAStatusThatChangesTheFigures(t *testing.T) {
	memory := func(b int64) corev1.ResourceList { return corev1.ResourceList{corev1.ResourceMemory: bytesQ(b)} }
	for _, tc := range []struct {
		name          string
		podLimit      int64 // spec.resources.limits
		before, after corev1.PodStatus
		// helpersReadInitStatusFirst: the case needs the helpers that let
		// an init container's status of a name hide the containers' own.
		helpersReadInitStatusFirst bool
		// podLevelResize: the case needs pod-level in-place resize
		// (InPlacePodLevelResourcesVerticalScaling, alpha and off in 1.35).
		podLevelResize bool
	}{{
		// allocatedPod takes 2Gi, then 4Gi; the helpers the second
		// status of each, without resources (the spec's request).
		name: "an earlier status of the name with allocated memory",
		before: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", AllocatedResources: memory(2 * Gi)}, {Name: "app"}}},
		after: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", AllocatedResources: memory(4 * Gi)}, {Name: "app"}}},
	}, {
		// Before, the init containers' status of the name, without
		// resources, hides the containers' one from the helpers (the
		// spec's request); after, the helpers read 3Gi actuated.
		name: "a status of the name in the init containers' list",
		before: corev1.PodStatus{
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app",
				Resources: &corev1.ResourceRequirements{Requests: memory(3 * Gi)}, AllocatedResources: memory(3 * Gi)}},
			InitContainerStatuses: []corev1.ContainerStatus{{Name: "app"}}},
		after: corev1.PodStatus{
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app",
				Resources: &corev1.ResourceRequirements{Requests: memory(3 * Gi)}, AllocatedResources: memory(3 * Gi)}}},
		helpersReadInitStatusFirst: true,
	}, {
		// The container's worst case, 2Gi, is held to the pod's limit:
		// the spec's 1.5Gi before, 1.75Gi actuated after.
		name:           "a pod-level limit actuated by a resize",
		podLimit:       3 * Gi / 2,
		after:          corev1.PodStatus{Resources: &corev1.ResourceRequirements{Limits: memory(7 * Gi / 4)}},
		podLevelResize: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.helpersReadInitStatusFirst && !helpersReadInitStatusFirst() {
				t.Skip("this minor's component-helpers read a container's own status before an init container's of its name (v0.37 and later)")
			}
			if tc.podLevelResize && !memstats.ResourceOptions().InPlacePodLevelResourcesVerticalScalingEnabled {
				t.Skip("pod-level in-place resize is off in this minor (InPlacePodLevelResourcesVerticalScaling)")
			}
			node := testNode("n", 16*Gi, 15*Gi)
			before := burstable("p", Gi, 0)
			before.Generation = 1
			if tc.podLimit > 0 {
				before.Spec.Resources = &corev1.ResourceRequirements{Limits: memory(tc.podLimit)}
			}
			before.Status = tc.before
			before.Status.QOSClass = corev1.PodQOSBurstable
			after := before.DeepCopy()
			after.Status = tc.after
			after.Status.QOSClass = corev1.PodQOSBurstable
			prev, err := NewNode(node, []*corev1.Pod{before}, DefaultEstimate)
			if err != nil {
				t.Fatal(err)
			}
			want, err := NewNode(node, []*corev1.Pod{after}, DefaultEstimate)
			if err != nil {
				t.Fatal(err)
			}
			if reflect.DeepEqual(prev.KillOrder(), want.KillOrder()) {
				t.Fatalf("the statuses give the same figures: the case covers nothing\n%+v", want.KillOrder())
			}
			got, err := NewNode(node, []*corev1.Pod{after}, DefaultEstimate, WithPrevious(prev))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("with the previous model\n%+v\nfrom scratch\n%+v", got.KillOrder(), want.KillOrder())
			}
		})
	}
}

// setEveryContainer gives each of p's containers a status, ready or not, in
// state.
func setEveryContainer(p *corev1.Pod, ready bool, state corev1.ContainerState) {
	for _, n := range containerNames(p) {
		if !slices.ContainsFunc(p.Status.ContainerStatuses, func(cs corev1.ContainerStatus) bool { return cs.Name == n }) {
			p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: n})
		}
	}
	for i := range p.Status.ContainerStatuses {
		cs := &p.Status.ContainerStatuses[i]
		cs.Ready, cs.State = ready, state
	}
}

// containerNames are p's containers' names, init containers last.
func containerNames(p *corev1.Pod) []string {
	var ns []string
	for _, c := range append(slices.Clone(p.Spec.Containers), p.Spec.InitContainers...) {
		ns = append(ns, c.Name)
	}
	return ns
}

// serialPod is a random pod of a node of capacity bytes, a property test's
// or a parity test's, named by its serial number.
func serialPod(r *rand.Rand, capacity int64, serial int) *corev1.Pod {
	var p *corev1.Pod
	if r.IntN(2) == 0 {
		p = propertyPod(r, "ns", "")
	} else {
		p = parityPod(r, capacity)
	}
	p.Name = fmt.Sprintf("p%04d", serial)
	return p
}

// helpersReadInitStatusFirst reports whether component-helpers, as built,
// take an init container's status of a container's name for the
// container's own (v0.36 and before index the statuses by name, the init
// containers' last; v0.37 looks the containers' up first).
func helpersReadInitStatusFirst() bool {
	memory := corev1.ResourceList{corev1.ResourceMemory: bytesQ(3 * Gi)}
	pod := burstable("probe", Gi, 0)
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name,
		Resources: &corev1.ResourceRequirements{Requests: memory}, AllocatedResources: memory}}
	pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name}}
	got := resourcehelper.AggregateContainerRequests(pod, resourcehelper.PodResourcesOptions{UseStatusResources: true})
	return memoryOf(got) != 3*Gi
}
