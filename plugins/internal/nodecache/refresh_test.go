package nodecache

import (
	"context"
	"fmt"
	"math"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// boundsFixture is a fixture whose cache keeps the least and the greatest
// number of pods on a node (figure 0 of the fixture's summary), and walks
// the snapshot every cycle, so that each refresh shows the changes before it
// (TestRefreshWalksEveryFewCycles sets the shipped interval).
func boundsFixture(t testing.TB, nodes ...string) *fixture {
	t.Helper()
	f := newFixtureKeeping(t, []Bound{{Figure: 0}, {Figure: 0, Greatest: true}}, nodes...)
	f.cache.nodes.walkEvery = 1
	return f
}

func (f *fixture) refresh(t testing.TB, state fwk.CycleState) Bounds {
	t.Helper()
	b, ok := f.cache.Refresh(t.Context(), state)
	if !ok {
		t.Fatal("Refresh without a snapshot")
	}
	return b
}

// Refresh keeps the least and greatest figure over the snapshot's nodes as
// their generations move, once per cycle, and counts a bound again when the
// node that held it moved away.
func TestRefreshKeepsBounds(t *testing.T) {
	f := boundsFixture(t, "a", "b", "c")
	a, b := f.nodeInfo(t, "a"), f.nodeInfo(t, "b")
	cycle := framework.NewCycleState()
	if got := f.refresh(t, cycle); got.Least[0] != 0 || got.Greatest[0] != 0 || f.computed.Load() != 3 {
		t.Fatalf("first refresh: %+v after %d computations; want 0..0 after 3", got, f.computed.Load())
	}
	a.AddPod(podOn("p1", "a"))
	a.AddPod(podOn("p2", "a"))
	if got := f.refresh(t, cycle); got.Greatest[0] != 0 || f.computed.Load() != 3 {
		t.Fatalf("same cycle: %+v after %d computations; want the cycle's first bounds, nothing computed", got, f.computed.Load())
	}
	got := f.refresh(t, framework.NewCycleState())
	if got.Least[0] != 0 || got.Greatest[0] != 2 || f.computed.Load() != 4 {
		t.Fatalf("a holds 2 pods: %+v after %d computations; want 0..2 after 4 (only a again)", got, f.computed.Load())
	}
	if got.Generation != a.Generation {
		t.Fatalf("Generation = %d, want a's %d, the greatest", got.Generation, a.Generation)
	}
	if f.cache.Stored("a").pods != 2 {
		t.Fatal("Refresh did not store a's value")
	}
	// a leaves the greatest bound, b and c the least.
	if err := a.RemovePod(klog.Background(), podOn("p1", "a")); err != nil {
		t.Fatal(err)
	}
	b.AddPod(podOn("p3", "b"))
	f.nodeInfo(t, "c").AddPod(podOn("p4", "c"))
	if got := f.refresh(t, framework.NewCycleState()); got.Least[0] != 1 || got.Greatest[0] != 1 {
		t.Fatalf("one pod on each node: %+v, want 1..1", got)
	}
}

// Between walks the bounds keep covering the NodeInfos that did not change,
// and only those: a node that changed is not covered until the next walk,
// and BoundsFor folds it into the bounds when it is a candidate.
func TestRefreshWalksEveryFewCycles(t *testing.T) {
	f := boundsFixture(t, "a", "b", "c")
	f.cache.nodes.walkEvery = walkEvery
	ctx := t.Context()
	a, b := f.nodeInfo(t, "a"), f.nodeInfo(t, "b")
	walked := f.refresh(t, framework.NewCycleState())
	a.AddPod(podOn("p1", "a"))
	a.AddPod(podOn("p2", "a"))
	var cycle *framework.CycleState
	for i := 1; i < walkEvery; i++ {
		cycle = framework.NewCycleState()
		got := f.refresh(t, cycle)
		if got != walked || got.Covers(a) || !got.Covers(b) || f.computed.Load() != 3 {
			t.Fatalf("cycle %d after the walk: %+v after %d computations, covers a %v, b %v; want the walk's %+v, a not covered, b covered, nothing computed",
				i, got, f.computed.Load(), got.Covers(a), got.Covers(b), walked)
		}
	}
	got, ok := f.cache.BoundsFor(ctx, cycle, []fwk.NodeInfo{a, b})
	if !ok || got.Least[0] != 0 || got.Greatest[0] != 2 || got.Covers(a) || f.computed.Load() != 4 {
		t.Fatalf("bounds for a and b: %+v after %d computations; want 0..2 (a's 2 pods folded in, a computed), a not covered", got, f.computed.Load())
	}
	if got, _ := f.cache.BoundsFor(ctx, cycle, []fwk.NodeInfo{b}); got != walked {
		t.Fatalf("bounds for b alone: %+v, want the walk's %+v", got, walked)
	}
	got = f.refresh(t, framework.NewCycleState())
	if !got.Covers(a) || got.Greatest[0] != 2 || got.Generation != a.Generation || f.computed.Load() != 4 {
		t.Fatalf("cycle %d walks: %+v after %d computations; want a covered, 0..2, a's value reused", walkEvery, got, f.computed.Load())
	}
}

// Claim asks its claim of the walk's bounds first, and reads the
// candidates the walk does not cover only where it holds there; the
// candidates are indexed for Score either way.
func TestClaimReadsUncoveredOnlyWhereItHolds(t *testing.T) {
	f := boundsFixture(t, "a", "b", "c")
	f.cache.nodes.walkEvery = walkEvery
	ctx := t.Context()
	a, b := f.nodeInfo(t, "a"), f.nodeInfo(t, "b")
	f.refresh(t, framework.NewCycleState()) // the walk
	a.AddPod(podOn("p1", "a"))
	a.AddPod(podOn("p2", "a"))
	cycle := framework.NewCycleState()
	candidates := []fwk.NodeInfo{a, b}

	// Every node holds a pod: fails on the walk's least (0), so a's two
	// pods could not make it hold.
	if _, ok := f.cache.Claim(ctx, cycle, candidates, func(b Bounds) bool { return b.Least[0] >= 1 }); ok || f.computed.Load() != 3 {
		t.Fatalf("a claim failing on the walk's bounds: %v after %d computations; want false, a not read (3)", ok, f.computed.Load())
	}
	if c := f.cache.nodes.candidates.Load(); c == nil {
		t.Fatal("the candidates were not indexed for Score")
	} else if _, ok := c.find(a); !ok {
		t.Fatal("a is not among the indexed candidates")
	}
	// No node holds more than a pod: holds on the walk's bounds (0..0), not
	// with a's two folded in.
	if got, ok := f.cache.Claim(ctx, cycle, candidates, func(b Bounds) bool { return b.Greatest[0] <= 1 }); ok || got.Greatest[0] != 2 || f.computed.Load() != 4 {
		t.Fatalf("a claim holding on the walk's bounds only: %v, %+v after %d computations; want false, 0..2, a read (4)", ok, got, f.computed.Load())
	}
	if got, ok := f.cache.Claim(ctx, cycle, candidates, func(b Bounds) bool { return b.Greatest[0] <= 2 }); !ok || got.Greatest[0] != 2 {
		t.Fatalf("a claim holding with a folded in: %v, %+v; want true, 0..2", ok, got)
	}
}

// A node added to (or removed from) the snapshot gives the snapshot a new
// list, and Refresh a new view that counts it.
func TestRefreshFollowsTheNodeList(t *testing.T) {
	f := boundsFixture(t, "a")
	f.refresh(t, framework.NewCycleState())
	a := f.nodeInfo(t, "a")
	f.snapshot = cache.NewSnapshot([]*corev1.Pod{podOn("p", "b"), podOn("q", "b"), podOn("r", "b")},
		[]*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}})
	f.cache.snapshot = func() fwk.NodeInfoLister { return f.snapshot.NodeInfos() }
	got := f.refresh(t, framework.NewCycleState())
	if got.Least[0] != 0 || got.Greatest[0] != 3 || f.cache.Stored("b").pods != 3 {
		t.Fatalf("after b was added: %+v, b stored %+v; want 0..3", got, f.cache.Stored("b"))
	}
	f.snapshot = cache.NewSnapshot(nil, nil)
	got = f.refresh(t, framework.NewCycleState())
	if got.Least[0] != math.MaxInt64 || got.Greatest[0] != math.MinInt64 || got.Covers(a) {
		t.Fatalf("without nodes: %+v; want empty bounds that cover nothing", got)
	}
}

