package nodestate

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	testingclock "k8s.io/utils/clock/testing"

	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

const maxAge = 20 * time.Second

// readPIDs reads a PID sample as NodePIDs does.
func readPIDs(node *corev1.Node, now time.Time) (time.Time, error) {
	s, err := pidstats.ParseNode(node.Annotations, now, 0)
	return s.SampledAt, err
}

func pidConfig() Config {
	return Config{Plugin: "NodePIDs", Kind: "PID", MaxSampleAge: maxAge, Read: readPIDs}
}

// node returns a Node with a PID sample taken at sampledAt, or with
// annotations ann when given.
func node(name string, sampledAt time.Time, ann ...string) *corev1.Node {
	a := map[string]string{}
	if !sampledAt.IsZero() {
		a = pidstats.NodeStats{Capacity: 32768, Used: 1000, SampledAt: sampledAt}.Annotations()
	}
	for i := 0; i+1 < len(ann); i += 2 {
		a[ann[i]] = ann[i+1]
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: a}}
}

// logs returns a logger at the default verbosity (0) and its lines.
func logs(t *testing.T) (klog.Logger, func() []ktesting.LogEntry) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	buf := logger.GetSink().(ktesting.Underlier).GetBuffer()
	return logger, func() []ktesting.LogEntry { return buf.Data() }
}

// gauge returns headroom_nodes of plugin NodePIDs in profile, by state.
func gauge(t *testing.T, profile string) map[State]int {
	t.Helper()
	out := map[State]int{}
	for _, s := range States {
		v, err := testutil.GetGaugeMetricValue(headroommetrics.Nodes.WithLabelValues("NodePIDs", profile, string(s)))
		if err != nil {
			t.Fatal(err)
		}
		out[s] = int(v)
	}
	return out
}

// kv returns the value of key in a log entry's parameters, or nil.
func kv(e ktesting.LogEntry, key string) any {
	for i := 0; i+1 < len(e.ParameterKVList); i += 2 {
		if e.ParameterKVList[i] == key {
			return e.ParameterKVList[i+1]
		}
	}
	return nil
}

func TestClassify(t *testing.T) {
	now := t0
	for _, tc := range []struct {
		name   string
		node   *corev1.Node
		maxAge time.Duration
		want   State
		reason string
	}{
		{"fresh", node("n", now.Add(-maxAge)), maxAge, Known, ""},
		{"one second over the limit", node("n", now.Add(-maxAge-time.Second)), maxAge, Stale, "PID sample is 21s old, older than the limit of 20s"},
		{"old, no limit", node("n", now.Add(-240*time.Hour)), 0, Known, ""},
		{"no sample", node("n", time.Time{}), maxAge, Unknown, "node has no PID annotations"},
		{"reserved alone is no sample", node("n", time.Time{}, pidstats.AnnotationReserved, "10"), maxAge, Unknown, "node has no PID annotations"},
		{"malformed", node("n", now, pidstats.AnnotationUsed, "lots"), maxAge, Invalid, `annotation headroom.dev/pid-used="lots": not a base-10 integer`},
		{"part of a sample", node("n", time.Time{}, pidstats.AnnotationCapacity, "100"), maxAge, Invalid, "missing while other PID annotations are present"},
		{"in the future", node("n", now.Add(2*time.Minute)), maxAge, Invalid, "in the future"},
		// The per-pod list does not make the headroom unknown: NodePIDs
		// counts the reported use alone.
		{"malformed per-pod list", node("n", now, pidstats.AnnotationPIDPods, "x"), maxAge, Known, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at, err := readPIDs(tc.node, now)
			got, reason := Classify("PID", at, err, now, tc.maxAge)
			if got != tc.want {
				t.Errorf("state %s, want %s (reason %v)", got, tc.want, reason)
			}
			switch {
			case tc.reason == "" && reason != nil:
				t.Errorf("reason %v, want none", reason)
			case tc.reason != "" && (reason == nil || !strings.Contains(reason.Error(), tc.reason)):
				t.Errorf("reason %v, want it to say %q", reason, tc.reason)
			}
		})
	}
}

