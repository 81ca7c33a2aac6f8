package oomkill

import (
	"errors"
	"math"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func mustNode(t testing.TB, node *corev1.Node, pods []*corev1.Pod, est Estimate) *Node {
	t.Helper()
	n, err := NewNode(node, pods, est)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestGuaranteedOnly(t *testing.T) {
	// 32Gi node, 30Gi allocatable, three Guaranteed 8Gi pods: 24Gi worst case.
	// An incoming Guaranteed 4Gi pod brings it to 28Gi ≤ 30Gi: no shortfall.
	n := mustNode(t, testNode("n", 32*Gi, 30*Gi),
		[]*corev1.Pod{guaranteed("g1", 8*Gi), guaranteed("g2", 8*Gi), guaranteed("g3", 8*Gi)}, DefaultEstimate)
	got := n.Assess(NewIncoming(guaranteed("new", 4*Gi)))
	// All adj are −997; 4Gi − 997·32Gi/1000 is below 8Gi − 997·32Gi/1000, so
	// the incoming pod comes after the three existing ones: rank 3.
	want := Assessment{ShortfallBefore: 0, ShortfallAfter: 0, RiskPPM: 0, CollateralBytes: 0, Rank: 3}
	if got != want {
		t.Fatalf("Assess = %+v, want %+v", got, want)
	}
	if n.AtRiskBytes() != 0 || n.Shortfall() != 0 {
		t.Fatalf("shortfall %d, at risk %d, want 0, 0", n.Shortfall(), n.AtRiskBytes())
	}
	for _, v := range n.KillOrder() {
		if v.Adj != -997 || v.AtRisk {
			t.Errorf("%s: adj %d at risk %v, want -997, false", v.Pod, v.Adj, v.AtRisk)
		}
	}
}

func TestBestEffortAbsorbsShortfall(t *testing.T) {
	// 16Gi node, 15Gi allocatable. Each BestEffort pod counts 10 % of
	// allocatable = 1.5Gi; with the Guaranteed 13Gi pod the node holds 16Gi of
	// worst case: shortfall 1Gi, covered by killing be-a (1.5Gi; be-a and be-b
	// tie at 1.5Gi + 1000·16Gi/1000 = 17.5Gi, names decide).
	n := mustNode(t, testNode("n", 16*Gi, 15*Gi),
		[]*corev1.Pod{guaranteed("db", 13*Gi), bestEffort("be-b"), bestEffort("be-a")}, DefaultEstimate)
	if n.Shortfall() != 1*Gi || n.AtRiskBytes() != 1536*Mi {
		t.Fatalf("shortfall %d, at risk %d, want 1Gi, 1.5Gi", n.Shortfall(), n.AtRiskBytes())
	}
	order := n.KillOrder()
	if order[0].Pod != "be-a" || !order[0].AtRisk || order[1].Pod != "be-b" || order[1].AtRisk {
		t.Fatalf("kill order %+v", order)
	}

	// Incoming Burstable 1Gi request, 2Gi limit: adj = 1000 − ⌊1000·1/16⌋ = 938,
	// badness 2Gi + 938·16Gi/1000 = 18262200942 < 17.5Gi = 18790481920, so
	// both BestEffort pods die before it. Shortfall becomes 3Gi; be-a and be-b
	// free exactly 3Gi: the pod is safe, and be-b (1.5Gi) is newly at risk.
	got := n.Assess(NewIncoming(burstable("web", 1*Gi, 2*Gi)))
	want := Assessment{ShortfallBefore: 1 * Gi, ShortfallAfter: 3 * Gi, RiskPPM: 0, CollateralBytes: 1536 * Mi, Rank: 2}
	if got != want {
		t.Fatalf("Assess = %+v, want %+v", got, want)
	}
}

func TestCapacityChangesRisk(t *testing.T) {
	// The same pods on a 64Gi and a 512Gi node. Allocatable is held at 60Gi on
	// both so that only the capacity differs — through the kubelet's adj and
	// the kernel's adj × capacity / 1000.
	//   cache: Burstable 100Mi request, 4Gi limit
	//   db:    Guaranteed 52Gi
	//   api (incoming): Burstable 500Mi request, 4352Mi (4.25Gi) limit
	// Worst case 56Gi without api, 60.25Gi with it: shortfall 256Mi after.
	pods := func() []*corev1.Pod {
		return []*corev1.Pod{burstable("cache", 100*Mi, 4*Gi), guaranteed("db", 52*Gi)}
	}
	api := NewIncoming(burstable("api", 500*Mi, 4352*Mi))

	// 64Gi: adj(cache) = 1000 − ⌊1000·100/65536⌋ = 999, adj(api) = 1000 −
	// ⌊1000·500/65536⌋ = 993. Badness: cache 4Gi + 999·64Gi/1000 =
	// 72945724555, api 4352Mi + 993·64Gi/1000 = 72801843150: cache dies
	// first and its 4Gi cover the 256Mi; api is safe, cache's 4Gi collateral.
	small := mustNode(t, testNode("small", 64*Gi, 60*Gi), pods(), DefaultEstimate)
	got := small.Assess(api)
	want := Assessment{ShortfallBefore: 0, ShortfallAfter: 256 * Mi, RiskPPM: 0, CollateralBytes: 4 * Gi, Rank: 1}
	if got != want {
		t.Fatalf("64Gi: Assess = %+v, want %+v", got, want)
	}
	if v := small.ExplainWith(api).Order; v[0].Pod != "cache" || v[0].Points != 72945724555 || v[1].Pod != "api" || v[1].Points != 72801843150 || v[1].Adj != 993 {
		t.Fatalf("64Gi: merged order %+v", v)
	}

	// 512Gi: both requests are below capacity/1000 (≈ 524Mi), both adj are
	// 999, and the larger limit decides: api dies first. Its 4352Mi cover the
	// 256Mi: risk = 256/4352 = 1/17 → 58823 ppm; no collateral.
	big := mustNode(t, testNode("big", 512*Gi, 60*Gi), pods(), DefaultEstimate)
	got = big.Assess(api)
	want = Assessment{ShortfallBefore: 0, ShortfallAfter: 256 * Mi, RiskPPM: 58823, CollateralBytes: 0, Rank: 0}
	if got != want {
		t.Fatalf("512Gi: Assess = %+v, want %+v", got, want)
	}
	if v := big.ExplainWith(api).Order; v[0].Pod != "api" || v[0].Adj != 999 || !v[0].AtRisk || v[1].AtRisk {
		t.Fatalf("512Gi: merged order %+v", v)
	}
}

func TestNewNodeUnknownMemory(t *testing.T) {
	noCapacity := testNode("a", Gi, Gi)
	delete(noCapacity.Status.Capacity, corev1.ResourceMemory)
	noAllocatable := testNode("d", Gi, Gi)
	delete(noAllocatable.Status.Allocatable, corev1.ResourceMemory)
	for name, node := range map[string]*corev1.Node{
		"nil":                  nil,
		"no capacity":          noCapacity,
		"zero capacity":        testNode("b", 0, 0),
		"negative capacity":    testNode("c", -Gi, Gi),
		"no allocatable":       noAllocatable,
		"negative allocatable": testNode("e", Gi, -1),
	} {
		if _, err := NewNode(node, []*corev1.Pod{bestEffort("x")}, DefaultEstimate); !errors.Is(err, ErrUnknownMemory) {
			t.Errorf("%s: err = %v, want ErrUnknownMemory", name, err)
		}
	}
	// Zero allocatable is known: everything is shortfall.
	n := mustNode(t, testNode("f", Gi, 0), []*corev1.Pod{burstable("x", Mi, 100*Mi)}, DefaultEstimate)
	if n.Shortfall() != 100*Mi || n.AtRiskBytes() != 100*Mi {
		t.Fatalf("shortfall %d at risk %d, want 100Mi, 100Mi", n.Shortfall(), n.AtRiskBytes())
	}
}

func TestConsideredContainers(t *testing.T) {
	// Regular containers and sidecars count; ordinary init containers have
	// exited; terminal pods and pods without containers hold no memory.
	mixed := testPod("default", "mixed",
		ctr{name: "setup", req: 1 * Gi, lim: 30 * Gi, init: true},
		ctr{name: "proxy", req: 64 * Mi, lim: 256 * Mi, sidecar: true},
		ctr{name: "app", req: 2 * Gi, lim: 3 * Gi},
	)
	done := burstable("done", Gi, 20*Gi)
	done.Status.Phase = corev1.PodSucceeded
	failed := burstable("failed", Gi, 20*Gi)
	failed.Status.Phase = corev1.PodFailed
	empty := testPod("default", "empty", ctr{name: "only-init", req: Gi, lim: 20 * Gi, init: true})
	n := mustNode(t, testNode("n", 16*Gi, 16*Gi), []*corev1.Pod{mixed, done, failed, empty, nil}, DefaultEstimate)

	order := n.KillOrder()
	if len(order) != 2 {
		t.Fatalf("kill order %+v, want proxy and app only", order)
	}
	// app: adj = 1000 − ⌊1000·2/16⌋ = 875. The kubelet lowers a sidecar's adj
	// to that of the smallest regular container: proxy alone would get
	// 1000 − ⌊1000·64/16384⌋ = 997, it gets 875 too.
	// Badness: app 3Gi + 875·16Gi/1000, proxy 256Mi + the same: app first.
	if order[0].Container != "app" || order[0].Adj != 875 || order[0].Worst != 3*Gi || order[0].Sidecar {
		t.Errorf("first %+v", order[0])
	}
	if order[1].Container != "proxy" || order[1].Adj != 875 || order[1].Worst != 256*Mi || !order[1].Sidecar {
		t.Errorf("second %+v", order[1])
	}
	if n.TotalWorst() != 3*Gi+256*Mi {
		t.Errorf("total worst %d", n.TotalWorst())
	}
}

func TestShortfallWithoutAndPodWorst(t *testing.T) {
	// 8Gi allocatable; worst case: a 6Gi, b 4Gi + 1Gi sidecar, c 2Gi = 13Gi,
	// shortfall 5Gi.
	a := burstable("a", Gi, 6*Gi)
	b := testPod("default", "b", ctr{name: "app", req: Gi, lim: 4 * Gi}, ctr{name: "log", req: Mi, lim: Gi, sidecar: true})
	c := burstable("c", Gi, 2*Gi)
	n := mustNode(t, testNode("n", 16*Gi, 8*Gi), []*corev1.Pod{a, b, c}, DefaultEstimate)
	if n.Shortfall() != 5*Gi {
		t.Fatalf("shortfall %d", n.Shortfall())
	}
	if got := n.PodWorst(b); got != 5*Gi {
		t.Errorf("PodWorst(b) = %d, want 5Gi", got)
	}
	if got := n.PodWorst(guaranteed("elsewhere", Gi)); got != 0 {
		t.Errorf("PodWorst(not on node) = %d", got)
	}
	// Without b: 8Gi ≤ 8Gi. Without c: 11Gi − 8Gi = 3Gi. Unknown pods change nothing.
	if got := n.ShortfallWithout(b); got != 0 {
		t.Errorf("ShortfallWithout(b) = %d", got)
	}
	if got := n.ShortfallWithout(c, guaranteed("elsewhere", Gi)); got != 3*Gi {
		t.Errorf("ShortfallWithout(c) = %d", got)
	}
	// Matching by name works when the UID is unset.
	noUID := c.DeepCopy()
	noUID.UID = ""
	if got := n.ShortfallWithout(noUID); got != 3*Gi {
		t.Errorf("ShortfallWithout(c without UID) = %d", got)
	}
	// All Burstable, adj 938 except b/log (a sidecar with request 1Mi takes
	// the 938 of b/app too): badness grows with the limit, so the order is
	// a, b/app, c, b/log, and a's 6Gi alone cover the 5Gi.
	var atRisk []string
	for _, v := range n.KillOrder() {
		if v.AtRisk {
			atRisk = append(atRisk, v.Pod+"/"+v.Container)
		}
	}
	if strings.Join(atRisk, ",") != "a/app" || n.AtRiskBytes() != 6*Gi {
		t.Errorf("at risk %v (%d bytes), want a/app (6Gi)", atRisk, n.AtRiskBytes())
	}
}

func TestEstimate(t *testing.T) {
	e := Estimate{RequestMultiplierPercent: 150, FractionOfAllocatablePermille: 50}
	for _, c := range []struct {
		request, limit, allocatable int64
		want                        int64
		estimated                   bool
	}{
		{request: Gi, limit: 5 * Gi, allocatable: 100 * Gi, want: 5 * Gi},                         // the limit
		{request: 4 * Gi, allocatable: 100 * Gi, want: 6 * Gi, estimated: true},                   // 150 % of 4Gi > 5Gi
		{request: Gi, allocatable: 100 * Gi, want: 5 * Gi, estimated: true},                       // 5 % of 100Gi > 1.5Gi
		{request: math.MaxInt64, allocatable: Gi, want: math.MaxInt64, estimated: true},           // saturates
		{request: math.MaxInt64 / 2, allocatable: Gi, want: 6917529027641081854, estimated: true}, // ⌊1.5·(2⁶²−1)⌋, 128-bit product
	} {
		got, estimated := e.worst(c.request, c.limit, c.allocatable)
		if got != c.want || estimated != c.estimated {
			t.Errorf("worst(%+v) = %d, %v; want %d, %v", c, got, estimated, c.want, c.estimated)
		}
	}
	if err := DefaultEstimate.Validate(); err != nil {
		t.Errorf("DefaultEstimate: %v", err)
	}
	for _, bad := range []Estimate{{}, {RequestMultiplierPercent: 99}, {RequestMultiplierPercent: 100, FractionOfAllocatablePermille: -1}, {RequestMultiplierPercent: 100, FractionOfAllocatablePermille: 1001}} {
		if bad.Validate() == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestArithmetic(t *testing.T) {
	const max = math.MaxInt64
	if addSat(max-1, 2) != max || addSat(1, 2) != 3 {
		t.Error("addSat")
	}
	if subFloor(1, 2) != 0 || subFloor(5, 2) != 3 {
		t.Error("subFloor")
	}
	if mulDiv(max, max, 1) != max || mulDiv(max, 1_000_000, max) != 1_000_000 || mulDiv(max/3, 3, 3) != max/3 || mulDiv(-1, 5, 1) != 0 {
		t.Error("mulDiv")
	}
	// badness at the extremes: no overflow, sign as expected.
	if got := badness(max, 1000, max); got != max {
		t.Errorf("badness(max, 1000, max) = %d", got)
	}
	if got := badness(0, -1000, max); got != -(max/1000*1000)-(max%1000) {
		t.Errorf("badness(0, -1000, max) = %d", got)
	}
	if got := badness(0, 5000, 2000); got != 2000 { // adj clamped to 1000
		t.Errorf("badness(0, 5000, 2000) = %d", got)
	}
	// Quantity.Value reads 10E as 0; bytesOf saturates.
	for s, want := range map[string]int64{"10E": max, "1e30": max, "-1Gi": 0, "1.5": 2, "8Ei": max, "7Ei": 7 << 60} {
		if got := bytesOf(resource.MustParse(s)); got != want {
			t.Errorf("bytesOf(%s) = %d, want %d", s, got, want)
		}
	}
}

func TestAssessAllocationFree(t *testing.T) {
	n, _ := benchNode(110)
	in := NewIncoming(benchIncoming())
	n.Assess(in) // the first node of a shape derives the pod's figures
	if allocs := testing.AllocsPerRun(200, func() { n.Assess(in) }); allocs != 0 {
		t.Fatalf("Assess allocates %v times per run", allocs)
	}
}

func TestIncomingConcurrentUse(t *testing.T) {
	// The scheduler scores nodes in parallel with one Incoming per cycle.
	var nodes []*Node
	for i := range 16 {
		capacity := int64(8+i%4*8) * Gi
		nodes = append(nodes, mustNode(t, testNode("n", capacity, capacity-Gi),
			[]*corev1.Pod{burstable("a", Gi, 6*Gi), bestEffort("b"), guaranteed("c", Gi*int64(1+i%3))}, DefaultEstimate))
	}
	want := make([]Assessment, len(nodes))
	for i, n := range nodes {
		want[i] = n.Assess(NewIncoming(benchIncoming()))
	}
	in := NewIncoming(benchIncoming())
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i, n := range nodes {
				if got := n.Assess(in); got != want[i] {
					t.Errorf("node %d: %+v, want %+v", i, got, want[i])
				}
			}
		})
	}
	wg.Wait()
}

func TestExplainString(t *testing.T) {
	n := mustNode(t, testNode("worker", 16*Gi, 15*Gi), []*corev1.Pod{
		testPod("default", "web", ctr{name: "app", req: Gi, lim: 8 * Gi}, ctr{name: "envoy", req: 64 * Mi, lim: 128 * Mi, sidecar: true}),
		bestEffort("batch"),
	}, DefaultEstimate)
	s := n.ExplainWith(NewIncoming(burstable("api", 512*Mi, 6*Gi))).String()
	for _, want := range []string{
		"node worker: capacity 16Gi, allocatable 15Gi",
		"default/api (incoming)",
		"envoy (sidecar)",
		"1536Mi (estimated)",
		"BestEffort  1000",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("missing %q in\n%s", want, s)
		}
	}
}

