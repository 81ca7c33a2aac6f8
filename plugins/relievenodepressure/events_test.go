package relievenodepressure

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clientgotesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/descheduler/evictions"
	"sigs.k8s.io/descheduler/pkg/framework/plugins/defaultevictor"
	frameworktesting "sigs.k8s.io/descheduler/pkg/framework/testing"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure/eventrecorder"
)

// TestEventsAreWrittenAtExit builds the plugin as the descheduler does
// (New, with its recorder) and reads the Node's Warning Event from the API
// after eventrecorder.FlushAll, as the command calls it before a one-shot run exits.
func TestEventsAreWrittenAtExit(t *testing.T) {
	hog := testPod("hog", "n1", ownedByDaemonSet)
	n1 := listed(pidNode("n1", 10000, 9900), map[*v1.Pod]int64{hog: 3000})
	client := fake.NewClientset(objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{hog})...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handle, _, err := frameworktesting.InitFrameworkHandle(ctx, client, evictions.NewOptions(), defaultevictor.DefaultEvictorArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := New(ctx, &RelieveNodePressureArgs{PressureSamples: ptr.To[int32](1)}, handle)
	if err != nil {
		t.Fatal(err)
	}
	handle.SharedInformerFactory().Start(ctx.Done())
	handle.SharedInformerFactory().WaitForCacheSync(ctx.Done())
	p := pl.(*RelieveNodePressure)
	p.now = func() time.Time { return now }
	if st := p.Deschedule(ctx, []*v1.Node{n1, spareNode("n2")}); st != nil && st.Err != nil {
		t.Fatal(st.Err)
	}
	// A one-shot run's context ends with its run; the command then flushes.
	cancel()
	logger, _ := ktesting.NewTestContext(t)
	eventrecorder.FlushAll(logger, 10*time.Second)
	list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d Events written at exit, want 1", len(list.Items))
	}
	ev := list.Items[0]
	if ev.Reason != ReasonNodePressureUnrelievable || ev.Type != v1.EventTypeWarning || ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "n1" ||
		ev.ReportingController != EventReportingController || !strings.Contains(ev.Message, "default/hog (3000 PIDs)") {
		t.Fatalf("Event %+v, want a Warning %s on Node n1 naming default/hog", ev, ReasonNodePressureUnrelievable)
	}
}

// stormEnv is an unrelievable node (a DaemonSet pod, which the kubelet
// would evict last, holds its PIDs) whose
// pid-pods annotation does not parse, with three pods whose pids and
// delete-priority annotations do not parse: every run finds the node
// unrelievable and every annotation malformed. Its recorder writes to sink
// (the env's fake clientset where nil) on a clock that a test moves one second per run (each
// reading moves it a microsecond, so that Events named by the time differ).
func stormEnv(t *testing.T, limits eventrecorder.Limits, sink *fake.Clientset) (*env, *testingclock.SimpleIntervalClock, []*v1.Node) {
	t.Helper()
	RegisterMetrics()
	// The hog ranks last in the kubelet's order (a higher priority), so
	// that the walk reaches the small pods before it ends at the hog.
	hog := testPod("hog", "n1", ownedByDaemonSet, pids(3000), specPriority(1000))
	pods := []*v1.Pod{hog}
	for _, name := range []string{"small-a", "small-b", "small-c"} {
		pods = append(pods, testPod(name, "n1", annotate(pidstats.AnnotationPodPIDs, "lots"), priority("high")))
	}
	n1 := pidNode("n1", 10000, 9900)
	n1.Annotations[pidstats.AnnotationPIDPods] = "not a list"
	nodes := []*v1.Node{n1, spareNode("n2")}
	e := newEnv(t, setup{}, objects(nodes, pods)...)
	clk := &testingclock.SimpleIntervalClock{Time: now, Duration: time.Microsecond}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if sink == nil {
		sink = e.client
	}
	e.plugin.recorder = newRecorder(ctx, sink, limits, clk)
	return e, clk, nodes
}

// stormKeys are the (object, reason) pairs stormEnv warns about.
var stormKeys = []string{
	"Node/n1/" + ReasonNodePressureUnrelievable, "Node/n1/" + ReasonMalformedPIDPods,
	"Pod/small-a/" + ReasonMalformedPodPIDs, "Pod/small-a/" + ReasonMalformedDeletePriority,
	"Pod/small-b/" + ReasonMalformedPodPIDs, "Pod/small-b/" + ReasonMalformedDeletePriority,
	"Pod/small-c/" + ReasonMalformedPodPIDs, "Pod/small-c/" + ReasonMalformedDeletePriority,
}

// eventWrites counts the creates and patches of core/v1 Events on client.
type eventWrites struct {
	mu              sync.Mutex
	creates, writes int
}

func countEventWrites(client *fake.Clientset) *eventWrites {
	w := &eventWrites{}
	for _, verb := range []string{"create", "patch"} {
		client.PrependReactor(verb, "events", func(action clientgotesting.Action) (bool, runtime.Object, error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.writes++
			if action.GetVerb() == "create" {
				w.creates++
			}
			return false, nil, nil
		})
	}
	return w
}