// TestUpdateLogsTransitionsOnce follows one node from known to stale and
// back, and checks the gauge at each step and that each change is logged
// once at the default verbosity, however many recounts see it.
func TestUpdateLogsTransitionsOnce(t *testing.T) {
	logger, lines := logs(t)
	tr := New(logger, "transitions", pidConfig())
	a := node("node-a", t0)
	b := node("node-b", time.Time{})
	c := node("node-c", t0, pidstats.AnnotationCapacity, "-1")

	next := tr.Update(t0.Add(time.Second), []*corev1.Node{a, b, c})
	if want := t0.Add(maxAge + time.Nanosecond); !next.Equal(want) {
		t.Errorf("next change at %v, want %v", next, want)
	}
	if got, want := gauge(t, "transitions"), (map[State]int{Known: 1, Unknown: 1, Stale: 0, Invalid: 1}); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("gauge %v, want %v", got, want)
	}
	// The first count is one summary line, not a line per node.
	if l := lines(); len(l) != 1 || l[0].Message != "Nodes by PID headroom state" || kv(l[0], "known") != 1 || kv(l[0], "invalid") != 1 {
		t.Fatalf("first count logged %+v, want one summary line", l)
	}

	// At the limit the sample is still known (the plugins use it until
	// then); a nanosecond later it is stale.
	tr.Update(t0.Add(maxAge), []*corev1.Node{a, b, c})
	if got := gauge(t, "transitions")[Known]; got != 1 {
		t.Errorf("at the limit: %d known, want 1", got)
	}
	if l := lines(); len(l) != 1 {
		t.Errorf("no change logged %d lines: %+v", len(l)-1, l[1:])
	}
	for i := range 3 {
		if next := tr.Update(next.Add(time.Duration(i)*time.Second), []*corev1.Node{a, b, c}); !next.IsZero() {
			t.Errorf("no known sample left, but next change at %v", next)
		}
	}
	if got := gauge(t, "transitions"); got[Known] != 0 || got[Stale] != 1 {
		t.Errorf("gauge %v, want node-a stale", got)
	}
	l := lines()
	if len(l) != 2 {
		t.Fatalf("logged %d lines after the sample went stale, want 1: %+v", len(l)-1, l[1:])
	}
	if e := l[1]; e.Message != "Node's PID headroom state changed" || e.Verbosity != 0 ||
		fmt.Sprint(kv(e, "node")) != "node-a" || kv(e, "from") != "known" || kv(e, "to") != "stale" ||
		kv(e, "plugin") != "NodePIDs" || kv(e, "reason") != "PID sample is 20.000000001s old, older than the limit of 20s" {
		t.Errorf("transition line %+v", e)
	}

	// The node agent writes again.
	a2 := node("node-a", next.Add(2*time.Second))
	tr.Update(next.Add(3*time.Second), []*corev1.Node{a2, b, c})
	l = lines()
	if len(l) != 3 || kv(l[2], "from") != "stale" || kv(l[2], "to") != "known" || kv(l[2], "reason") != nil {
		t.Errorf("recovery lines %+v", l[2:])
	}
	if got := gauge(t, "transitions"); got[Known] != 1 || got[Stale] != 0 {
		t.Errorf("gauge %v after recovery", got)
	}

	// A deleted node leaves the count; an added one joins it. Neither is
	// a change of state, so neither is logged at the default verbosity.
	tr.Update(next.Add(4*time.Second), []*corev1.Node{a2, c, node("node-d", time.Time{})})
	if got := gauge(t, "transitions"); got[Unknown] != 1 || got[Known]+got[Invalid] != 2 {
		t.Errorf("gauge %v after node-b left and node-d came", got)
	}
	if l := lines(); len(l) != 3 {
		t.Errorf("added and deleted nodes logged at V(0): %+v", l[3:])
	}
}

