package oomkill

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

var sampledAt = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

// inSample gives pod a UUID and marks it bound and started a minute before
// the sample, so that the sample holds what it uses.
func inSample(pod *corev1.Pod, n int) *corev1.Pod {
	pod.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", n))
	before := metav1.NewTime(sampledAt.Add(-time.Minute))
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: before}}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: before}}}}
	return pod
}

// memSample is a node's memory sample: the node's working set and what
// each pod's cgroup holds.
func memSample(used int64, pods map[*corev1.Pod]int64) memstats.NodeStats {
	var figures []sample.PodFigure
	for p, b := range pods {
		figures = append(figures, sample.PodFigure{UID: p.UID, Value: b})
	}
	return memstats.NodeStats{Used: used, SampledAt: sampledAt, Pods: memstats.PodListFormat.New(figures)}
}

// TestWorkedExampleMeasured pins the example of the package documentation
// ("Measured memory"): the node of TestWorkedExample, its pods measured.
func TestWorkedExampleMeasured(t *testing.T) {
	batch, web, db := inSample(bestEffort("batch"), 1), inSample(burstable("web", 1*Gi, 8*Gi), 2), inSample(guaranteed("db", 4*Gi), 3)
	pods := []*corev1.Pod{batch, web, db}
	s := memSample(14*Gi+768*Mi, map[*corev1.Pod]int64{web: 6 * Gi, batch: 3 * Gi, db: 4 * Gi})
	n, err := NewNode(testNode("worker-1", 16*Gi, 15*Gi), pods, DefaultEstimate, WithMemorySample(s))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		pod                 string
		used, worst, points int64
	}
	want := []row{
		{"web", 6 * Gi, 8 * Gi, 22557168238},
		{"batch", 3 * Gi, 3 * Gi, 20401094656}, // measured above its 1.5Gi estimate: its worst case is raised
		{"db", 4 * Gi, 4 * Gi, -12833362280},
	}
	for i, v := range n.KillOrder() {
		if w := want[i]; v.Pod != w.pod || v.Used != w.used || v.Worst != w.worst || v.Points != w.points || !v.Measured {
			t.Errorf("#%d = %s used %d worst %d points %d measured %v, want %+v", i, v.Pod, v.Used, v.Worst, v.Points, v.Measured, w)
		}
	}
	if !n.Measured() || n.UsedNow() != 14*Gi+768*Mi || n.ShortfallNow() != 0 || n.TotalWorst() != 15*Gi || n.Shortfall() != 0 {
		t.Errorf("measured %v, used now %d, shortfall now %d, total worst %d, shortfall %d", n.Measured(), n.UsedNow(), n.ShortfallNow(), n.TotalWorst(), n.Shortfall())
	}
	in := NewIncoming(burstable("api", 512*Mi, 6*Gi))
	wantA := Assessment{
		ShortfallBefore: 0, ShortfallAfter: 6 * Gi, RiskPPM: 0, CollateralBytes: 8 * Gi, Rank: 2,
		Measured: true,
		Now:      NowAssessment{ShortfallBefore: 0, ShortfallAfter: 256 * Mi, RiskPPM: 0, CollateralBytes: 6 * Gi, PodNow: 512 * Mi},
	}
	if got := n.Assess(in); got != wantA {
		t.Errorf("Assess = %+v\nwant     %+v", got, wantA)
	}
	e := n.ExplainWith(in)
	if !e.Measured || e.UsedNow != 15*Gi+256*Mi || e.ShortfallNow != 256*Mi || e.AtRiskNowBytes != 6*Gi {
		t.Errorf("ExplainWith: measured %v, used now %d, shortfall now %d, at risk now %d", e.Measured, e.UsedNow, e.ShortfallNow, e.AtRiskNowBytes)
	}
	if o := e.Order; o[2].Pod != "api" || !o[2].Incoming || o[2].Used != 512*Mi || !o[0].AtRiskNow || o[1].AtRiskNow {
		t.Errorf("ExplainWith order %+v: want web at risk now, api third holding 512Mi", o)
	}
	if out := e.String(); !strings.Contains(out, "measured: working set 15616Mi, shortfall now 256Mi, at risk now 6Gi") || !strings.Contains(out, "AT RISK NOW") {
		t.Errorf("String:\n%s", out)
	}
}

