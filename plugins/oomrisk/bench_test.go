package oomrisk

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/feature"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/noderesources"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

// benchSetup returns the plugin, a prepared cycle state, the incoming pod and
// a 256Gi node holding pods pods of mixed QoS: a fifth BestEffort, a fifth
// Guaranteed, the rest Burstable with limits at twice to four times their
// requests, every third with a sidecar.
func benchSetup(b *testing.B, pods int) (*OOMRisk, fwk.CycleState, *corev1.Pod, fwk.NodeInfo) {
	var list []*corev1.Pod
	for i := range pods {
		name := fmt.Sprintf("pod-%03d", i)
		mem := fmt.Sprintf("%dMi", 64+i%16*64)
		switch {
		case i%5 == 0:
			list = append(list, pod(name, "bench", "", ""))
		case i%5 == 1:
			list = append(list, guaranteedPod(name, "bench", mem))
		case i%3 == 0:
			p := pod(name, "bench", mem, fmt.Sprintf("%dMi", 4*(64+i%16*64)))
			sidecar := st.MakeContainer().Name("proxy").RestartPolicy(corev1.ContainerRestartPolicyAlways).Obj()
			sidecar.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("32Mi")}
			sidecar.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("128Mi")}
			p.Spec.InitContainers = []corev1.Container{sidecar}
			list = append(list, p)
		default:
			list = append(list, pod(name, "bench", mem, fmt.Sprintf("%dMi", 2*(64+i%16*64))))
		}
	}
	snapshot := cache.NewSnapshot(list, []*corev1.Node{node("bench", "256Gi")})
	pl := newPlugin(b, defaultArgs(), snapshot)
	in := pod("incoming", "", "512Mi", "2Gi")
	state := framework.NewCycleState()
	switch s := pl.PreScore(context.Background(), state, in, nil); {
	case s.IsSkip():
		// Nothing at risk on the node, so PreScore skips Score in a cycle;
		// the benchmarks measure Score, prepared as PreScore prepares it.
		pl.pods.Write(state, preScoreStateKey, &preScoreState{in: oomkill.NewIncoming(in)})
	case !s.IsSuccess():
		b.Fatal(s)
	}
	return pl, state, in, nodeInfo(b, snapshot, "bench")
}

var scoreSink int64

// BenchmarkScore is Score on a node whose model is cached: the steady state
// across scheduling cycles while the node does not change.
func BenchmarkScore(b *testing.B) {
	for _, pods := range []int{10, 110, 250} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			pl, state, in, ni := benchSetup(b, pods)
			ctx := context.Background()
			pl.Score(ctx, state, in, ni) // fill the cache
			b.ReportAllocs()
			for b.Loop() {
				scoreSink, _ = pl.Score(ctx, state, in, ni)
			}
		})
	}
}

// BenchmarkScoreCacheMiss is Score on a node that changed since it was last
// scored (a new NodeInfo generation): the model is rebuilt.
func BenchmarkScoreCacheMiss(b *testing.B) {
	for _, pods := range []int{10, 110, 250} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			pl, state, in, ni := benchSetup(b, pods)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				ni.(*framework.NodeInfo).SetNode(ni.Node())
				scoreSink, _ = pl.Score(ctx, state, in, ni)
			}
		})
	}
}

// BenchmarkScoreBaselineBalancedAllocation is the in-tree
// NodeResourcesBalancedAllocation scoring the same pod on the same node: a
// per-node Score of the default profile, for hack/bench.sh's ratio.
func BenchmarkScoreBaselineBalancedAllocation(b *testing.B) {
	for _, pods := range []int{10, 110, 250} {
		b.Run(fmt.Sprintf("pods=%d", pods), func(b *testing.B) {
			pl, _, in, ni := benchSetup(b, pods)
			ctx := context.Background()
			args := &schedconfig.NodeResourcesBalancedAllocationArgs{Resources: []schedconfig.ResourceSpec{
				{Name: string(corev1.ResourceCPU), Weight: 1},
				{Name: string(corev1.ResourceMemory), Weight: 1},
			}}
			p, err := noderesources.NewBalancedAllocation(ctx, args, pl.handle, feature.Features{})
			if err != nil {
				b.Fatal(err)
			}
			ba := p.(fwk.ScorePlugin)
			state := framework.NewCycleState()
			if s := p.(fwk.PreScorePlugin).PreScore(ctx, state, in, nil); !s.IsSuccess() {
				b.Fatal(s)
			}
			b.ReportAllocs()
			for b.Loop() {
				scoreSink, _ = ba.Score(ctx, state, in, ni)
			}
		})
	}
}

// BenchmarkCacheBytesPerNode reports the heap OOMRisk's cache holds per node
// of a 5000-node snapshot, each node with two Burstable pods (the
// SchedulingBasic workload's density): a Score on every node fills it.
func BenchmarkCacheBytesPerNode(b *testing.B) {
	const n = 5000
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	for i := range n {
		name := fmt.Sprintf("node-%d", i)
		nodes = append(nodes, node(name, "32Gi"))
		pods = append(pods, pod(fmt.Sprintf("a%d", i), name, "500Mi", "1Gi"), pod(fmt.Sprintf("b%d", i), name, "500Mi", "1Gi"))
	}
	ctx := context.Background()
	in := pod("incoming", "", "500Mi", "1Gi")
	for b.Loop() {
		snapshot := cache.NewSnapshot(pods, nodes)
		pl := newPlugin(b, defaultArgs(), snapshot)
		infos, err := snapshot.NodeInfos().List()
		if err != nil {
			b.Fatal(err)
		}
		state := framework.NewCycleState()
		// PreScore's refresh fills the cache: it is measured too.
		plugintest.ReportHeapPerNode(b, n, func() {
			pl.PreScore(ctx, state, in, nil)
			for _, ni := range infos {
				scoreSink, _ = pl.Score(ctx, state, in, ni)
			}
		})
		if pl.cache.Len() != n {
			b.Fatalf("%d cached nodes", pl.cache.Len())
		}
	}
}
