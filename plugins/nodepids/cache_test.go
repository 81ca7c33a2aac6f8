package nodepids

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/figure/figuretest"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

func TestCacheFollowsGeneration(t *testing.T) {
	sample := now.Add(-time.Minute)
	node := pidNode("n", 32768, 0, 20000, sample)
	tp := newPlugin(t, defaultArgs(), []*corev1.Node{node}, nil)
	_, ctx := ktesting.NewTestContext(t)
	snap, err := tp.Handle.SnapshotSharedLister().NodeInfos().Get("n")
	if err != nil {
		t.Fatal(err)
	}
	ni := snap.(*framework.NodeInfo)

	first := tp.Estimate(ctx, ni)
	if first.Used != 20000 {
		t.Fatalf("estimated use %d, want the reported 20000", first.Used)
	}

	// A pod placed on the node: new generation, same Node object.
	ni.AddPod(plugintest.Assumed(pod("p", "700"), "n"))
	second := tp.Estimate(ctx, ni)
	if second.Used != 20700 {
		t.Fatalf("after a pod was added: estimate %d, want 20700", second.Used)
	}

	// A new Node object (the reporter wrote a sample).
	ni.SetNode(pidNode("n", 32768, 0, 10000, now))
	third := tp.Estimate(ctx, ni)
	// The pod is assumed, not bound: it counts on top of any sample.
	if !third.SampledAt.Equal(now) || third.Used != 10700 {
		t.Fatalf("after a new sample: sampled at %v, estimated %d; want %v and 10700", third.SampledAt, third.Used, now)
	}
}

// An invalid node annotation is logged once per distinct bad value, not
// once per pod and node, nor per update of the Node that keeps the value.
func TestInvalidAnnotationLoggedOncePerNodeObject(t *testing.T) {
	bad := figuretest.AnnotatedNode("n", pidstats.AnnotationCapacity, "32768", pidstats.AnnotationUsed, "-1",
		pidstats.AnnotationSampledAt, now.Format(time.RFC3339))
	tp := newPlugin(t, defaultArgs(), []*corev1.Node{bad}, nil)
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	ctx := klog.NewContext(t.Context(), logger)
	count := func() int {
		return strings.Count(logger.GetSink().(ktesting.Underlier).GetBuffer().String(), "Node has an invalid PID annotation")
	}

	snap, err := tp.Handle.SnapshotSharedLister().NodeInfos().Get("n")
	if err != nil {
		t.Fatal(err)
	}
	ni := snap.(*framework.NodeInfo)
	for _, name := range []string{"a", "b", "c"} {
		state := framework.NewCycleState()
		p := pod(name, "")
		if _, s := tp.PreFilter(ctx, state, p, nil); !s.IsSuccess() {
			t.Fatal(s)
		}
		if s := tp.Filter(ctx, state, p, ni); !s.IsSuccess() {
			t.Fatalf("Filter = %v on a node with unknown headroom", s)
		}
		ni.AddPod(plugintest.Assumed(pod("placed-"+name, ""), "n"))
	}
	if got := count(); got != 1 {
		t.Fatalf("logged %d times for one Node object and three pods, want 1", got)
	}
	if buf := logger.GetSink().(ktesting.Underlier).GetBuffer().String(); !strings.Contains(buf, pidstats.AnnotationUsed) {
		t.Errorf("log does not name the annotation: %s", buf)
	}
	// A new Node object with the same bad value (a kubelet status update)
	// is not reported again; another bad value is.
	ni.SetNode(bad.DeepCopy())
	tp.Estimate(ctx, ni)
	if got := count(); got != 1 {
		t.Fatalf("logged %d times after an update that left the bad value, want 1", got)
	}
	worse := bad.DeepCopy()
	worse.Annotations[pidstats.AnnotationUsed] = "-2"
	ni.SetNode(worse)
	tp.Estimate(ctx, ni)
	if got := count(); got != 2 {
		t.Fatalf("logged %d times after the bad value changed, want 2", got)
	}
}