// WorstWithin is WorstOn for every node of that allocatable memory, and
// never falls as allocatable grows: OOMRisk bounds a pod's worst case over
// all nodes with it.
func TestWorstWithin(t *testing.T) {
	const gi = 1 << 30
	est := Estimate{RequestMultiplierPercent: 150, FractionOfAllocatablePermille: 100}
	pods := []*corev1.Pod{
		burstable("limited", gi, 2*gi),
		burstable("unlimited", gi, 0),
		bestEffort("best-effort"),
		testPod("default", "mixed", ctr{name: "a", req: gi, lim: 3 * gi}, ctr{name: "b", req: gi / 2}, ctr{name: "init", req: gi, init: true}),
	}
	allocatables := []int64{1, gi, 4 * gi, 32 * gi, 1 << 62}
	for _, p := range pods {
		in := NewIncoming(p)
		prev := int64(-1)
		for _, alloc := range allocatables {
			n := mustNode(t, testNode("n", alloc, alloc), nil, est)
			got := in.WorstWithin(alloc, est)
			if want := in.WorstOn(n); got != want {
				t.Errorf("%s at %d bytes allocatable: WorstWithin %d, WorstOn %d", p.Name, alloc, got, want)
			}
			if got < prev {
				t.Errorf("%s: worst case fell from %d to %d as allocatable grew to %d", p.Name, prev, got, alloc)
			}
			prev = got
		}
	}
}
