package oomkill

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/kubernetes/pkg/kubelet/qos"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// A pod-level memory limit (KEP-2837) caps the pod's cgroup, so it caps
// the sum of its containers' worst cases, not each one: a pod of an
// unlimited container (estimate 6Gi) and one limited to 8Gi under a 3Gi
// pod-level limit can hold 3Gi in all, shared out in proportion (6:8).
// Overhead is added to the pod-level limit, as PodLimits adds it to a
// non-zero limit and the kubelet sets the pod cgroup's limit from it.
func TestPodLevelLimitCapsThePod(t *testing.T) {
	for _, overhead := range []int64{0, 256 * Mi} {
		p := testPod("default", "p", ctr{name: "a", req: Gi}, ctr{name: "b", req: Gi, lim: 8 * Gi})
		p.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: bytesQ(3 * Gi)}}
		if overhead > 0 {
			p.Spec.Overhead = corev1.ResourceList{corev1.ResourceMemory: bytesQ(overhead)}
		}
		want := 3*Gi + overhead
		n := mustNode(t, testNode("n", 64*Gi, 60*Gi), []*corev1.Pod{p}, DefaultEstimate)
		if got := n.TotalWorst(); got != want {
			t.Errorf("overhead %d: the pod's worst case is %d, want its cgroup's limit %d", overhead, got, want)
		}
		for _, v := range n.KillOrder() {
			share := map[string]int64{"a": want * 6 / 14, "b": want - want*6/14}[v.Container]
			if v.Worst != share {
				t.Errorf("overhead %d: %s: worst %d, want %d", overhead, v.Container, v.Worst, share)
			}
		}
		in := NewIncoming(p)
		empty := mustNode(t, testNode("m", 64*Gi, 60*Gi), nil, DefaultEstimate)
		if got := in.WorstOn(empty); got != want {
			t.Errorf("overhead %d: incoming WorstOn %d, want %d", overhead, got, want)
		}
		if got := in.WorstWithin(60*Gi, DefaultEstimate); got != want {
			t.Errorf("overhead %d: incoming WorstWithin %d, want %d", overhead, got, want)
		}
		if got := empty.Assess(in).ShortfallAfter; got != 0 {
			t.Errorf("overhead %d: shortfall %d on an empty node", overhead, got)
		}
	}
}

// resizing makes pod's container "app" one being resized in place: the
// kubelet has allocated allocated bytes of request, and the container runs
// with a limit of running bytes.
func resizing(pod *corev1.Pod, allocated, running int64) *corev1.Pod {
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name:               "app",
		AllocatedResources: corev1.ResourceList{corev1.ResourceMemory: bytesQ(allocated)},
		Resources: &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceMemory: bytesQ(allocated)},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: bytesQ(running)},
		},
	}}
	return pod
}

// A pod being resized in place counts as the scheduler counts it: the
// larger of its spec, what the kubelet allocated and what runs
// (component-helpers' PodRequests and PodLimits with UseStatusResources).
// Its spec asks for 1Gi request and a 2Gi limit (a resize down); the kubelet
// allocated 3Gi and the container still runs with a 4Gi limit. Its adj is
// the kubelet's on the allocated request.
func TestInPlaceResizeCountsTheLargerOfSpecAllocatedAndActual(t *testing.T) {
	capacity := 16 * Gi
	p := resizing(burstable("r", Gi, 2*Gi), 3*Gi, 4*Gi)
	n := mustNode(t, testNode("n", capacity, capacity), []*corev1.Pod{p}, DefaultEstimate)
	v := n.KillOrder()[0]
	if v.Worst != 4*Gi || v.Request != 3*Gi {
		t.Errorf("worst %d, request %d; want the running limit 4Gi and the allocated request 3Gi", v.Worst, v.Request)
	}
	allocated := burstable("r", 3*Gi, 4*Gi)
	if want := qos.GetContainerOOMScoreAdjust(allocated, &allocated.Spec.Containers[0], capacity); v.Adj != want {
		t.Errorf("adj %d, want the kubelet's %d on the allocated request", v.Adj, want)
	}
	if got := NewIncoming(p).WorstWithin(capacity, DefaultEstimate); got != 4*Gi {
		t.Errorf("incoming worst %d, want 4Gi", got)
	}
	if got := memstats.PodRequest(p); got != 3*Gi {
		t.Errorf("PodRequest %d, want the allocated 3Gi", got)
	}
	opts := memstats.ResourceOptions()
	if !opts.UseStatusResources || opts.SkipPodLevelResources {
		t.Errorf("ResourceOptions %+v: want the scheduler's defaults of v1.36 (status resources used, pod-level resources counted)", opts)
	}
	if got := resourcehelper.PodRequests(p, opts)[corev1.ResourceMemory]; got.Value() != 3*Gi {
		t.Errorf("PodRequests with the scheduler's options: %s", got.String())
	}
}

