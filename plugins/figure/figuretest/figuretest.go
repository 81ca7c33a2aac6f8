// Package figuretest holds the test builders of figure plugins (a
// plugins/figure Definition such as NodePIDs or NodeIPs), parameterised by
// the Definition, its args and the annotations that make a node's sample:
// the plugin built through the Definition's New over a real framework
// handle at a fixed clock, its queueing hints, nodes and pods, the checks
// every figure plugin passes alike, and the benchmarks (Bench). A figure
// plugin's tests keep only what differs: its args, its sample's
// annotations, its pods and the cases.
//
// It builds on plugins/internal/plugintest, which serves every scheduler
// plugin; it is a package of its own because it imports plugins/figure,
// whose own tests import plugintest.
package figuretest

import (
	"context"
	"reflect"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/headroom-k8s/headroom/plugins/figure"
	"github.com/headroom-k8s/headroom/plugins/internal/nodestate"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

// Now is the scheduler's clock in figure plugins' tests: New sets the
// plugin's clock to it.
var Now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// Plugin is a figure plugin under test, with the framework handle it was
// built with (zero when built without one).
type Plugin[S figure.Sample] struct {
	*figure.Plugin[S]
	Handle plugintest.Handle
}

// New builds d's plugin through d.New from args (nil: the defaults), with
// a real framework handle over nodes and pods (plugintest.NewHandle), its
// clock a fake one at Now.
func New[A any, S figure.Sample](t testing.TB, d *figure.Definition[A, S], args *A, nodes []*corev1.Node, pods []*corev1.Pod) Plugin[S] {
	t.Helper()
	var obj runtime.Object
	if args != nil {
		o, ok := any(args).(runtime.Object)
		if !ok {
			t.Fatalf("%s args %T are not a runtime.Object", d.Name(), args)
		}
		obj = o
	}
	h := plugintest.NewHandle(t, nodes, pods)
	p, err := d.New(context.Background(), obj, h)
	if err != nil {
		t.Fatal(err)
	}
	pl := p.(*figure.Plugin[S])
	pl.Clock = testingclock.NewFakePassiveClock(Now)
	return Plugin[S]{Plugin: pl, Handle: h}
}

// Builder returns New bound to d: func(t, args, nodes, pods), the
// newPlugin of a figure plugin's tests.
func Builder[A any, S figure.Sample](d *figure.Definition[A, S]) func(t testing.TB, args *A, nodes []*corev1.Node, pods []*corev1.Pod) Plugin[S] {
	return func(t testing.TB, args *A, nodes []*corev1.Node, pods []*corev1.Pod) Plugin[S] {
		t.Helper()
		return New(t, d, args, nodes, pods)
	}
}

// DefaultArgs returns d's args as the scheme defaults them for a profile
// without pluginConfig (d.Args(nil)), a fresh copy on each call; it panics
// when they do not validate.
func DefaultArgs[A any, S figure.Sample](d *figure.Definition[A, S]) *A {
	args, err := d.Args(nil)
	if err != nil {
		panic(err)
	}
	return args
}

// SetNow sets the clock of a plugin built by New.
func (p Plugin[S]) SetNow(t testing.TB, now time.Time) {
	t.Helper()
	clk, ok := p.Clock.(*testingclock.FakePassiveClock)
	if !ok {
		t.Fatalf("the plugin's clock %T is not the fake one New sets", p.Clock)
	}
	clk.SetTime(now)
}

// Hint returns the plugin's queueing hint for events of resource; it
// panics when the plugin registers none.
func (p Plugin[S]) Hint(resource fwk.EventResource) fwk.QueueingHintFn {
	events, err := p.EventsToRegister(context.Background())
	if err != nil {
		panic(err)
	}
	for _, e := range events {
		if e.Event.Resource == resource {
			return e.QueueingHintFn
		}
	}
	panic("no hint for " + string(resource))
}

// IsSchedulableAfterNodeChange runs the plugin's queueing hint for Node
// events.
func (p Plugin[S]) IsSchedulableAfterNodeChange(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	return p.Hint(fwk.Node)(logger, pod, oldObj, newObj)
}

// IsSchedulableAfterPodDelete runs the plugin's queueing hint for Pod
// events.
func (p Plugin[S]) IsSchedulableAfterPodDelete(logger klog.Logger, pod *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	return p.Hint(fwk.Pod)(logger, pod, oldObj, newObj)
}

// RunFilter runs PreFilter and Filter for pod on ni in a fresh cycle
// (plugintest.Filter).
func (p Plugin[S]) RunFilter(t testing.TB, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	t.Helper()
	return plugintest.Filter(t, p.Plugin, pod, ni)
}

// Scores runs a scoring cycle for pod on nodes (plugintest.Scores).
func (p Plugin[S]) Scores(t testing.TB, pod *corev1.Pod, nodes ...fwk.NodeInfo) map[string]int64 {
	t.Helper()
	return plugintest.Scores(t, p.Plugin, pod, nodes...)
}

// CheckEventsToRegister checks the events the plugin registers: a node
// added or its annotations updated, and a pod deleted, each with a
// queueing hint.
func (p Plugin[S]) CheckEventsToRegister(t *testing.T) {
	t.Helper()
	got, err := p.EventsToRegister(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var events []fwk.ClusterEvent
	for _, e := range got {
		if e.QueueingHintFn == nil {
			t.Errorf("%v registered without a queueing hint", e.Event)
		}
		events = append(events, e.Event)
	}
	want := []fwk.ClusterEvent{
		{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAnnotation},
		{Resource: fwk.Pod, ActionType: fwk.Delete},
	}
	if !reflect.DeepEqual(events, want) {
		t.Fatalf("events = %v, want %v", events, want)
	}
}

// NodeState is a node and the state in which headroom_nodes counts it at
// Now.
type NodeState struct {
	Node *corev1.Node
	Want nodestate.State
}

// CheckNodeStates builds d's plugin from args (with a sample age limit) and
// checks that headroom_nodes counts each node in the state Filter judges
// it by (plugintest.NodeStates), at Now, a second later, at Now + the age
// limit, a second after that, and an hour after Now. The nodes are the
// figure's own and those every figure has, made by sampled (a node whose
// sample, taken at sampledAt, has no room for pod): "fresh" (sampled at
// Now), "at-the-limit" (as old as the limit), "old" (a second older,
// stale), "future" (sampled two minutes after Now: invalid) and "none" (no
// annotations: unknown).
func CheckNodeStates[A any, S figure.Sample](t *testing.T, d *figure.Definition[A, S], args *A, pod *corev1.Pod,
	sampled func(name string, sampledAt time.Time) *corev1.Node, own ...NodeState) {
	t.Helper()
	settings, _, err := d.Configure(args, nil)
	if err != nil {
		t.Fatal(err)
	}
	maxAge := settings.MaxSampleAge
	if maxAge <= 0 {
		t.Fatalf("%s args without a sample age limit", d.Name())
	}
	states := append([]NodeState{
		{sampled("fresh", Now), nodestate.Known},
		{sampled("at-the-limit", Now.Add(-maxAge)), nodestate.Known},
		{sampled("old", Now.Add(-maxAge-time.Second)), nodestate.Stale},
		{sampled("future", Now.Add(2*time.Minute)), nodestate.Invalid},
		{AnnotatedNode("none"), nodestate.Unknown},
	}, own...)
	var nodes []*corev1.Node
	want := map[string]nodestate.State{}
	for _, s := range states {
		nodes = append(nodes, s.Node)
		want[s.Node.Name] = s.Want
	}
	p := New(t, d, args, nodes, nil)
	times := []time.Time{Now, Now.Add(time.Second), Now.Add(maxAge), Now.Add(maxAge + time.Second), Now.Add(time.Hour)}
	plugintest.NodeStates(t, p.Plugin, func(at time.Time) { p.SetNow(t, at) }, p.NodeStateConfig(), pod, nodes, times, want)
}

// AnnotatedNode is a node with the given annotations (key, value, ...).
func AnnotatedNode(name string, kv ...string) *corev1.Node {
	w := st.MakeNode().Name(name)
	for i := 0; i+1 < len(kv); i += 2 {
		w = w.Annotation(kv[i], kv[i+1])
	}
	return w.Obj()
}

// WithOtherAnnotation returns a copy of node with one more annotation,
// which no figure reads.
func WithOtherAnnotation(node *corev1.Node) *corev1.Node {
	node = node.DeepCopy()
	if node.Annotations == nil {
		node.Annotations = map[string]string{}
	}
	node.Annotations["example.com/other"] = "changed"
	return node
}

// Pod is a pod in namespace "ns" whose UID is its name, on the pod network,
// without annotations.
func Pod(name string) *corev1.Pod {
	return st.MakePod().Namespace("ns").Name(name).UID(name).Obj()
}
