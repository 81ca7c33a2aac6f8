// Package plugintest builds what the tests of Headroom's scheduler plugins
// share: a real framework handle over a snapshot of nodes and pods, pods
// placed before or after a sample, and scheduling cycles run the way the
// framework runs them.
package plugintest

import (
	"context"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/headroom-k8s/headroom/plugins/internal/nodestate"
)

// Handle is a framework handle for a plugin's New, with what tests look at.
type Handle struct {
	fwk.Handle
	// Recorder holds the Events the plugin recorded.
	Recorder *events.FakeRecorder
	// Informers is the handle's informer factory; its node lister holds the
	// nodes given to NewHandle.
	Informers informers.SharedInformerFactory
}

// NewHandle returns a real framework handle: a snapshot of nodes and pods,
// a fake event recorder, and an informer factory whose node lister holds
// nodes.
func NewHandle(t testing.TB, nodes []*corev1.Node, pods []*corev1.Pod) Handle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	recorder := events.NewFakeRecorder(100)
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	for _, n := range nodes {
		if err := factory.Core().V1().Nodes().Informer().GetIndexer().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	h, err := frameworkruntime.NewFramework(ctx, nil, nil,
		frameworkruntime.WithSnapshotSharedLister(cache.NewSnapshot(pods, nodes)),
		frameworkruntime.WithEventRecorder(recorder),
		frameworkruntime.WithInformerFactory(factory),
	)
	if err != nil {
		t.Fatal(err)
	}
	return Handle{Handle: h, Recorder: recorder, Informers: factory}
}

// SnapshotNodeInfo returns the snapshot's own NodeInfo of the named node,
// the one production Filter and Score see and the plugins cache.
func (h Handle) SnapshotNodeInfo(t testing.TB, name string) fwk.NodeInfo {
	t.Helper()
	ni, err := h.SnapshotSharedLister().NodeInfos().Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return ni
}

// NodeInfo is a NodeInfo of node holding pods, outside any snapshot.
func NodeInfo(node *corev1.Node, pods ...*corev1.Pod) *framework.NodeInfo {
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(node)
	return ni
}

// BoundAt marks p as bound at t (PodScheduled=True), on node.
func BoundAt(p *corev1.Pod, node string, t time.Time) *corev1.Pod {
	p.Spec.NodeName = node
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t),
	})
	return p
}

// Assumed puts p on node as the scheduler does before binding: NodeName
// set, no PodScheduled condition yet.
func Assumed(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.NodeName = node
	return p
}

// FilterPlugin is a plugin with PreFilter and Filter.
type FilterPlugin interface {
	fwk.PreFilterPlugin
	fwk.FilterPlugin
}

// Filter runs PreFilter and Filter for p on ni in a fresh cycle. When
// PreFilter skips, Filter is not run (as in the framework) and the result
// is nil: the node passes.
func Filter(t testing.TB, pl FilterPlugin, p *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	state := framework.NewCycleState()
	if _, s := pl.PreFilter(ctx, state, p, nil); s.IsSkip() {
		return nil
	} else if !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s)
	}
	return pl.Filter(ctx, state, p, ni)
}

// NodeStates checks that the state in which headroom_nodes counts a node
// (nodestate.Classify of cfg.Read, with cfg's kind and age limit) is known
// exactly when pl's Filter uses the node's sample. p must need more than
// any node's sample has room for, so that Filter rejects a node exactly
// when its headroom is known. At each of times (ascending), setClock sets
// the plugin's clock, and both read the node afresh at that time; want is
// each node's state at times[0].
func NodeStates(t *testing.T, pl FilterPlugin, setClock func(time.Time), cfg nodestate.Config, p *corev1.Pod,
	nodes []*corev1.Node, times []time.Time, want map[string]nodestate.State) {
	t.Helper()
	for i, at := range times {
		setClock(at)
		for _, n := range nodes {
			sampledAt, err := cfg.Read(n, at)
			state, reason := nodestate.Classify(cfg.Kind, sampledAt, err, at, cfg.MaxSampleAge)
			if i == 0 && state != want[n.Name] {
				t.Errorf("node %s: state %s (%v), want %s", n.Name, state, reason, want[n.Name])
			}
			rejected := !Filter(t, pl, p, NodeInfo(n)).IsSuccess()
			if rejected != (state == nodestate.Known) {
				t.Errorf("at %v node %s counts as %s (%v), but Filter rejected it: %t", at, n.Name, state, reason, rejected)
			}
		}
	}
}

// ScorePlugin is a plugin with PreScore, Score and NormalizeScore.
type ScorePlugin interface {
	fwk.PreScorePlugin
	fwk.ScorePlugin
}

// Scores runs PreScore, Score and NormalizeScore for p on nodes, as the
// framework does, and returns the final score per node name; it fails the
// test on a score outside [MinNodeScore, MaxNodeScore]. A nil map means
// PreScore skipped scoring.
func Scores(t testing.TB, pl ScorePlugin, p *corev1.Pod, nodes ...fwk.NodeInfo) map[string]int64 {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	state := framework.NewCycleState()
	if s := pl.PreScore(ctx, state, p, nodes); s.IsSkip() {
		return nil
	} else if !s.IsSuccess() {
		t.Fatalf("PreScore: %v", s)
	}
	list := make(fwk.NodeScoreList, len(nodes))
	for i, ni := range nodes {
		score, s := pl.Score(ctx, state, p, ni)
		if !s.IsSuccess() {
			t.Fatalf("Score(%s): %v", ni.Node().Name, s)
		}
		list[i] = fwk.NodeScore{Name: ni.Node().Name, Score: score}
	}
	if s := pl.ScoreExtensions().NormalizeScore(ctx, state, p, list); !s.IsSuccess() {
		t.Fatalf("NormalizeScore: %v", s)
	}
	out := map[string]int64{}
	for _, ns := range list {
		if ns.Score < fwk.MinNodeScore || ns.Score > fwk.MaxNodeScore {
			t.Fatalf("node %s scored %d, outside [%d, %d]", ns.Name, ns.Score, fwk.MinNodeScore, fwk.MaxNodeScore)
		}
		out[ns.Name] = ns.Score
	}
	return out
}

// ReportHeapPerNode runs fill, which touches each of n nodes once, and
// reports the heap it leaves behind (after a GC on both sides) as the
// benchmark metric B/node: the per-node state a plugin keeps.
func ReportHeapPerNode(b *testing.B, n int, fill func()) {
	b.Helper()
	before := heapAlloc()
	fill()
	b.ReportMetric(float64(heapAlloc()-before)/float64(n), "B/node")
}

func heapAlloc() int64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
