package nodepids

import (
	"context"
	"strconv"
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
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/headroom-k8s/headroom/apis/config"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// now is the scheduler's clock in these tests.
var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// defaultArgs are the v1 defaults: DefaultPodPIDs 100, MinFreePIDs 512,
// MinFreePercent 5, MaxSampleAge 10m, UnknownNodeScore -1 (mean of known).
func defaultArgs() *config.NodePIDsArgs {
	return &config.NodePIDsArgs{
		DefaultPodPIDs:   configv1.DefaultPodPIDs,
		MinFreePIDs:      configv1.DefaultMinFreePIDs,
		MinFreePercent:   configv1.DefaultMinFreePercent,
		MaxSampleAge:     metav1.Duration{Duration: configv1.DefaultMaxSampleAge},
		UnknownNodeScore: configv1.DefaultUnknownNodeScore,
	}
}

type testPlugin struct {
	*NodePIDs
	recorder *events.FakeRecorder
	informer informers.SharedInformerFactory
}

// newPlugin builds the plugin through New with a real framework handle: a
// snapshot of nodes and pods, a fake event recorder, and an informer
// factory whose node lister holds nodes.
func newPlugin(t testing.TB, args *config.NodePIDsArgs, nodes []*corev1.Node, pods []*corev1.Pod) testPlugin {
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
	p, err := New(ctx, args, h)
	if err != nil {
		t.Fatal(err)
	}
	pl := p.(*NodePIDs)
	pl.clock = testingclock.NewFakePassiveClock(now)
	return testPlugin{NodePIDs: pl, recorder: recorder, informer: factory}
}

// pidNode is a node with the four PID annotations.
func pidNode(name string, capacity, reserved, used int64, sampledAt time.Time) *corev1.Node {
	return st.MakeNode().Name(name).
		Annotation(pidstats.AnnotationCapacity, strconv.FormatInt(capacity, 10)).
		Annotation(pidstats.AnnotationReserved, strconv.FormatInt(reserved, 10)).
		Annotation(pidstats.AnnotationUsed, strconv.FormatInt(used, 10)).
		Annotation(pidstats.AnnotationSampledAt, sampledAt.UTC().Format(time.RFC3339)).
		Obj()
}

// annotatedNode is a node with the given annotations (key, value, ...).
func annotatedNode(name string, kv ...string) *corev1.Node {
	w := st.MakeNode().Name(name)
	for i := 0; i+1 < len(kv); i += 2 {
		w = w.Annotation(kv[i], kv[i+1])
	}
	return w.Obj()
}

// pod is a pod declaring pids ("" for no annotation).
func pod(name, pids string) *corev1.Pod {
	w := st.MakePod().Namespace("ns").Name(name).UID(name)
	if pids != "" {
		w = w.Annotation(pidstats.AnnotationPodPIDs, pids)
	}
	return w.Obj()
}

// boundAt marks p as bound at t (PodScheduled=True), on node.
func boundAt(p *corev1.Pod, node string, t time.Time) *corev1.Pod {
	p.Spec.NodeName = node
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
		Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t),
	})
	return p
}

// assumed puts p on node as the scheduler does before binding: NodeName
// set, no PodScheduled condition yet.
func assumed(p *corev1.Pod, node string) *corev1.Pod {
	p.Spec.NodeName = node
	return p
}

func nodeInfo(node *corev1.Node, pods ...*corev1.Pod) *framework.NodeInfo {
	ni := framework.NewNodeInfo(pods...)
	ni.SetNode(node)
	return ni
}

// filter runs PreFilter and Filter for p on ni in a fresh cycle.
func (tp testPlugin) filter(t testing.TB, p *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	state := framework.NewCycleState()
	if _, s := tp.PreFilter(ctx, state, p, nil); !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s)
	}
	return tp.Filter(ctx, state, p, ni)
}

// scores runs PreScore, Score and NormalizeScore for p on nodes, as the
// framework does, and returns the final score per node name. A nil map
// means PreScore skipped scoring.
func (tp testPlugin) scores(t testing.TB, p *corev1.Pod, nodes ...fwk.NodeInfo) map[string]int64 {
	t.Helper()
	_, ctx := ktesting.NewTestContext(t)
	state := framework.NewCycleState()
	if s := tp.PreScore(ctx, state, p, nodes); s.IsSkip() {
		return nil
	} else if !s.IsSuccess() {
		t.Fatalf("PreScore: %v", s)
	}
	list := make(fwk.NodeScoreList, len(nodes))
	for i, ni := range nodes {
		score, s := tp.Score(ctx, state, p, ni)
		if !s.IsSuccess() {
			t.Fatalf("Score(%s): %v", ni.Node().Name, s)
		}
		list[i] = fwk.NodeScore{Name: ni.Node().Name, Score: score}
	}
	if s := tp.ScoreExtensions().NormalizeScore(ctx, state, p, list); !s.IsSuccess() {
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