// Refresh brings every cache that shares the index up to date, not only the
// one it was called on.
func TestRefreshServesEveryCacheOfTheIndex(t *testing.T) {
	f := boundsFixture(t, "a", "b")
	h, err := frameworkruntime.NewFramework(t.Context(), nil, nil, frameworkruntime.WithSnapshotSharedLister(f.snapshot))
	if err != nil {
		t.Fatal(err)
	}
	var computed int
	other := New(h, func(_ context.Context, ni fwk.NodeInfo, _ *string) string {
		computed++
		return "other " + ni.Node().Name
	}, func(v *string) Summary { return Summary{int64(len(*v))} }, Bound{Figure: 0, Greatest: true})
	f.refresh(t, framework.NewCycleState())
	if computed != 2 || *other.Stored("b") != "other b" {
		t.Fatalf("the other cache computed %d values, want 2", computed)
	}
	b, ok := other.Refresh(t.Context(), framework.NewCycleState())
	if !ok || b.Greatest[0] != int64(len("other a")) {
		t.Fatalf("the other cache's bounds: %+v", b)
	}
}

// Bounds cover the snapshot's NodeInfos, and copies of them the scheduler
// did not change; not a copy with a nominated pod added, nor anything when
// zero.
func TestBoundsCover(t *testing.T) {
	f := boundsFixture(t, "a", "b")
	got := f.refresh(t, framework.NewCycleState())
	for _, n := range []string{"a", "b"} {
		ni := f.nodeInfo(t, n)
		if !got.Covers(ni) || !got.Covers(ni.Snapshot()) {
			t.Fatalf("%s and its unchanged copy are not covered", n)
		}
		nominated := ni.SnapshotConcrete()
		nominated.AddPod(podOn("nominated-"+n, n))
		if got.Covers(nominated) {
			t.Fatalf("a copy of %s with a nominated pod is covered", n)
		}
	}
	if (Bounds{}).Covers(&framework.NodeInfo{}) {
		t.Fatal("the zero Bounds cover a NodeInfo of generation 0")
	}
	if _, ok := New(nil, func(context.Context, fwk.NodeInfo, *int) int { return 0 }, func(*int) Summary { return Summary{} }).
		Refresh(t.Context(), framework.NewCycleState()); ok {
		t.Fatal("Refresh without a snapshot reported bounds")
	}
}

