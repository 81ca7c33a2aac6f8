package figuretest

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/headroom-k8s/headroom/plugins/figure"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

// Bench is the benchmarks of a figure plugin, parameterised by what
// differs between figures. A figure plugin's Benchmark functions call its
// methods.
type Bench[A any, S figure.Sample] struct {
	// Definition is the plugin's.
	Definition *figure.Definition[A, S]
	// NoAmple turns off the Ample limit of args. The benchmarks run with
	// the default args without it: the node's headroom would let PreScore
	// skip Score, which they measure.
	NoAmple func(args *A)
	// Node is a node sampled at sampledAt with room for Incoming after 110
	// pods placed since the sample.
	Node func(name string, sampledAt time.Time) *corev1.Node
	// Pod is a pod that takes the figure, as the node's pods do.
	Pod func(name string) *corev1.Pod
	// Incoming is the pod the benchmarks schedule.
	Incoming *corev1.Pod
	// MaxRaw bounds the raw scores (free units) that NormalizeScore is
	// given.
	MaxRaw int64
}

// args are the default args without an Ample limit.
func (c Bench[A, S]) args() *A {
	args := DefaultArgs(c.Definition)
	c.NoAmple(args)
	return args
}

// benchNode is the scheduling snapshot's NodeInfo of a node with the given
// number of pods: all but a tenth were in the sample, the rest were placed
// after it (bound or assumed). Production Filter and Score see the
// snapshot's own NodeInfos, the ones the plugin caches.
func (c Bench[A, S]) benchNode(b *testing.B, pods int) (Plugin[S], fwk.NodeInfo) {
	sample := Now.Add(-time.Minute)
	node := c.Node("n", sample)
	var placed []*corev1.Pod
	for i := range pods {
		p := c.Pod(fmt.Sprintf("p%d", i))
		switch {
		case i%10 == 0:
			p = plugintest.Assumed(p, "n")
		case i%10 == 1:
			p = plugintest.BoundAt(p, "n", sample.Add(time.Second))
		default:
			p = plugintest.BoundAt(p, "n", sample.Add(-time.Hour))
		}
		placed = append(placed, p)
	}
	pl := New(b, c.Definition, c.args(), []*corev1.Node{node}, placed)
	return pl, pl.Handle.SnapshotNodeInfo(b, "n")
}

// Filter measures Filter for one node. "hit" is the common case: the node
// has not changed since another pod's cycle. "miss" walks the node's pods
// again, as after a pod was placed on or left the node (the NodeInfo's
// generation moves; the Node object, and so its parsed annotations, stay).
func (c Bench[A, S]) Filter(b *testing.B) {
	c.perNode(b, func(b *testing.B, pl Plugin[S], ni fwk.NodeInfo, state fwk.CycleState) func() *fwk.Status {
		ctx := b.Context()
		if _, s := pl.PreFilter(ctx, state, c.Incoming, nil); !s.IsSuccess() {
			b.Fatal(s)
		}
		return func() *fwk.Status { return pl.Filter(ctx, state, c.Incoming, ni) }
	})
}

// Score measures Score for one node, as Filter.
func (c Bench[A, S]) Score(b *testing.B) {
	c.perNode(b, func(b *testing.B, pl Plugin[S], ni fwk.NodeInfo, state fwk.CycleState) func() *fwk.Status {
		ctx := b.Context()
		if s := pl.PreScore(ctx, state, c.Incoming, []fwk.NodeInfo{ni}); !s.IsSuccess() {
			b.Fatal(s)
		}
		return func() *fwk.Status {
			_, s := pl.Score(ctx, state, c.Incoming, ni)
			return s
		}
	})
}

// perNode runs, for a node of 0 and of 110 pods, with the node's entry
// cached and not, the extension point that start prepares in a fresh cycle
// and returns.
func (c Bench[A, S]) perNode(b *testing.B, start func(*testing.B, Plugin[S], fwk.NodeInfo, fwk.CycleState) func() *fwk.Status) {
	for _, pods := range []int{0, 110} {
		for _, hit := range []bool{true, false} {
			b.Run(fmt.Sprintf("pods=%d/cache-hit=%v", pods, hit), func(b *testing.B) {
				pl, ni := c.benchNode(b, pods)
				run := start(b, pl, ni, framework.NewCycleState())
				b.ReportAllocs()
				for b.Loop() {
					if !hit {
						ni.(*framework.NodeInfo).SetNode(ni.Node())
					}
					if s := run(); !s.IsSuccess() {
						b.Fatal(s)
					}
				}
			})
		}
	}
}

// NormalizeScore measures NormalizeScore over 5000 nodes, one in 50 of
// unknown headroom.
func (c Bench[A, S]) NormalizeScore(b *testing.B) {
	pl := New(b, c.Definition, c.args(), nil, nil)
	scores := make(fwk.NodeScoreList, 5000)
	raw := make([]int64, len(scores))
	for i := range raw {
		raw[i] = int64(i*7919) % c.MaxRaw
		if i%50 == 0 {
			raw[i] = figure.UnknownRaw
		}
	}
	ctx := b.Context()
	b.ReportAllocs()
	for b.Loop() {
		for i := range scores {
			scores[i].Score = raw[i]
		}
		pl.NormalizeScore(ctx, nil, (*corev1.Pod)(nil), scores)
	}
}

// CacheBytesPerNode reports the heap the plugin's cache holds per node of
// a 5000-node snapshot, each node with two pods (the SchedulingBasic
// workload's density), index and slot included: a Filter on every node
// fills it.
func (c Bench[A, S]) CacheBytesPerNode(b *testing.B) {
	const n = 5000
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		nodes = append(nodes, c.Node(name, Now.Add(-time.Minute)))
		pods = append(pods, plugintest.BoundAt(c.Pod(fmt.Sprintf("a%d", i)), name, Now),
			plugintest.Assumed(c.Pod(fmt.Sprintf("b%d", i)), name))
	}
	ctx := b.Context()
	for b.Loop() {
		pl := New(b, c.Definition, c.args(), nodes, pods)
		infos, err := pl.Handle.SnapshotSharedLister().NodeInfos().List()
		if err != nil {
			b.Fatal(err)
		}
		// No PreFilter: its refresh would fill the cache before the
		// measure, and add the view's state to it.
		state := framework.NewCycleState()
		plugintest.ReportHeapPerNode(b, n, func() {
			for _, ni := range infos {
				pl.Filter(ctx, state, c.Incoming, ni)
			}
		})
	}
}
