package nodecache

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// value records what it was computed from.
type value struct {
	pods int
	prev bool // a previous value was offered
}

type fixture struct {
	cache    *Cache[value]
	snapshot *cache.Snapshot
	computed atomic.Int64
}

func newFixture(t testing.TB, nodes ...string) *fixture {
	t.Helper()
	return newFixtureKeeping(t, nil, nodes...)
}

// newFixtureKeeping is newFixture with a cache that keeps bounds.
func newFixtureKeeping(t testing.TB, bounds []Bound, nodes ...string) *fixture {
	t.Helper()
	var list []*corev1.Node
	for _, n := range nodes {
		list = append(list, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	f := &fixture{snapshot: cache.NewSnapshot(nil, list)}
	h, err := frameworkruntime.NewFramework(t.Context(), nil, nil, frameworkruntime.WithSnapshotSharedLister(f.snapshot))
	if err != nil {
		t.Fatal(err)
	}
	f.cache = New(h, func(_ context.Context, ni fwk.NodeInfo, prev *value) value {
		f.computed.Add(1)
		return value{pods: len(ni.GetPods()), prev: prev != nil}
	}, func(v *value) Summary { return Summary{int64(v.pods)} }, bounds...)
	return f
}

func (f *fixture) nodeInfo(t testing.TB, name string) *framework.NodeInfo {
	t.Helper()
	ni, err := f.snapshot.NodeInfos().Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return ni.(*framework.NodeInfo)
}

func podOn(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: node}}
}

func TestGetFollowsGeneration(t *testing.T) {
	f := newFixture(t, "a", "b")
	ctx := t.Context()
	ni := f.nodeInfo(t, "a")
	first := f.cache.Get(ctx, ni)
	if f.cache.Get(ctx, ni) != first || f.computed.Load() != 1 {
		t.Fatalf("same generation: computed %d times, want once", f.computed.Load())
	}
	// The first miss made a place for every node of the snapshot at once.
	if f.cache.Len() != 2 {
		t.Fatalf("Len = %d, want the snapshot's 2 nodes", f.cache.Len())
	}
	ni.AddPod(podOn("p", "a"))
	second := f.cache.Get(ctx, ni)
	if second == first || second.pods != 1 || !second.prev {
		t.Fatalf("after a pod was added: %+v (same entry %v); want 1 pod, computed with the previous value", *second, second == first)
	}
	if f.cache.Stored("a") != second {
		t.Fatal("the snapshot's new value was not stored")
	}
}

// Temporary copies (nominated pods, preemption dry runs) are computed but
// not stored; an unchanged copy shares the stored value.
func TestCopiesAreNotStored(t *testing.T) {
	f := newFixture(t, "a")
	ctx := t.Context()
	ni := f.nodeInfo(t, "a")
	own := f.cache.Get(ctx, ni)
	cp := ni.SnapshotConcrete()
	if f.cache.Get(ctx, cp) != own {
		t.Fatal("a copy of the same generation should share the stored value")
	}
	cp.AddPod(podOn("nominated", "a"))
	onCopy := f.cache.Get(ctx, cp)
	if onCopy.pods != 1 {
		t.Fatalf("copy with a nominated pod: %d pods, want 1", onCopy.pods)
	}
	if f.cache.Stored("a") != own {
		t.Fatal("the copy's value replaced the snapshot's")
	}
	if f.cache.Get(ctx, ni) != own {
		t.Fatal("the snapshot's NodeInfo misses after a copy was computed")
	}
}

// A node deleted and re-added under the same name gets a new NodeInfo in
// the snapshot; its values are stored again.
func TestReaddedNodeIsStored(t *testing.T) {
	f := newFixture(t, "a")
	ctx := t.Context()
	f.cache.Get(ctx, f.nodeInfo(t, "a"))
	f.snapshot = cache.NewSnapshot([]*corev1.Pod{podOn("p", "a")}, []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}})
	// The cache reads the snapshot through the handle; point it at the new one.
	f.cache.snapshot = func() fwk.NodeInfoLister { return f.snapshot.NodeInfos() }
	readded := f.nodeInfo(t, "a")
	got := f.cache.Get(ctx, readded)
	if got.pods != 1 || f.cache.Stored("a") != got {
		t.Fatalf("re-added node: %+v, stored %v", *got, f.cache.Stored("a") == got)
	}
}

func TestPrune(t *testing.T) {
	f := newFixture(t, "a", "b", "c")
	ctx := t.Context()
	for _, n := range []string{"a", "b", "c"} {
		f.cache.Get(ctx, f.nodeInfo(t, n))
	}
	f.cache.Prune()
	if f.cache.Len() != 3 {
		t.Fatalf("Prune dropped nodes the snapshot holds: Len = %d", f.cache.Len())
	}
	f.snapshot = cache.NewSnapshot(nil, []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "b"}}})
	f.cache.snapshot = func() fwk.NodeInfoLister { return f.snapshot.NodeInfos() }
	f.cache.Prune()
	if f.cache.Len() != 1 || f.cache.Stored("b") == nil || f.cache.Stored("a") != nil {
		t.Fatalf("after a and c left: Len = %d, want only b", f.cache.Len())
	}
}