// BenchmarkRefresh is PreFilter's cost per cycle at 5,000 nodes when one
// node changes every cycle (the node of the pod placed last): a walk every
// walkEvery cycles (shipped), or every cycle (walk).
func BenchmarkRefresh(b *testing.B) {
	for _, every := range []int{walkEvery, 1} {
		name := "shipped"
		if every == 1 {
			name = "walk"
		}
		b.Run(name, func(b *testing.B) { benchmarkRefresh(b, every) })
	}
}

func benchmarkRefresh(b *testing.B, walkEvery int) {
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i)
	}
	f := boundsFixture(b, names...)
	f.cache.nodes.walkEvery = walkEvery
	infos, _ := f.snapshot.NodeInfos().List()
	f.refresh(b, framework.NewCycleState())
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		b.StopTimer()
		ni := infos[i%len(infos)].(*framework.NodeInfo)
		ni.AddPod(podOn(fmt.Sprintf("p%d", i), ni.Node().Name))
		cycle := framework.NewCycleState()
		b.StartTimer()
		f.refresh(b, cycle)
		i++
	}
}

// After a refresh, Summary and Get serve the snapshot's nodes from the
// view without computing; a node that changed since is computed afresh.
func TestSummaryAfterRefresh(t *testing.T) {
	f := boundsFixture(t, "a", "b")
	ctx := t.Context()
	f.refresh(t, framework.NewCycleState())
	a := f.nodeInfo(t, "a")
	if got := f.cache.Summary(ctx, a); got != (Summary{0}) || f.computed.Load() != 2 {
		t.Fatalf("refreshed a: %v after %d computations; want [0 0 0 0] after the refresh's 2", got, f.computed.Load())
	}
	if got := f.cache.Get(ctx, f.nodeInfo(t, "b")); got.pods != 0 || f.computed.Load() != 2 {
		t.Fatalf("refreshed b: %+v after %d computations", *got, f.computed.Load())
	}
	a.AddPod(podOn("p", "a"))
	if got := f.cache.Summary(ctx, a); got != (Summary{1}) || f.computed.Load() != 3 {
		t.Fatalf("a changed after the refresh: %v after %d computations; want [1 0 0 0] after 3", got, f.computed.Load())
	}
}

