package figure

import (
	"errors"
	"iter"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

// units is a figure for the core's own tests: a node's free units are its
// "units" annotation less one per pod, its floor 10; a pod needs its
// "need" annotation.
type units struct{}

var errNoUnits = errors.New("no units")

func (units) Read(node *corev1.Node, _ time.Time) (unitSample, error) {
	n, err := strconv.ParseInt(node.Annotations["units"], 10, 64)
	if err != nil {
		return unitSample{}, errNoUnits
	}
	return unitSample{capacity: n}, nil
}

// Estimate counts one unit a pod.
func (units) Estimate(s unitSample, pods iter.Seq[*corev1.Pod]) unitSample {
	for range pods {
		s.used++
	}
	return s
}

func (units) Floor(unitSample) int64 { return 10 }

func (units) Need(pod *corev1.Pod) (int64, bool, error) {
	n, _ := strconv.ParseInt(pod.Annotations["need"], 10, 64)
	return n, true, nil
}

func (units) Counted(*corev1.Pod) bool          { return true }
func (units) Sign(*corev1.Pod) fwk.SignFragment { return fwk.SignFragment{Key: "units"} }

type unitSample struct{ capacity, used int64 }

func (unitSample) SampleTime() time.Time { return testNow }
func (s unitSample) ReportedUsed() int64 { return s.used }
func (s unitSample) Free() int64         { return max(s.capacity-s.used, 0) }

var testNow = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func unitNode(name string, free int) *corev1.Node {
	return st.MakeNode().Name(name).Annotation("units", strconv.Itoa(free)).Obj()
}

func needPod(name string, need int) *corev1.Pod {
	return st.MakePod().Namespace("ns").Name(name).UID(name).Annotation("need", strconv.Itoa(need)).Obj()
}

func newTestPlugin(t *testing.T, nodes ...*corev1.Node) (*Plugin[unitSample], plugintest.Handle) {
	t.Helper()
	h := plugintest.NewHandle(t, nodes, nil)
	pl := newPlugin[unitSample](t.Context(), h, Names{Plugin: "Units", Kind: "unit", Noun: "unit", FilterReason: "node(s) had too few units"},
		Settings{UnknownScore: -1}, units{})
	pl.Clock = testingclock.NewFakePassiveClock(testNow)
	return pl, h
}

// When every node has room for the pod, PreFilter lets Filter pass the
// snapshot's nodes without reading them (nodecache.Bounds.Covers); a copy
// the scheduler changed in the cycle (a pod added) is still judged, and a
// single short node, or a pod bigger than the least room, turns the
// shortcut off.
func TestFilterShortcutWhenEveryNodeFits(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	cycle := func(pl *Plugin[unitSample], p *corev1.Pod) (fwk.CycleState, *cycle) {
		t.Helper()
		state := framework.NewCycleState()
		if _, s := pl.PreFilter(ctx, state, p, nil); !s.IsSuccess() {
			t.Fatalf("PreFilter: %v", s)
		}
		return state, pl.cycleOf(state, pl.preFilter, p)
	}
	roomy := []*corev1.Node{unitNode("a", 100), unitNode("b", 50), st.MakeNode().Name("unknown").Obj()}
	pl, h := newTestPlugin(t, roomy...)
	p := needPod("p", 30)
	state, s := cycle(pl, p)
	if s.fitsEvery.Generation == 0 {
		t.Fatal("every node has room, yet PreFilter set no shortcut")
	}
	for _, n := range roomy {
		if status := pl.Filter(ctx, state, p, h.SnapshotNodeInfo(t, n.Name)); !status.IsSuccess() {
			t.Fatalf("%s: %v", n.Name, status)
		}
	}
	// b keeps 50 − 10 = 40 above its floor: 30 fits, and not with 11 more pods.
	crowded := h.SnapshotNodeInfo(t, "b").(*framework.NodeInfo).SnapshotConcrete()
	for i := range 11 {
		crowded.AddPod(needPod("nominated-"+strconv.Itoa(i), 0))
	}
	if status := pl.Filter(ctx, state, p, crowded); status.Code() != fwk.Unschedulable {
		t.Fatalf("a copy of b with 11 pods added: %v, want Unschedulable", status)
	}
	big := needPod("big", 41)
	if _, s := cycle(pl, big); s.fitsEvery.Generation != 0 {
		t.Fatal("a pod that does not fit node b got the shortcut")
	}

	pl, h = newTestPlugin(t, append(roomy, unitNode("short", 20))...)
	state, s = cycle(pl, p)
	if s.fitsEvery.Generation != 0 {
		t.Fatal("a node is short, yet PreFilter set the shortcut")
	}
	if status := pl.Filter(ctx, state, p, h.SnapshotNodeInfo(t, "short")); status.Code() != fwk.Unschedulable {
		t.Fatalf("short node: %v, want Unschedulable", status)
	}
}