// kernelPoints is oom_badness of mm/oom_kill.c for a task holding used
// bytes on a node of capacity bytes, in pages: rss + adj × (totalpages /
// 1000), totalpages the node's pages.
func kernelPoints(used int64, adj int, capacity int64) int64 {
	const page = 4096
	totalpages := capacity / page
	return used/page + int64(adj)*(totalpages/1000)
}

// TestMeasuredKillOrderIsTheKernels: on a measured node the kill order is
// the kernel's, by what each container holds plus oom_score_adj, whatever
// the containers declare. Figures are whole pages and the capacity a
// multiple of 1000 pages, so the model's bytes and the kernel's pages rank
// alike exactly.
func TestMeasuredKillOrderIsTheKernels(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const page = 4096
	capacity := int64(4000) * 1000 * page // 15.26 GiB
	for round := range 200 {
		var pods []*corev1.Pod
		used := map[*corev1.Pod]int64{}
		for i := range 2 + r.IntN(12) {
			var p *corev1.Pod
			name := fmt.Sprintf("p%02d", i)
			switch r.IntN(3) {
			case 0:
				p = bestEffort(name)
			case 1:
				req := int64(1+r.IntN(2000)) * Mi
				p = burstable(name, req, req+int64(r.IntN(4000))*Mi)
			default:
				p = guaranteed(name, int64(1+r.IntN(2000))*Mi)
			}
			p = inSample(p, round*100+i)
			pods = append(pods, p)
			used[p] = int64(r.IntN(1<<19)) * page
		}
		n, err := NewNode(testNode("n", capacity, capacity-Gi), pods, DefaultEstimate, WithMemorySample(memSample(capacity/2, used)))
		if err != nil {
			t.Fatal(err)
		}
		order := n.KillOrder()
		for i := 1; i < len(order); i++ {
			a, b := order[i-1], order[i]
			if ka, kb := kernelPoints(a.Used, a.Adj, capacity), kernelPoints(b.Used, b.Adj, capacity); ka < kb {
				t.Fatalf("round %d: %s (used %d, adj %d, kernel %d) dies before %s (used %d, adj %d, kernel %d)",
					round, a.Pod, a.Used, a.Adj, ka, b.Pod, b.Used, b.Adj, kb)
			}
		}
	}
}

// TestMeasuredOrderDiffersFromDeclared: two BestEffort pods declare the
// same (nothing); the kernel kills the one that holds more first, and so
// does the measured model, where the declared one can only go by name.
func TestMeasuredOrderDiffersFromDeclared(t *testing.T) {
	small, big := inSample(bestEffort("a-small"), 1), inSample(bestEffort("b-big"), 2)
	pods := []*corev1.Pod{small, big}
	declared := mustNode(t, testNode("n", 16*Gi, 15*Gi), pods, DefaultEstimate)
	if got := declared.KillOrder()[0].Pod; got != "a-small" {
		t.Fatalf("declared order starts with %s, want a-small (by name)", got)
	}
	measured, err := NewNode(testNode("n", 16*Gi, 15*Gi), pods, DefaultEstimate, WithMemorySample(memSample(4*Gi, map[*corev1.Pod]int64{small: 100 * Mi, big: 3 * Gi})))
	if err != nil {
		t.Fatal(err)
	}
	if got := measured.KillOrder()[0].Pod; got != "b-big" {
		t.Errorf("measured order starts with %s, want b-big", got)
	}
}

// TestMeasuredWithoutAListCountsDeclarations: a sample without memory-pods
// knows the node's working set only; each pod counts what it requests (a
// pod without a request: the no-limit estimate), as the shared estimate
// counts a pod the sample did not measure.
func TestMeasuredWithoutAListCountsDeclarations(t *testing.T) {
	web, batch := inSample(burstable("web", 1*Gi, 8*Gi), 1), inSample(bestEffort("batch"), 2)
	s := memstats.NodeStats{Used: 5 * Gi, SampledAt: sampledAt}
	n, err := NewNode(testNode("n", 16*Gi, 15*Gi), []*corev1.Pod{web, batch}, DefaultEstimate, WithMemorySample(s))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, v := range n.KillOrder() {
		if v.Measured {
			t.Errorf("%s marked measured without a list", v.Pod)
		}
		got[v.Pod] = v.Used
	}
	if got["web"] != 1*Gi || got["batch"] != 15*Gi/10 {
		t.Errorf("used = %v, want web 1Gi and batch 1.5Gi (10 %% of allocatable)", got)
	}
	if n.UsedNow() != 5*Gi {
		t.Errorf("UsedNow = %d, want the node's figure", n.UsedNow())
	}
}