// The caches that share the index keep their own summaries of a node side
// by side in the view: after a refresh each reads its own (nothing is
// computed again) and keeps its bounds over its own.
func TestViewKeepsEachCachesSummaries(t *testing.T) {
	f := boundsFixture(t, "a", "b", "c")
	h, err := frameworkruntime.NewFramework(t.Context(), nil, nil, frameworkruntime.WithSnapshotSharedLister(f.snapshot))
	if err != nil {
		t.Fatal(err)
	}
	var computed int
	scaled := func(by int64) *Cache[int] {
		return New(h, func(_ context.Context, ni fwk.NodeInfo, _ *int) int {
			computed++
			return len(ni.GetPods())
		}, func(v *int) Summary { return Summary{by * int64(*v), by} }, Bound{Figure: 0, Greatest: true})
	}
	ten, hundred := scaled(10), scaled(100)
	pods := map[string]int64{"a": 1, "b": 2, "c": 3}
	for name, n := range pods {
		for i := range n {
			f.nodeInfo(t, name).AddPod(podOn(fmt.Sprintf("%s%d", name, i), name))
		}
	}
	if got := f.refresh(t, framework.NewCycleState()); got.Least[0] != 1 || got.Greatest[0] != 3 {
		t.Fatalf("the first cache's bounds: %+v, want 1..3", got)
	}
	ctx := t.Context()
	for _, c := range []struct {
		cache *Cache[int]
		by    int64
	}{{ten, 10}, {hundred, 100}} {
		if got, ok := c.cache.Refresh(ctx, nil); !ok || got.Greatest[0] != 3*c.by {
			t.Fatalf("the cache of %d a pod: bounds %+v, want the greatest %d", c.by, got, 3*c.by)
		}
	}
	before, beforeFirst := computed, f.computed.Load()
	for name, n := range pods {
		ni := f.nodeInfo(t, name)
		if got := f.cache.Summary(ctx, ni); got != (Summary{n}) {
			t.Errorf("%s: the first cache's summary %v, want [%d 0 0 0]", name, got, n)
		}
		if got := ten.Summary(ctx, ni); got != (Summary{10 * n, 10}) {
			t.Errorf("%s: the second cache's summary %v, want [%d 10 0 0]", name, got, 10*n)
		}
		if got := hundred.Summary(ctx, ni); got != (Summary{100 * n, 100}) {
			t.Errorf("%s: the third cache's summary %v, want [%d 100 0 0]", name, got, 100*n)
		}
	}
	if computed != before || f.computed.Load() != beforeFirst {
		t.Fatalf("%d values computed after the refresh, want none", computed-before+int(f.computed.Load()-beforeFirst))
	}
}