// TestUpdateReadsEachObjectOnce checks that a recount reads only Node
// objects it has not read, as the plugins' caches do.
func TestUpdateReadsEachObjectOnce(t *testing.T) {
	var reads atomic.Int64
	cfg := pidConfig()
	cfg.Read = func(n *corev1.Node, now time.Time) (time.Time, error) {
		reads.Add(1)
		return readPIDs(n, now)
	}
	tr := New(klog.Background(), "reads", cfg)
	a, b := node("a", t0), node("b", t0)
	for i := range 5 {
		tr.Update(t0.Add(time.Duration(i)*time.Second), []*corev1.Node{a, b})
	}
	if got := reads.Load(); got != 2 {
		t.Errorf("%d reads over 5 recounts of 2 unchanged nodes, want 2", got)
	}
	tr.Update(t0.Add(6*time.Second), []*corev1.Node{a, node("b", t0)})
	if got := reads.Load(); got != 3 {
		t.Errorf("%d reads after one node changed, want 3", got)
	}
}

// TestUpdateAggregatesManyChanges: the node agent stops on a whole fleet;
// a handful of lines say so, not one per node.
func TestUpdateAggregatesManyChanges(t *testing.T) {
	logger, lines := logs(t)
	tr := New(logger, "fleet", pidConfig())
	const n = 5000
	nodes := make([]*corev1.Node, n)
	for i := range nodes {
		nodes[i] = node(fmt.Sprintf("node-%04d", i), t0)
	}
	// A few nodes carry a bad sample meanwhile.
	tr.Update(t0, nodes)
	nodes[7] = node("node-0007", t0, pidstats.AnnotationUsed, "x")
	nodes[9] = node("node-0009", t0, pidstats.AnnotationUsed, "x")
	tr.Update(t0.Add(time.Hour), nodes)
	if got := gauge(t, "fleet"); got[Stale] != n-2 || got[Invalid] != 2 {
		t.Errorf("gauge %v", got)
	}
	l := lines()[1:]
	if len(l) != 2 {
		t.Fatalf("%d lines for %d changes, want one per pair of states: %+v", len(l), n, l)
	}
	if e := l[0]; e.Message != "Node's PID headroom state changed on 2 nodes" || kv(e, "count") != 2 || kv(e, "to") != "invalid" ||
		fmt.Sprint(kv(e, "nodes")) != "[node-0007 node-0009]" {
		t.Errorf("first line %+v", e)
	}
	if e := l[1]; e.Message != "Node's PID headroom state changed on 4998 nodes" || kv(e, "count") != n-2 || kv(e, "from") != "known" || kv(e, "to") != "stale" ||
		fmt.Sprint(kv(e, "nodes")) != "[node-0000 node-0001 node-0002 node-0003 node-0004]" ||
		!strings.Contains(fmt.Sprint(kv(e, "firstReason")), "PID sample is 1h0m0s old") {
		t.Errorf("second line %+v", e)
	}

	// Up to MaxLines changes are logged one line each.
	for i := range MaxLines {
		nodes[100+i] = node(nodes[100+i].Name, t0.Add(time.Hour))
	}
	tr.Update(t0.Add(time.Hour+time.Second), nodes)
	if got := len(lines()) - 3; got != MaxLines {
		t.Errorf("%d lines for %d changes, want one each", got, MaxLines)
	}
}