// RuntimeClass overhead is part of every pod's request as the scheduler
// counts it (PodRequests adds it even to a pod that requests nothing): a
// pod that requests nothing is taken to hold the estimate of a pod without
// a request, plus its overhead; never the overhead alone.
func TestOverheadOnTopOfWhatAPodDeclares(t *testing.T) {
	const noRequest, overhead = 2 * Gi, 128 * Mi
	withOverhead := func(p *corev1.Pod) *corev1.Pod {
		p.Spec.Overhead = corev1.ResourceList{corev1.ResourceMemory: bytesQ(overhead)}
		return p
	}
	for _, c := range []struct {
		pod  *corev1.Pod
		want int64
	}{
		{bestEffort("none"), noRequest},
		{withOverhead(bestEffort("overhead-only")), noRequest + overhead},
		{burstable("request", Gi, 0), Gi},
		{withOverhead(burstable("request-and-overhead", Gi, 0)), Gi + overhead},
	} {
		if got := memstats.Declared(c.pod, noRequest); got != c.want {
			t.Errorf("%s: Declared %d, want %d", c.pod.Name, got, c.want)
		}
	}
}

// With swap (LimitedSwap), the kernel's oom_badness counts a task's swap
// entries with its resident memory, and its totalpages is RAM plus swap:
// of two BestEffort pods holding 2Gi each, the one with 1Gi swapped out
// dies first, and adj weighs on capacity + swap.
func TestSwapCountsInBadness(t *testing.T) {
	plain, swapped := inSample(bestEffort("a-plain"), 1), inSample(bestEffort("b-swapped"), 2)
	s := memSample(4*Gi, map[*corev1.Pod]int64{plain: 2 * Gi, swapped: 2 * Gi})
	s.SwapTotal = 4 * Gi
	s.SwapPods = memstats.SwapPodListFormat.New([]sample.PodFigure{{UID: swapped.UID, Value: Gi}})
	n, err := NewNode(testNode("n", 16*Gi, 15*Gi), []*corev1.Pod{plain, swapped}, DefaultEstimate, WithMemorySample(s))
	if err != nil {
		t.Fatal(err)
	}
	order := n.KillOrder()
	if order[0].Pod != "b-swapped" || order[0].Swap != Gi || order[1].Swap != 0 {
		t.Fatalf("kill order %s (swap %d), %s (swap %d); want b-swapped first, its 1Gi of swap counted",
			order[0].Pod, order[0].Swap, order[1].Pod, order[1].Swap)
	}
	totalPages := 16*Gi + 4*Gi
	if want := 2*Gi + Gi + totalPages; order[0].Points != want {
		t.Errorf("b-swapped points %d, want used + swap + 1000 × (RAM + swap) / 1000 = %d", order[0].Points, want)
	}
	if want := 2*Gi + totalPages; order[1].Points != want {
		t.Errorf("a-plain points %d, want %d", order[1].Points, want)
	}
	// An incoming BestEffort pod ranks on the same totalpages: it holds its
	// estimate (1.5Gi) + 1000 × (RAM + swap) / 1000, behind both.
	if r := n.Assess(NewIncoming(bestEffort("c-new"))).Rank; r != 2 {
		t.Errorf("incoming rank %d, want 2", r)
	}
	// Without swap reported, the two are equal and go by name.
	s.SwapTotal, s.SwapPods = 0, sample.PodList{}
	n, _ = NewNode(testNode("n", 16*Gi, 15*Gi), []*corev1.Pod{plain, swapped}, DefaultEstimate, WithMemorySample(s))
	if first := n.KillOrder()[0]; first.Pod != "a-plain" || first.Points != 2*Gi+16*Gi {
		t.Errorf("without swap: %s first with %d points", first.Pod, first.Points)
	}
}

// A terminating pod holds its memory until its processes exit: the kernel
// still counts, and may kill, a pod in its grace period. Once the kubelet
// reports every container terminated, it holds nothing, in the declared
// model and on a memory sample (its listed figure no longer counts).
func TestTerminatingPodsCountUntilTheirProcessesExit(t *testing.T) {
	stay := inSample(guaranteed("stay", 2*Gi), 1)
	going := inSample(burstable("going", Gi, 4*Gi), 2)
	going.DeletionTimestamp = &metav1.Time{Time: sampledAt}
	exitedPod := going.DeepCopy()
	exitedPod.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}
	s := memSample(5*Gi, map[*corev1.Pod]int64{stay: 2 * Gi, going: 3 * Gi})
	for _, c := range []struct {
		name                string
		pod                 *corev1.Pod
		worst, used, victim int64
	}{
		{"running in its grace period", going, 6 * Gi, 5 * Gi, 2},
		{"its containers exited", exitedPod, 2 * Gi, 2 * Gi, 1},
	} {
		pods := []*corev1.Pod{stay, c.pod}
		n := mustNode(t, testNode("n", 16*Gi, 15*Gi), pods, DefaultEstimate)
		m, err := NewNode(testNode("n", 16*Gi, 15*Gi), pods, DefaultEstimate, WithMemorySample(s))
		if err != nil {
			t.Fatal(err)
		}
		if n.TotalWorst() != c.worst || m.UsedNow() != c.used || int64(len(m.KillOrder())) != c.victim {
			t.Errorf("%s: worst %d, used now %d, %d containers; want %d, %d, %d",
				c.name, n.TotalWorst(), m.UsedNow(), len(m.KillOrder()), c.worst, c.used, c.victim)
		}
	}
}