func TestWithoutHandle(t *testing.T) {
	c := New(nil, func(_ context.Context, ni fwk.NodeInfo, _ *value) value { return value{pods: len(ni.GetPods())} },
		func(v *value) Summary { return Summary{int64(v.pods)} })
	ni := framework.NewNodeInfo(podOn("p", "x"))
	ni.SetNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "x"}})
	if got := c.Get(t.Context(), ni); got.pods != 1 || c.Stored("x") != got {
		t.Fatalf("without a snapshot every value is stored: %+v", got)
	}
	c.Prune() // no snapshot: nothing to compare with, nothing dropped
	if c.Len() != 1 {
		t.Fatalf("Len = %d", c.Len())
	}
}

// Get runs in parallel for different nodes while generations move and
// nodes are added; run with -race.
func TestConcurrentUse(t *testing.T) {
	var names []string
	for i := range 16 {
		names = append(names, fmt.Sprintf("n%d", i))
	}
	f := newFixture(t, names...)
	ctx := t.Context()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 300 {
				name := names[(w+i)%len(names)]
				ni := f.nodeInfo(t, name)
				if got := f.cache.Get(ctx, ni); got == nil {
					t.Error("nil value")
					return
				}
				cp := ni.SnapshotConcrete()
				cp.AddPod(podOn(fmt.Sprintf("p%d-%d", w, i), name))
				if got := f.cache.Get(ctx, cp); got.pods != 1 {
					t.Errorf("copy: %d pods, want 1", got.pods)
					return
				}
				f.cache.Prune()
			}
		})
	}
	wg.Wait()
	for _, n := range names {
		if e := f.cache.Stored(n); e == nil || e.pods != 0 {
			t.Fatalf("%s: stored %+v, want the snapshot's value (0 pods)", n, e)
		}
	}
}

var sink *value

// filled returns a cache of 5,000 nodes, each with its value stored, and
// the snapshot's NodeInfos.
func filled(b *testing.B) (*fixture, []fwk.NodeInfo) {
	names := make([]string, 5000)
	for i := range names {
		names[i] = fmt.Sprintf("node-%d", i)
	}
	f := newFixture(b, names...)
	infos, _ := f.snapshot.NodeInfos().List()
	for _, ni := range infos {
		f.cache.Get(b.Context(), ni)
	}
	return f, infos
}

// BenchmarkGetHit is the common case: the node has not changed since the
// last cycle. It must not allocate.
func BenchmarkGetHit(b *testing.B) {
	f, infos := filled(b)
	ctx := b.Context()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		sink = f.cache.Get(ctx, infos[i])
		i = (i + 1) % len(infos)
	}
}

// Pruning also forgets the NodeInfos of deleted nodes, so that a hit on
// them is impossible and the index does not keep them alive.
func TestPruneForgetsNodeInfos(t *testing.T) {
	f := newFixture(t, "a", "b")
	ctx := t.Context()
	for _, n := range []string{"a", "b"} {
		f.cache.Get(ctx, f.nodeInfo(t, n))
	}
	f.snapshot = cache.NewSnapshot(nil, []*corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "b"}}})
	f.cache.snapshot = func() fwk.NodeInfoLister { return f.snapshot.NodeInfos() }
	f.cache.Prune()
	idx := f.cache.nodes.slots.Load()
	if len(idx.byInfo) != 0 || len(idx.byName) != 1 {
		t.Fatalf("after a left and b was replaced by a new snapshot: %d NodeInfos, %d names indexed; want 0 and 1", len(idx.byInfo), len(idx.byName))
	}
	if got := f.cache.Get(ctx, f.nodeInfo(t, "b")); got == nil || f.cache.Stored("b") != got {
		t.Fatal("b's new NodeInfo was not stored")
	}
	if len(f.cache.nodes.slots.Load().byInfo) != 1 {
		t.Fatal("b's new NodeInfo was not indexed")
	}
}

