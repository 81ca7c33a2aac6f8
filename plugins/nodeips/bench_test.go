package nodeips

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/headroom-k8s/headroom/plugins/figure"
)

// benchNode is the scheduling snapshot's NodeInfo of a node with the given
// number of pods: all but a tenth were in the sample, the rest were placed
// after it (bound or assumed). Production Filter and Score see the
// snapshot's own NodeInfos, the ones NodeIPs caches.
func benchNode(b *testing.B, pods int) (testPlugin, fwk.NodeInfo) {
	sample := now.Add(-time.Minute)
	node := ipNode("n", 254, 100, sample)
	var placed []*corev1.Pod
	for i := range pods {
		p := pod(fmt.Sprintf("p%d", i))
		switch {
		case i%10 == 0:
			p = assumed(p, "n")
		case i%10 == 1:
			p = boundAt(p, "n", sample.Add(time.Second))
		default:
			p = boundAt(p, "n", sample.Add(-time.Hour))
		}
		placed = append(placed, p)
	}
	// No ample limit: the node's headroom would let PreScore skip Score,
	// which the benchmarks measure.
	args := defaultArgs()
	args.AmpleFreeIPs = 0
	tp := newPlugin(b, args, []*corev1.Node{node}, placed)
	return tp, tp.h.SnapshotNodeInfo(b, "n")
}

// BenchmarkFilter measures Filter for one node. "hit" is the common case:
// the node has not changed since another pod's cycle. "miss" walks the
// node's pods again, as after a pod was placed on or left the node (the
// NodeInfo's generation moves; the Node object, and so its parsed
// annotations, stay).
func BenchmarkFilter(b *testing.B) {
	for _, pods := range []int{0, 110} {
		for _, hit := range []bool{true, false} {
			b.Run(fmt.Sprintf("pods=%d/cache-hit=%v", pods, hit), func(b *testing.B) {
				tp, ni := benchNode(b, pods)
				p := pod("incoming")
				state := framework.NewCycleState()
				ctx := b.Context()
				if _, s := tp.PreFilter(ctx, state, p, nil); !s.IsSuccess() {
					b.Fatal(s)
				}
				b.ReportAllocs()
				for b.Loop() {
					if !hit {
						ni.(*framework.NodeInfo).SetNode(ni.Node())
					}
					if s := tp.Filter(ctx, state, p, ni); !s.IsSuccess() {
						b.Fatal(s)
					}
				}
			})
		}
	}
}

// BenchmarkScore measures Score for one node, as BenchmarkFilter.
func BenchmarkScore(b *testing.B) {
	for _, pods := range []int{0, 110} {
		for _, hit := range []bool{true, false} {
			b.Run(fmt.Sprintf("pods=%d/cache-hit=%v", pods, hit), func(b *testing.B) {
				tp, ni := benchNode(b, pods)
				p := pod("incoming")
				state := framework.NewCycleState()
				ctx := b.Context()
				if s := tp.PreScore(ctx, state, p, []fwk.NodeInfo{ni}); !s.IsSuccess() {
					b.Fatal(s)
				}
				b.ReportAllocs()
				for b.Loop() {
					if !hit {
						ni.(*framework.NodeInfo).SetNode(ni.Node())
					}
					if _, s := tp.Score(ctx, state, p, ni); !s.IsSuccess() {
						b.Fatal(s)
					}
				}
			})
		}
	}
}

// BenchmarkNormalizeScore measures NormalizeScore over 5000 nodes.
func BenchmarkNormalizeScore(b *testing.B) {
	tp := newPlugin(b, defaultArgs(), nil, nil)
	scores := make(fwk.NodeScoreList, 5000)
	raw := make([]int64, len(scores))
	for i := range raw {
		raw[i] = int64(i*7919) % 254
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
		tp.NormalizeScore(ctx, nil, (*corev1.Pod)(nil), scores)
	}
}
