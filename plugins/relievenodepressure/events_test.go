package relievenodepressure

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clientgotesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
)

// A burst beyond the queue drops Events, counted, and never leaves a later
// flush waiting for them; every Event accepted is written, its note within
// the API's limit.
func TestRecorderCountsWhatItSends(t *testing.T) {
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
		notes = append(notes, action.(clientgotesting.CreateAction).GetObject().(*eventsv1.Event).Note)
		return true, nil, nil
	})
	r := newRecorder(ctx, client)
	logger, _ := ktesting.NewTestContext(t)
	node := pidNode("n1", 10000, 100)
	dropped := func() float64 {
		v, err := testutil.GetCounterMetricValue(EventsDroppedTotal)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := dropped()
	// The writer takes one and blocks on it; the queue holds
	// maxQueuedEvents more; the rest are dropped.
	const burst = maxQueuedEvents + 10
	r.Eventf(node, nil, "Warning", "Test", "Test", "%s", strings.Repeat("x", 5000))
	time.Sleep(100 * time.Millisecond)
	for range burst - 1 {
		r.Eventf(node, nil, "Warning", "Test", "Test", "short")
	}
	if got := dropped() - before; got != burst-1-maxQueuedEvents {
		t.Errorf("dropped %v Events, want %d", got, burst-1-maxQueuedEvents)
	}
	close(release)
	start := time.Now()
	r.flush(logger)
	if d := time.Since(start); d > flushTimeout/2 {
		t.Fatalf("flush took %v: it waited for dropped Events", d)
	}
	mu.Lock()
	written := len(notes)
	long := notes[0]
	mu.Unlock()
	if written != maxQueuedEvents+1 {
		t.Errorf("wrote %d Events, want %d", written, maxQueuedEvents+1)
	}
	if len(long) > maxEventNote || !strings.HasSuffix(long, "…") {
		t.Errorf("note of %d bytes, want it cut to at most %d", len(long), maxEventNote)
	}
	// Nothing is left in flight: the next flush returns at once.
	start = time.Now()
	r.Eventf(node, nil, "Warning", "Test", "Test", "after")
	r.flush(logger)
	if d := time.Since(start); d > flushTimeout/2 {
		t.Fatalf("a later flush took %v", d)
	}
}