// TestPlacedAfterTheSampleAddsItsRequest: a pod bound after the sample is
// not in the node's working set yet; the estimate adds its request.
func TestPlacedAfterTheSampleAddsItsRequest(t *testing.T) {
	old := inSample(burstable("old", 1*Gi, 2*Gi), 1)
	fresh := burstable("fresh", 3*Gi, 4*Gi)
	fresh.UID = "00000000-0000-4000-8000-000000000002"
	n, err := NewNode(testNode("n", 16*Gi, 15*Gi), []*corev1.Pod{old, fresh}, DefaultEstimate,
		WithMemorySample(memSample(14*Gi, map[*corev1.Pod]int64{old: 1 * Gi})))
	if err != nil {
		t.Fatal(err)
	}
	if n.UsedNow() != 17*Gi || n.ShortfallNow() != 2*Gi {
		t.Errorf("UsedNow %d, ShortfallNow %d; want 17Gi and 2Gi", n.UsedNow(), n.ShortfallNow())
	}
	// The killer covers 2Gi now: fresh (3Gi at adj 813) ranks before old.
	if got := n.AtRiskNowBytes(); got != 3*Gi {
		t.Errorf("AtRiskNowBytes = %d, want fresh's 3Gi", got)
	}
}

func TestSpreadSumsExactly(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		k := 1 + r.IntN(5)
		worst := make([]int64, k)
		for i := range worst {
			worst[i] = r.Int64N(1 << 40)
		}
		bytes := r.Int64N(1 << 50)
		dst := make([]int64, k)
		spread(bytes, worst, dst)
		var sum int64
		for _, d := range dst {
			if d < 0 {
				t.Fatalf("negative share %v of %d over %v", dst, bytes, worst)
			}
			sum += d
		}
		if sum != bytes {
			t.Fatalf("shares %v sum to %d, want %d", dst, sum, bytes)
		}
	}
}

// FuzzAssessMeasured drives the model on a memory sample with arbitrary
// figures: nothing panics, nothing is negative, no container's worst case
// is below what it holds, the kill order never rises, and both views stay
// in range.
func FuzzAssessMeasured(f *testing.F) {
	f.Add([]byte{1, 2, 0, 16, 3, 200, 100, 2, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}, int64(8*Gi), int64(Gi))
	f.Add([]byte(strings.Repeat("\x10\x02\x01\x0a\x07", 60)), int64(1<<50), int64(1<<50))
	f.Fuzz(func(t *testing.T, data []byte, used, perPod int64) {
		swapTotal := int64(0)
		s := &fuzzSource{b: data}
		node := testNode("n", 0, 0)
		if q, ok := s.quantity(); ok {
			node.Status.Capacity[corev1.ResourceMemory] = q
		}
		if q, ok := s.quantity(); ok {
			node.Status.Allocatable[corev1.ResourceMemory] = q
		}
		var pods []*corev1.Pod
		figures := map[*corev1.Pod]int64{}
		for i := range int(s.byte() % 8) {
			p := inSample(s.pod("ns", fmt.Sprintf("p%d", i)), i)
			pods = append(pods, p)
			if s.byte()%4 != 0 {
				figures[p] = min(max(perPod/int64(i+1), 0), memstats.MaxBytes)
			}
		}
		ms := memSample(min(max(used, 0), memstats.MaxBytes), figures)
		if sw := s.byte(); sw%2 != 0 { // a node with swap, its pods' swap as big as what they hold
			swapTotal = min(max(used, 0), memstats.MaxBytes) >> (sw % 8)
			var swapped []sample.PodFigure
			for p, b := range figures {
				swapped = append(swapped, sample.PodFigure{UID: p.UID, Value: b})
			}
			ms.SwapTotal, ms.SwapPods = swapTotal, memstats.SwapPodListFormat.New(swapped)
		}
		n, err := NewNode(node, pods, DefaultEstimate, WithMemorySample(ms))
		if err != nil {
			return
		}
		order := n.KillOrder()
		for i, v := range order {
			if v.Used < 0 || v.Swap < 0 || v.Worst < v.Used || (swapTotal == 0 && v.Swap != 0) {
				t.Fatalf("container %+v holds more than its worst case or less than nothing", v)
			}
			if i > 0 && order[i-1].Points < v.Points {
				t.Fatalf("kill order rises at %d: %d then %d", i, order[i-1].Points, v.Points)
			}
		}
		x := s.pod("", "")
		x.Status.Phase = corev1.PodPending
		x.DeletionTimestamp = nil // the scheduler places no terminating pod
		a := n.Assess(NewIncoming(x))
		now := a.Now
		if !a.Measured || now.RiskPPM < 0 || now.RiskPPM > 1_000_000 || now.CollateralBytes < 0 || now.ShortfallAfter < now.ShortfallBefore || now.PodNow < 0 {
			t.Fatalf("out of range: %+v", a)
		}
		if a.RiskPPM < 0 || a.RiskPPM > 1_000_000 || a.CollateralBytes < 0 || a.ShortfallAfter < a.ShortfallBefore {
			t.Fatalf("out of range: %+v", a)
		}
	})
}