// The caches that share the index look at one cycle's candidates once: the
// second BoundsFor of the cycle folds in its own figures of the changed
// candidate the first found, and does not look at the candidates again;
// other candidates, or a later cycle, are looked at afresh.
func TestBoundsForSharesOnePassPerCycle(t *testing.T) {
	f := boundsFixture(t, "a", "b")
	f.cache.nodes.walkEvery = walkEvery
	h, err := frameworkruntime.NewFramework(t.Context(), nil, nil, frameworkruntime.WithSnapshotSharedLister(f.snapshot))
	if err != nil {
		t.Fatal(err)
	}
	// other's figure is ten times the pods: its bounds come from its own
	// summaries, not the first cache's.
	other := New(h, func(_ context.Context, ni fwk.NodeInfo, _ *int) int { return 10 * len(ni.GetPods()) },
		func(v *int) Summary { return Summary{int64(*v)} }, Bound{Figure: 0, Greatest: true})
	if other.nodes != f.cache.nodes {
		t.Fatal("the two caches do not share the index")
	}
	ctx := t.Context()
	a, b := f.nodeInfo(t, "a"), f.nodeInfo(t, "b")
	f.refresh(t, framework.NewCycleState())
	a.AddPod(podOn("p1", "a"))
	a.AddPod(podOn("p2", "a"))
	candidates := []fwk.NodeInfo{a, b}
	cycle := framework.NewCycleState()
	if got, _ := f.cache.BoundsFor(ctx, cycle, candidates); got.Greatest[0] != 2 {
		t.Fatalf("first cache: %+v, want a's 2 pods folded in", got)
	}
	// b changes behind the pass's back (in the scheduler no NodeInfo of
	// the snapshot changes within a cycle): the second cache reuses the
	// pass, which found a alone, so b's change shows only when b is looked
	// at.
	b.AddPod(podOn("p3", "b"))
	b.AddPod(podOn("p4", "b"))
	b.AddPod(podOn("p5", "b"))
	if got, _ := other.BoundsFor(ctx, cycle, candidates); got.Greatest[0] != 20 {
		t.Fatalf("second cache, same cycle and candidates: %+v, want a's 20 folded in and b not looked at", got)
	}
	next := framework.NewCycleState()
	if got, _ := other.BoundsFor(ctx, next, candidates); got.Greatest[0] != 30 {
		t.Fatalf("next cycle, same candidates: %+v, want b's 30 folded in", got)
	}
	if got, _ := other.BoundsFor(ctx, next, []fwk.NodeInfo{a}); got.Greatest[0] != 20 {
		t.Fatalf("same cycle, a alone: %+v, want a's 20, b not a candidate", got)
	}
}

// A Note holds for the generation of the summary it came with: from the
// view after a refresh, from the slot for a node changed since, and never
// for a later generation, even when a Store of the old one lands after the
// node changed.
func TestNoteFollowsGeneration(t *testing.T) {
	f := boundsFixture(t, "a", "b")
	ctx := t.Context()
	f.refresh(t, framework.NewCycleState())
	a := f.nodeInfo(t, "a")
	_, note := f.cache.SummaryNote(ctx, a)
	if v, ok := note.Load(); ok {
		t.Fatalf("a fresh note holds %d", v)
	}
	note.Store(42)
	if _, again := f.cache.SummaryNote(ctx, a); !noteIs(again, 42) {
		t.Fatal("the note stored beside a's summary is not found with it")
	}
	if _, other := f.cache.SummaryNote(ctx, f.nodeInfo(t, "b")); !noteIs(other, 0) {
		t.Fatal("b's note holds a's word")
	}

	a.AddPod(podOn("p", "a"))
	_, changed := f.cache.SummaryNote(ctx, a)
	if !noteIs(changed, 0) {
		t.Fatal("a note kept for a's old generation holds for its new one")
	}
	changed.Store(7)
	note.Store(43) // late: the old generation's
	if _, got := f.cache.SummaryNote(ctx, a); !noteIs(got, 7) {
		t.Fatal("a late Store of the old generation replaced the new generation's note")
	}
	f.refresh(t, framework.NewCycleState())
	_, walked := f.cache.SummaryNote(ctx, a)
	if !noteIs(walked, 0) {
		t.Fatal("the view's note after the walk holds a word nobody stored there")
	}
	walked.Store(9)
	if _, got := f.cache.SummaryNote(ctx, a); !noteIs(got, 9) {
		t.Fatal("the note stored in the view is not found with the view's summary")
	}
	var zero Note
	zero.Store(1)
	if !noteIs(zero, 0) {
		t.Fatal("the zero Note keeps a word")
	}
}