func (w *eventWrites) get() (creates, writes int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.creates, w.writes
}

// flushed waits for the plugin's queued Events to be written.
func flushed(t *testing.T, e *env) {
	t.Helper()
	if !e.plugin.recorder.(*eventrecorder.Recorder).Flush(time.After(10 * time.Second)) {
		t.Fatal("the Events were not written within 10 s")
	}
}

// storedEvents returns the core/v1 Events on the fake clientset by
// "Kind/name/reason".
func storedEvents(t *testing.T, client *fake.Clientset) map[string][]v1.Event {
	t.Helper()
	list, err := client.CoreV1().Events(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]v1.Event{}
	for _, ev := range list.Items {
		k := ev.InvolvedObject.Kind + "/" + ev.InvolvedObject.Name + "/" + ev.Reason
		out[k] = append(out[k], ev)
	}
	return out
}

// 120 runs, one a second, on an unrelievable node with malformed
// annotations: one Event object per (object, reason), however many runs
// repeat it and however its note's figures move, written once per window
// with the count of every repeat so far and the latest note.
func TestRepeatedWarningsMergeIntoOneEventPerObjectAndReason(t *testing.T) {
	limits := eventrecorder.DefaultLimits
	limits.Window = 30 * time.Second
	e, clk, nodes := stormEnv(t, limits, nil)
	writes := countEventWrites(e.client)
	const runs = 120
	for run := range runs {
		// The sample moves between runs, and the note's figures with it.
		nodes[0].Annotations[pidstats.AnnotationUsed] = fmt.Sprint(9900 + run%2*50)
		if got := e.run(t, nodes...); len(got) != 0 {
			t.Fatalf("run %d evicted %v, want none", run+1, got)
		}
		flushed(t, e)
		clk.Time = clk.Time.Add(time.Second)
	}
	stored := storedEvents(t, e.client)
	if len(stored) != len(stormKeys) {
		t.Errorf("Events for %d (object, reason) pairs, want %d: %v", len(stored), len(stormKeys), slices.Sorted(maps.Keys(stored)))
	}
	// A write when the window's token is back: runs 1, 31, 61 and 91.
	windows := runs / int(limits.Window/time.Second)
	lastWrite := (windows-1)*int(limits.Window/time.Second) + 1
	for _, k := range stormKeys {
		evs := stored[k]
		if len(evs) != 1 {
			t.Errorf("%s: %d Event objects after %d runs, want 1", k, len(evs), runs)
			continue
		}
		if evs[0].Count != int32(lastWrite) {
			t.Errorf("%s: count %d, want %d (the runs up to its last write)", k, evs[0].Count, lastWrite)
		}
		if evs[0].ReportingController != EventReportingController || evs[0].Source.Component != EventReportingController || evs[0].Type != v1.EventTypeWarning {
			t.Errorf("%s: reported by %q (source %q), type %s", k, evs[0].ReportingController, evs[0].Source.Component, evs[0].Type)
		}
	}
	// The note of run 91, the last written.
	if n := stored["Node/n1/"+ReasonNodePressureUnrelievable]; len(n) == 1 &&
		(!strings.Contains(n[0].Message, "default/hog (3000 PIDs): the evictor's filter keeps it") || !strings.Contains(n[0].Message, "PIDs 9900/10000 used")) {
		t.Errorf("note %q does not name the hog and why, with the latest figures", n[0].Message)
	}
	creates, all := writes.get()
	if creates != len(stormKeys) || all != windows*len(stormKeys) {
		t.Errorf("%d creates and %d writes in all, want %d and %d (one per pair and window)", creates, all, len(stormKeys), windows*len(stormKeys))
	}
}

// Many (object, reason) pairs at once: at most perRun written in a run, and
// no more than the token bucket allows over time.
func TestEventWritesAreBoundedPerRunAndWindow(t *testing.T) {
	limits := eventrecorder.DefaultLimits
	limits.PerRun, limits.PerWindow = 3, 6
	e, clk, nodes := stormEnv(t, limits, nil)
	writes := countEventWrites(e.client)
	before, err := testutil.GetCounterMetricValue(EventsDroppedTotal)
	if err != nil {
		t.Fatal(err)
	}
	last := 0
	for run := range 20 {
		e.run(t, nodes...)
		flushed(t, e)
		_, all := writes.get()
		if all-last > limits.PerRun {
			t.Fatalf("run %d wrote %d Events, want at most %d", run+1, all-last, limits.PerRun)
		}
		last = all
		clk.Time = clk.Time.Add(time.Second)
	}
	// 20 s of a 5-minute window refill 6*20/300 tokens: none whole.
	if _, all := writes.get(); all != limits.PerRun {
		t.Errorf("%d Events written in 20 s, want %d (the bucket's burst)", all, limits.PerRun)
	}
	if after, _ := testutil.GetCounterMetricValue(EventsDroppedTotal); after-before != float64(len(stormKeys)-limits.PerRun) {
		t.Errorf("dropped %v Events, want %d (the first run's excess; repeats of a written pair are merged, not dropped)", after-before, len(stormKeys)-limits.PerRun)
	}
	// A window later the bucket has refilled its rate: the other pairs
	// get their Events, up to perRun a run.
	clk.Time = clk.Time.Add(limits.Window)
	e.run(t, nodes...)
	flushed(t, e)
	if _, all := writes.get(); all != 2*limits.PerRun {
		t.Errorf("%d Events written after a window, want %d", all, 2*limits.PerRun)
	}
}