// Filter and Score run in parallel over nodes, and a node's entry may be
// replaced while another cycle reads it; run with -race.
func TestCacheConcurrentUse(t *testing.T) {
	var nodes []*corev1.Node
	for i := range 8 {
		nodes = append(nodes, pidNode(fmt.Sprintf("n%d", i), 32768, 0, int64(1000*i), now.Add(-time.Minute)))
	}
	tp := newPlugin(t, defaultArgs(), nodes, nil)
	_, ctx := ktesting.NewTestContext(t)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				node := nodes[(w+i)%len(nodes)]
				// A newer generation of the node replaces its entry while the
				// other workers read the snapshot's.
				tp.Estimate(ctx, plugintest.NodeInfo(node, plugintest.Assumed(pod(fmt.Sprintf("p%d-%d", w, i), "10"), "x")))
				ni, err := tp.Handle.SnapshotSharedLister().NodeInfos().Get(node.Name)
				if err != nil {
					t.Error(err)
					return
				}
				state := framework.NewCycleState()
				p := pod("incoming", "")
				tp.PreFilter(ctx, state, p, nil)
				if s := tp.Filter(ctx, state, p, ni); !s.IsSuccess() {
					t.Errorf("Filter on %s: %v", ni.Node().Name, s)
					return
				}
				if _, s := tp.Score(ctx, state, p, ni); !s.IsSuccess() {
					t.Errorf("Score on %s: %v", ni.Node().Name, s)
					return
				}
			}
		})
	}
	wg.Wait()
}

// The scheduler filters temporary copies of a NodeInfo (nominated pods,
// preemption dry runs); they are judged exactly but never replace the
// snapshot's cached entry.
func TestTemporaryNodeInfoCopiesAreNotCached(t *testing.T) {
	node := pidNode("n", 32768, 0, 20000, now.Add(-time.Minute))
	tp := newPlugin(t, defaultArgs(), []*corev1.Node{node}, nil)
	_, ctx := ktesting.NewTestContext(t)
	snap, err := tp.Handle.SnapshotSharedLister().NodeInfos().Get("n")
	if err != nil {
		t.Fatal(err)
	}
	first := tp.Estimate(ctx, snap)
	if first.Err != nil {
		t.Fatal("headroom unknown")
	}
	nominated := snap.Snapshot().(*framework.NodeInfo)
	if tp.Estimate(ctx, nominated) != first {
		t.Fatal("an unchanged copy (same generation) should have the snapshot's estimate")
	}
	nominated.AddPod(plugintest.Assumed(pod("nominated", "700"), "n"))
	if onCopy := tp.Estimate(ctx, nominated); onCopy.Err != nil || onCopy.Used != 20700 {
		t.Fatalf("copy with a nominated pod: estimated %d (%v), want 20700", onCopy.Used, onCopy.Err)
	}
	if tp.Estimate(ctx, snap) != first {
		t.Fatal("filtering a temporary copy replaced the snapshot's estimate")
	}
}

// When every node has room for the pod, PreFilter lets Filter pass the
// snapshot's nodes without reading them (nodecache.Bounds.Covers); a copy
// the scheduler changed in the cycle (a nominated pod added) is still
// judged, and a single short node turns the shortcut off.
func TestFilterShortcutWhenEveryNodeFits(t *testing.T) {
	sample := now.Add(-time.Minute)
	roomy := []*corev1.Node{pidNode("a", 32768, 0, 1000, sample), pidNode("b", 32768, 0, 2000, sample), st.MakeNode().Name("unknown").Obj()}
	short := pidNode("short", 32768, 0, 31500, sample)
	_, ctx := ktesting.NewTestContext(t)
	cycle := func(tp figuretest.Plugin[pidstats.NodeStats], p *corev1.Pod) fwk.CycleState {
		t.Helper()
		state := framework.NewCycleState()
		if _, s := tp.PreFilter(ctx, state, p, nil); !s.IsSuccess() {
			t.Fatalf("PreFilter: %v", s)
		}
		return state
	}
	snapshotNode := func(tp figuretest.Plugin[pidstats.NodeStats], name string) fwk.NodeInfo {
		t.Helper()
		ni, err := tp.Handle.SnapshotSharedLister().NodeInfos().Get(name)
		if err != nil {
			t.Fatal(err)
		}
		return ni
	}

	tp := newPlugin(t, defaultArgs(), roomy, nil)
	p := pod("p", "100")
	state := cycle(tp, p)
	for _, n := range roomy {
		if status := tp.Filter(ctx, state, p, snapshotNode(tp, n.Name)); !status.IsSuccess() {
			t.Fatalf("%s: %v", n.Name, status)
		}
	}
	nominated := snapshotNode(tp, "a").(*framework.NodeInfo).SnapshotConcrete()
	nominated.AddPod(plugintest.Assumed(pod("nominated", "31000"), "a"))
	if status := tp.Filter(ctx, state, p, nominated); status.Code() != fwk.Unschedulable {
		t.Fatalf("a copy of a with a nominated pod of 31000 PIDs: %v, want Unschedulable", status)
	}
	// A pod bigger than the least room gets no shortcut.
	big := pod("big", "29200")
	if status := tp.Filter(ctx, cycle(tp, big), big, snapshotNode(tp, "b")); status.Code() != fwk.Unschedulable {
		t.Fatalf("a pod that does not fit node b: %v, want Unschedulable", status)
	}

	tp = newPlugin(t, defaultArgs(), append(roomy, short), nil)
	state = cycle(tp, p)
	if status := tp.Filter(ctx, state, p, snapshotNode(tp, "short")); status.Code() != fwk.Unschedulable {
		t.Fatalf("short node: %v, want Unschedulable", status)
	}
	if status := tp.Filter(ctx, state, p, snapshotNode(tp, "a")); !status.IsSuccess() {
		t.Fatalf("a: %v", status)
	}
}