// TestRunRecountsWhenASampleGoesStale runs the loop on a fake clock: it
// counts once synced, and again when the known sample goes stale, with no
// Node event in between.
func TestRunRecountsWhenASampleGoesStale(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clk := testingclock.NewFakeClock(t0)
	factory := informers.NewSharedInformerFactory(fake.NewClientset(), 0)
	indexer := factory.Core().V1().Nodes().Informer().GetIndexer()
	if err := indexer.Add(node("a", t0)); err != nil {
		t.Fatal(err)
	}
	tr := New(klog.Background(), "run", pidConfig())
	synced, poke := make(chan struct{}), make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tr.Run(ctx, clk, factory.Core().V1().Nodes().Lister(), synced, poke)
	}()
	if clk.HasWaiters() {
		t.Fatal("the loop waits on the clock before the informer synced")
	}
	close(synced)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil }); err != nil {
			t.Fatalf("%s: %v (gauge %v)", what, err, gauge(t, "run"))
		}
	}
	waitFor("counted once synced", func() bool { return gauge(t, "run")[Known] == 1 && clk.HasWaiters() })
	// MinInterval, then the timer of the sample's staleness.
	clk.Step(MinInterval)
	waitFor("waiting for the sample to go stale", func() bool { return clk.Waiters() == 1 })
	clk.Step(maxAge - MinInterval)
	time.Sleep(20 * time.Millisecond)
	if got := gauge(t, "run"); got[Known] != 1 {
		t.Fatalf("recounted before the sample went stale: %v", got)
	}
	clk.Step(time.Nanosecond)
	waitFor("stale once the sample is older than the limit", func() bool { return gauge(t, "run")[Stale] == 1 })
	cancel()
	<-done
}

// TestStart wires a Tracker to a running Node informer: it counts the
// nodes once synced and follows a Node update within a second or so.
func TestStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Now()
	client := fake.NewClientset(node("a", now), node("b", time.Time{}))
	factory := informers.NewSharedInformerFactory(client, 0)
	h, err := frameworkruntime.NewFramework(ctx, nil, nil, frameworkruntime.WithInformerFactory(factory))
	if err != nil {
		t.Fatal(err)
	}
	if Start(ctx, nil, pidConfig()) != nil {
		t.Error("Start without a handle returned a Tracker")
	}
	if Start(ctx, h, pidConfig()) == nil {
		t.Fatal("Start returned no Tracker")
	}
	factory.Start(ctx.Done())
	defer func() {
		cancel()
		factory.Shutdown()
	}()
	poll := func(what string, want map[State]int) {
		t.Helper()
		var got map[State]int
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			got = gauge(t, "")
			return fmt.Sprint(got) == fmt.Sprint(want), nil
		}); err != nil {
			t.Fatalf("%s: gauge %v, want %v", what, got, want)
		}
	}
	poll("after sync", map[State]int{Known: 1, Unknown: 1, Stale: 0, Invalid: 0})
	if _, err := client.CoreV1().Nodes().Update(ctx, node("b", now, pidstats.AnnotationUsed, "-3"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("after node b's update", map[State]int{Known: 1, Unknown: 0, Stale: 0, Invalid: 1})
	if err := client.CoreV1().Nodes().Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll("after node a's deletion", map[State]int{Known: 0, Unknown: 0, Stale: 0, Invalid: 1})
}

// BenchmarkUpdate is one recount of 5,000 nodes: unchanged since the last
// (the Node objects read already), and with every object new (a read of
// each, as after a rollout of the node agent).
func BenchmarkUpdate(b *testing.B) {
	const n = 5000
	nodes := make([]*corev1.Node, n)
	for i := range nodes {
		nodes[i] = node(fmt.Sprintf("node-%04d", i), t0)
	}
	b.Run("unchanged", func(b *testing.B) {
		tr := New(klog.Logger{}, "bench", pidConfig()) // the zero Logger discards
		tr.Update(t0, nodes)
		b.ReportAllocs()
		for b.Loop() {
			tr.Update(t0.Add(time.Second), nodes)
		}
	})
	b.Run("all-new", func(b *testing.B) {
		tr := New(klog.Logger{}, "bench", pidConfig()) // the zero Logger discards
		tr.Update(t0, nodes)
		fresh := make([]*corev1.Node, n)
		b.ReportAllocs()
		for b.Loop() {
			b.StopTimer()
			for i, nd := range nodes {
				fresh[i] = nd.DeepCopy()
			}
			b.StartTimer()
			tr.Update(t0.Add(time.Second), fresh)
		}
	})
}