// A run long enough for the token bucket to refill still writes at most
// perRun Events.
func TestEventWritesPerRunHoldInALongRun(t *testing.T) {
	limits := eventrecorder.DefaultLimits
	limits.PerRun, limits.PerWindow = 3, 3000
	e, clk, nodes := stormEnv(t, limits, nil)
	// Every reading of the clock is a tenth of a second later: the bucket
	// gains a token a reading.
	clk.Duration = 100 * time.Millisecond
	writes := countEventWrites(e.client)
	e.run(t, nodes...)
	flushed(t, e)
	if _, all := writes.get(); all != limits.PerRun {
		t.Errorf("a long run wrote %d Events, want %d", all, limits.PerRun)
	}
}

// The API server does not answer Event writes: Deschedule returns at once
// all the same, run after run, and the Events are written when it answers
// again (eventrecorder.FlushAll, as the command calls it at exit, waits for them).
func TestDescheduleDoesNotWaitForTheEventSink(t *testing.T) {
	// The fake clientset serves one call at a time: the blocked sink is a
	// clientset of its own, so that the run's other calls are served.
	sink := fake.NewClientset()
	e, clk, nodes := stormEnv(t, eventrecorder.DefaultLimits, sink)
	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	sink.PrependReactor("create", "events", func(clientgotesting.Action) (bool, runtime.Object, error) {
		<-release
		return false, nil, nil
	})
	for run := range 5 {
		start := time.Now()
		e.run(t, nodes...)
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("run %d took %v with the Event sink blocked", run+1, d)
		}
		clk.Time = clk.Time.Add(time.Second)
	}
	logger, _ := ktesting.NewTestContext(t)
	start := time.Now()
	eventrecorder.FlushAll(logger, 200*time.Millisecond)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("FlushAll took %v, want its timeout", d)
	}
	releaseOnce.Do(func() { close(release) })
	eventrecorder.FlushAll(logger, 10*time.Second)
	if stored := storedEvents(t, sink); len(stored) != len(stormKeys) {
		t.Errorf("Events for %d (object, reason) pairs written once the sink answered, want %d", len(stored), len(stormKeys))
	}
}

// Every Event accepted is written, its note within the API's limit; a
// full queue drops, counted, and never leaves a later flush waiting.
func TestRecorderCountsWhatItDrops(t *testing.T) {
	RegisterMetrics()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := fake.NewClientset()
	release := make(chan struct{})
	var mu sync.Mutex
	var notes []string
	client.PrependReactor("create", "events", func(action clientgotesting.Action) (bool, runtime.Object, error) {
		<-release
		mu.Lock()
		defer mu.Unlock()
		notes = append(notes, action.(clientgotesting.CreateAction).GetObject().(*v1.Event).Message)
		return true, nil, nil
	})
	limits := eventrecorder.DefaultLimits
	limits.PerRun, limits.PerWindow, limits.MaxQueued = 100, 100, 5
	r := newRecorder(ctx, client, limits, &testingclock.SimpleIntervalClock{Time: now, Duration: time.Microsecond})
	dropped := func() float64 {
		v, err := testutil.GetCounterMetricValue(EventsDroppedTotal)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := dropped()
	// The writer takes the first and blocks on it; the queue holds
	// maxQueued more; the rest are dropped.
	const burst = 10
	r.Eventf(pidNode("n0", 10000, 100), nil, "Warning", "Test", "Test", "%s", strings.Repeat("x", 5000))
	time.Sleep(100 * time.Millisecond)
	for i := range burst - 1 {
		r.Eventf(pidNode("n"+string(rune('1'+i)), 10000, 100), nil, "Warning", "Test", "Test", "short")
	}
	if got := dropped() - before; got != burst-1-float64(limits.MaxQueued) {
		t.Errorf("dropped %v Events, want %d", got, burst-1-limits.MaxQueued)
	}
	close(release)
	if !r.Flush(time.After(5 * time.Second)) {
		t.Fatal("flush waited for dropped Events")
	}
	mu.Lock()
	written, long := len(notes), notes[0]
	mu.Unlock()
	if written != limits.MaxQueued+1 {
		t.Errorf("wrote %d Events, want %d", written, limits.MaxQueued+1)
	}
	if len(long) > eventrecorder.MaxNote || !strings.HasSuffix(long, "…") {
		t.Errorf("note of %d bytes, want it cut to at most %d", len(long), eventrecorder.MaxNote)
	}
}