// TestMeasuredAssessMatchesTheBoundPod: on a measured node, what Assess
// says of an incoming pod is what the node's model says once the pod is
// bound after the sample: the same shortfalls in both views. The pod
// weighs the same before and after binding (declaredWithin), init
// containers, overhead and requests of 0 included.
func TestMeasuredAssessMatchesTheBoundPod(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := range 2000 {
		capacity := []int64{4 * Gi, 16 * Gi, 64 * Gi}[r.IntN(3)]
		allocatable := capacity - r.Int64N(capacity/4)
		node := testNode("n", capacity, allocatable)
		var pods []*corev1.Pod
		figures := map[*corev1.Pod]int64{}
		for i := range r.IntN(20) {
			p := inSample(propertyPod(r, "ns", fmt.Sprintf("p%02d", i)), trial*100+i)
			pods = append(pods, p)
			if r.IntN(4) > 0 {
				figures[p] = r.Int64N(capacity / 8)
			}
		}
		s := memSample(r.Int64N(capacity), figures)
		n, err := NewNode(node, pods, DefaultEstimate, WithMemorySample(s))
		if err != nil {
			t.Fatal(err)
		}
		x := propertyPod(r, "", "")
		x.UID = "00000000-0000-4000-8000-999999999999"
		if r.IntN(4) == 0 {
			x.Spec.Overhead = corev1.ResourceList{corev1.ResourceMemory: bytesQ(Gi)}
		}
		a := n.Assess(NewIncoming(x))
		bound, err := NewNode(node, append(slices.Clone(pods), x), DefaultEstimate, WithMemorySample(s))
		if err != nil {
			t.Fatal(err)
		}
		if a.ShortfallAfter != bound.Shortfall() || a.Now.ShortfallAfter != bound.ShortfallNow() {
			t.Fatalf("trial %d: Assess says shortfall %d, now %d; bound, the model says %d, now %d (pod %+v)",
				trial, a.ShortfallAfter, a.Now.ShortfallAfter, bound.Shortfall(), bound.ShortfallNow(), x.Spec)
		}
	}
}

// TestMeasuredBeyondLimitsGoesToUnlimitedContainers: a pod measured at 4Gi
// whose app is limited to 512Mi and whose sidecar has no limit: the app
// holds at most its limit, the sidecar the rest.
func TestMeasuredBeyondLimitsGoesToUnlimitedContainers(t *testing.T) {
	p := inSample(testPod("default", "mixed", ctr{name: "app", req: 256 * Mi, lim: 512 * Mi}, ctr{name: "proxy", sidecar: true}), 1)
	n, err := NewNode(testNode("n", 16*Gi, 15*Gi), []*corev1.Pod{p}, DefaultEstimate, WithMemorySample(memSample(5*Gi, map[*corev1.Pod]int64{p: 4 * Gi})))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, v := range n.KillOrder() {
		got[v.Container] = v.Used
		if v.Container == "app" && v.Worst != 512*Mi {
			t.Errorf("app's worst case raised to %d beyond its limit", v.Worst)
		}
	}
	if got["app"] != 512*Mi || got["proxy"] != 4*Gi-512*Mi {
		t.Errorf("used = %v, want app 512Mi and proxy the rest", got)
	}
}