// noteIs reports whether n holds want, or nothing when want is 0.
func noteIs(n Note, want uint32) bool {
	v, ok := n.Load()
	if want == 0 {
		return !ok
	}
	return ok && v == want
}

// BenchmarkClaim is PreScore's claim over 500 candidates of 5,000 nodes,
// one node changed every cycle, where the claim fails (a tight fleet:
// Score runs): Claim, which asks the walk's bounds first, against BoundsFor
// and the claim after it (fold), what PreScore did before Claim.
func BenchmarkClaim(b *testing.B) {
	tight := func(b Bounds) bool { return b.Least[0] >= 1000 }
	for _, name := range []string{"claim", "fold"} {
		b.Run(name, func(b *testing.B) {
			names := make([]string, 5000)
			for i := range names {
				names[i] = fmt.Sprintf("node-%d", i)
			}
			f := boundsFixture(b, names...)
			f.cache.nodes.walkEvery = walkEvery
			infos, _ := f.snapshot.NodeInfos().List()
			ctx := b.Context()
			f.refresh(b, framework.NewCycleState())
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				b.StopTimer()
				ni := infos[i%len(infos)].(*framework.NodeInfo)
				ni.AddPod(podOn(fmt.Sprintf("p%d", i), ni.Node().Name))
				start := (i * 500) % len(infos)
				candidates := infos[start:min(start+500, len(infos))]
				cycle := framework.NewCycleState()
				f.refresh(b, cycle)
				b.StartTimer()
				var ok bool
				if name == "claim" {
					_, ok = f.cache.Claim(ctx, cycle, candidates, tight)
				} else {
					bounds, _ := f.cache.BoundsFor(ctx, cycle, candidates)
					ok = tight(bounds)
				}
				if ok {
					b.Fatal("the claim holds")
				}
				i++
			}
		})
	}
}

// BenchmarkScoreThreeCaches is Score's reads in a cycle of Headroom's
// three plugins: 500 candidates of 5,000 nodes, each read by three caches
// that share the index (one after another per node, as the scheduler runs
// the plugins' Score), after the cycle's refresh and BoundsFor.
func BenchmarkScoreThreeCaches(b *testing.B) {
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i)
	}
	f := boundsFixture(b, names...)
	caches := []*Cache[value]{f.cache}
	for range 2 {
		h, err := frameworkruntime.NewFramework(b.Context(), nil, nil, frameworkruntime.WithSnapshotSharedLister(f.snapshot))
		if err != nil {
			b.Fatal(err)
		}
		caches = append(caches, New(h, func(_ context.Context, ni fwk.NodeInfo, _ *value) value {
			return value{pods: len(ni.GetPods())}
		}, func(v *value) Summary { return Summary{int64(v.pods)} }, Bound{Figure: 0}))
	}
	infos, _ := f.snapshot.NodeInfos().List()
	ctx := b.Context()
	// The candidates of a cycle are a stretch of the snapshot's order
	// (the scheduler goes on where the last cycle stopped); they are
	// chosen before the timer runs.
	cycles := make([][]fwk.NodeInfo, len(infos)/500)
	for c := range cycles {
		cycles[c] = infos[c*500 : (c+1)*500]
	}
	f.refresh(b, framework.NewCycleState())
	for _, c := range caches {
		for _, ni := range infos {
			c.Summary(ctx, ni) // every summary stored
		}
	}
	b.ReportAllocs()
	var sum int64
	i := 0
	for b.Loop() {
		b.StopTimer()
		cycle := framework.NewCycleState()
		f.refresh(b, cycle)
		candidates := cycles[i%len(cycles)]
		if _, ok := f.cache.BoundsFor(ctx, cycle, candidates); !ok {
			b.Fatal("no bounds")
		}
		b.StartTimer()
		for _, ni := range candidates {
			for _, c := range caches {
				sum += c.Summary(ctx, ni)[0]
			}
		}
		i++
	}
	if sum != 0 {
		b.Fatal("nodes without pods summarised with pods")
	}
}