// The caches of one scheduler share one index, each with its own value in a
// node's slot, however many there are; a scheduler with another snapshot
// has an index of its own.
func TestCachesShareTheSchedulersIndex(t *testing.T) {
	f := newFixture(t, "a", "b")
	ctx := t.Context()
	h, err := frameworkruntime.NewFramework(t.Context(), nil, nil, frameworkruntime.WithSnapshotSharedLister(f.snapshot))
	if err != nil {
		t.Fatal(err)
	}
	other := New(h, func(_ context.Context, ni fwk.NodeInfo, _ *string) string { return "other " + ni.Node().Name },
		func(v *string) Summary { return Summary{int64(len(*v))} })
	if other.nodes != f.cache.nodes || other.pos == f.cache.pos {
		t.Fatalf("two caches of one snapshot: same index %v, places %d and %d; want one index, two places",
			other.nodes == f.cache.nodes, f.cache.pos, other.pos)
	}
	ni := f.nodeInfo(t, "a")
	ni.AddPod(podOn("p", "a"))
	if got := f.cache.Get(ctx, ni); got.pods != 1 {
		t.Fatalf("first cache: %+v", *got)
	}
	if got := other.Get(ctx, ni); *got != "other a" {
		t.Fatalf("second cache: %q", *got)
	}
	if f.cache.Stored("a").pods != 1 || *other.Stored("a") != "other a" || f.cache.Len() != 2 || other.Len() != 2 {
		t.Fatal("the caches' values in one slot are not kept apart")
	}

	g := newFixture(t, "a")
	if g.cache.nodes == f.cache.nodes {
		t.Fatal("two schedulers' snapshots share an index")
	}
	var more []*Cache[int]
	for i := range 4 {
		more = append(more, New(h, func(context.Context, fwk.NodeInfo, *int) int { return i + 1 }, func(v *int) Summary { return Summary{int64(*v)} }))
	}
	for i, c := range more {
		if c.nodes != f.cache.nodes || c.pos != i+2 {
			t.Fatalf("cache %d of a snapshot: own index %v, place %d", i+3, c.nodes != f.cache.nodes, c.pos)
		}
	}
	// Registered after the slots were made: they start afresh, with a
	// place for every cache.
	for i, c := range more {
		if got := c.Summary(ctx, ni); got[0] != int64(i+1) {
			t.Fatalf("cache %d: summary %v", i+3, got)
		}
	}
	if got := f.cache.Get(ctx, ni); got.pods != 1 {
		t.Fatalf("first cache after more registered: %+v", *got)
	}
}

// Summary reads the slot's figures on a hit, and follows the generation as
// Get does; a copy's summary is computed, not stored.
func TestSummaryFollowsGeneration(t *testing.T) {
	f := newFixture(t, "a")
	ctx := t.Context()
	ni := f.nodeInfo(t, "a")
	if got := f.cache.Summary(ctx, ni); got != (Summary{0}) || f.computed.Load() != 1 {
		t.Fatalf("first summary %v after %d computations, want [0 0 0] after 1", got, f.computed.Load())
	}
	if got := f.cache.Summary(ctx, ni); got != (Summary{0}) || f.computed.Load() != 1 {
		t.Fatalf("same generation: %v after %d computations, want [0 0 0] after 1", got, f.computed.Load())
	}
	ni.AddPod(podOn("p", "a"))
	if got := f.cache.Summary(ctx, ni); got != (Summary{1}) || f.computed.Load() != 2 {
		t.Fatalf("after a pod was added: %v after %d computations, want [1 0 0] after 2", got, f.computed.Load())
	}
	if got := f.cache.Get(ctx, ni); got.pods != 1 || f.computed.Load() != 2 {
		t.Fatalf("Get after Summary: %+v, %d computations; want the stored value", *got, f.computed.Load())
	}
	copied := ni.Snapshot().(*framework.NodeInfo)
	copied.AddPod(podOn("q", "a"))
	if got := f.cache.Summary(ctx, copied); got != (Summary{2}) {
		t.Fatalf("copy with another pod: %v, want [2 0 0]", got)
	}
	if got := f.cache.Summary(ctx, ni); got != (Summary{1}) || f.computed.Load() != 3 {
		t.Fatalf("the copy's summary replaced the snapshot's: %v after %d computations", got, f.computed.Load())
	}
}

// Readers never see a summary of one generation under another, while
// writers store summaries of new generations (run with -race).
func TestSummaryConcurrent(t *testing.T) {
	var h hot
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 2 {
		wg.Go(func() {
			for gen := int64(1 + w); ; gen += 2 {
				select {
				case <-stop:
					return
				default:
				}
				h.write(gen, Summary{gen, 2 * gen, 3 * gen})
			}
		})
	}
	for range 100000 {
		gen := h.gen.Load()
		if gen <= 0 {
			continue
		}
		if s, ok := h.read(gen); ok && s != (Summary{gen, 2 * gen, 3 * gen}) {
			t.Fatalf("generation %d read as %v", gen, s)
		}
	}
	close(stop)
	wg.Wait()
}

// BenchmarkSummaryHit is Filter's and Score's common case: the node has
// not changed since the last cycle. It must not allocate.
func BenchmarkSummaryHit(b *testing.B) {
	f, infos := filled(b)
	ctx := b.Context()
	b.ReportAllocs()
	i := 0
	var sum int64
	for b.Loop() {
		sum += f.cache.Summary(ctx, infos[i])[0]
		i = (i + 1) % len(infos)
	}
	if sum != 0 {
		b.Fatal("nodes without pods summarised with pods")
	}
}