// PreScore skips Score when every node keeps AmpleFreePIDs free after the
// pod (all would score 100) and a node of unknown headroom would score 100
// too; otherwise, also when a candidate that changed since the last walk is
// short, it lets Score run.
func TestPreScoreSkipsWhenEveryNodeHasAmplePIDs(t *testing.T) {
	sample := now.Add(-time.Minute)
	const most = pidstats.MaxNodePIDs
	ample := []*corev1.Node{pidNode("a", most, 0, 20000, sample), pidNode("b", 65536, 0, 32000, sample)} // b: 33536 free
	unknown := st.MakeNode().Name("unknown").Obj()
	fixedUnknown := defaultArgs()
	fixedUnknown.UnknownNodeScore = 50
	_, ctx := ktesting.NewTestContext(t)
	for _, tc := range []struct {
		name  string
		args  func() *config.NodePIDsArgs
		nodes []*corev1.Node
		pids  string
		skip  bool
	}{
		{"every node ample", defaultArgs, ample, "100", true},
		{"the pod takes b below ample", defaultArgs, ample, "1000", false},
		{"unknown node scores the mean", defaultArgs, append(ample, unknown), "100", true},
		{"unknown node scores 50", func() *config.NodePIDsArgs { return fixedUnknown }, append(ample, unknown), "100", false},
		{"no limit", func() *config.NodePIDsArgs { a := defaultArgs(); a.AmpleFreePIDs = 0; return a }, ample, "100", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := newPlugin(t, tc.args(), tc.nodes, nil)
			infos, err := tp.Handle.SnapshotSharedLister().NodeInfos().List()
			if err != nil {
				t.Fatal(err)
			}
			p := pod("p", tc.pids)
			if s := tp.PreScore(ctx, framework.NewCycleState(), p, infos); s.IsSkip() != tc.skip {
				t.Fatalf("PreScore = %v, want skip %v", s, tc.skip)
			}
			if !tc.skip {
				return
			}
			// What Score gives without PreScore: the same raw score, the
			// ample figure (or the unknown mark), on every node, so every
			// node would be normalised to the same score.
			for _, ni := range infos {
				raw, s := tp.Score(ctx, framework.NewCycleState(), p, ni)
				if !s.IsSuccess() || raw != tp.Settings().Ample && ni.Node().Name != "unknown" {
					t.Fatalf("skipped, but Score gives %s a raw %d (%v), not %d", ni.Node().Name, raw, s, tp.Settings().Ample)
				}
			}
			// A candidate that changed since the last walk over the
			// snapshot is judged by its own figures: a pod of 2,000 PIDs
			// placed on b since takes it below ample.
			for _, ni := range infos {
				if ni.Node().Name == "b" {
					ni.(*framework.NodeInfo).AddPod(plugintest.Assumed(pod("big", "2000"), "b"))
				}
			}
			if s := tp.PreScore(ctx, framework.NewCycleState(), p, infos); s.IsSkip() {
				t.Fatal("PreScore skipped although b, changed since the walk, is no longer ample")
			}
		})
	}
}
