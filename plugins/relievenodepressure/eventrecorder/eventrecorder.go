// Package eventrecorder is RelieveNodePressure's Event scheme: an
// events.EventRecorder whose Eventf never waits on the API server and
// whose writes are bounded so that an Event repeated every run never
// storms it. It knows nothing of the relief it reports on, which is why it
// is a package of its own: its contract (one Event per object and reason,
// a bound per run and per window, nothing dropped silently) is its API.
package eventrecorder

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// RelieveNodePressure runs every second in the shipped Deployment and finds
// the same unrelievable node and the same malformed annotations every run.
// Its Events are bounded so that repeats never storm the API server:
//
//   - every (object, reason) has one Event, whatever its note: a repeat is
//     counted into that Event's count and its note replaced by the latest;
//   - an (object, reason) is written (created, or patched with its count)
//     at most once per eventWindow;
//   - at most maxEventWritesPerRun Events are written per run, and a
//     token bucket of that size refilled at maxEventWritesPerWindow per
//     eventWindow bounds them over time.
//
// The first two are client-go's core/v1 EventCorrelator: its aggregator,
// made to merge every repeat of a reason on an object (maxEvents 1, the
// latest note kept), and its spam filter, keyed by object and reason. The
// log line and headroom_invalid_annotations_total or
// headroom_relieve_node_pressure_nodes_total still record every occurrence.
const (
	eventWindow             = 5 * time.Minute
	maxEventWritesPerRun    = 20
	maxEventWritesPerWindow = 100
)

// eventWriteTimeout bounds one write of an Event.
const eventWriteTimeout = 10 * time.Second

// maxQueuedEvents bounds the Events waiting to be written (the bounds above
// keep it far from full unless the API server stops answering); more are
// dropped, logged at the next BeginRun and passed to New's onDrop.
const maxQueuedEvents = 100

// MaxNote is the API server's limit on an Event's note.
const MaxNote = 1024

// Limits are a Recorder's bounds; tests shorten the window.
type Limits struct {
	// Window is how often one (object, reason) is written at most, and
	// the period PerWindow counts over.
	Window time.Duration
	// PerRun bounds the writes between two BeginRun calls, and is the
	// token bucket's burst; PerWindow is its refill over Window.
	PerRun, PerWindow int
	// MaxQueued bounds the Events waiting to be written.
	MaxQueued int
	// WriteTimeout bounds one write.
	WriteTimeout time.Duration
	// CorrelatorSize is the correlator's LRU cache size (0: client-go's).
	CorrelatorSize int
}

// DefaultLimits are the bounds the plugin runs with (the constants above).
var DefaultLimits = Limits{
	Window: eventWindow, PerRun: maxEventWritesPerRun, PerWindow: maxEventWritesPerWindow,
	MaxQueued: maxQueuedEvents, WriteTimeout: eventWriteTimeout,
}

// Recorder writes the plugin's Events (core/v1, as the correlator works on
// them; the events.k8s.io API shows the same objects). Eventf never waits
// on the API server: Events are written by one goroutine that lives as long
// as the plugin instance, across runs. The descheduler exits right after a
// one-shot run (--descheduling-interval=0, as the CronJob runs it), so the
// command calls FlushAll before it exits, and the writer drains its
// queue when the plugin's context ends.
type Recorder struct {
	logger     klog.Logger
	client     clientset.Interface
	source     v1.EventSource
	limits     Limits
	clock      clock.PassiveClock
	onDrop     func()
	correlator *record.EventCorrelator
	bucket     flowcontrol.PassiveRateLimiter
	queue      chan write

	mu sync.Mutex
	// writtenThisRun counts the writes queued since BeginRun.
	writtenThisRun int
	// dropped counts the Events the bounds or the full queue dropped
	// since the last BeginRun, which logs them once.
	dropped  int
	inFlight int
	closed   bool
	// idle is closed while nothing is in flight.
	idle chan struct{}
}

// write is an Event to create, or to patch with patch when its count is
// above 1.
type write struct {
	event *v1.Event
	patch []byte
}

var _ events.EventRecorder = &Recorder{}

// live are the recorders whose writers run, for FlushAll.
var live = struct {
	sync.Mutex
	recorders map[*Recorder]struct{}
}{recorders: map[*Recorder]struct{}{}}

// New returns a Recorder reporting as component, writing to client until ctx ends, then
// writing what it holds. In dry-run mode the handle's client is the
// descheduler's sandbox, so a dry run writes no Events to the cluster, as
// upstream's evictor does.
//
// onDrop, when not nil, is called for every Event the bounds or the full
// queue drop (the plugin counts them in a metric).
func New(ctx context.Context, client clientset.Interface, component string, limits Limits, clk clock.PassiveClock, onDrop func()) *Recorder {
	host, _ := os.Hostname()
	r := &Recorder{
		logger: klog.FromContext(ctx),
		client: client,
		source: v1.EventSource{Component: component, Host: host},
		onDrop: onDrop,
		limits: limits,
		clock:  clk,
		correlator: record.NewEventCorrelatorWithOptions(record.CorrelatorOptions{
			LRUCacheSize: limits.CorrelatorSize,
			// Every repeat of a reason on an object merges into one
			// Event, whatever its note (the figures in a note change
			// with every sample), which shows the latest note.
			KeyFunc:     record.EventAggregatorByReasonFunc,
			MaxEvents:   1,
			MessageFunc: func(ev *v1.Event) string { return ev.Message },
			// One write per object and reason per window.
			SpamKeyFunc: objectAndReason,
			BurstSize:   1,
			QPS:         float32(1 / limits.Window.Seconds()),
			Clock:       clk,
		}),
		bucket: flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(
			float32(float64(limits.PerWindow)/limits.Window.Seconds()), limits.PerRun, clk),
		queue: make(chan write, limits.MaxQueued),
		idle:  make(chan struct{}),
	}
	close(r.idle)
	live.Lock()
	live.recorders[r] = struct{}{}
	live.Unlock()
	go r.writeUntil(ctx)
	return r
}

// objectAndReason keys the correlator's spam filter: the aggregator's key,
// which is the object, the type and the reason (upstream's own spam key
// leaves the reason out, so one reason's repeats would silence another).
func objectAndReason(ev *v1.Event) string {
	key, _ := record.EventAggregatorByReasonFunc(ev)
	return key
}

// writeUntil writes the queued Events until ctx ends, then those still
// queued, and stops.
func (r *Recorder) writeUntil(ctx context.Context) {
	defer func() {
		live.Lock()
		delete(live.recorders, r)
		live.Unlock()
	}()
	for {
		select {
		case w := <-r.queue:
			r.write(w)
		case <-ctx.Done():
			r.mu.Lock()
			r.closed = true
			r.mu.Unlock()
			for {
				select {
				case w := <-r.queue:
					r.write(w)
				default:
					return
				}
			}
		}
	}
}

// write patches the Event's count, or creates it (also where the Event to
// patch is gone: the API server's Event TTL, or a write dropped earlier).
func (r *Recorder) write(w write) {
	defer r.done()
	ctx, cancel := context.WithTimeout(context.Background(), r.limits.WriteTimeout)
	defer cancel()
	evs := r.client.CoreV1().Events(w.event.Namespace)
	var err error
	if w.event.Count > 1 {
		_, err = evs.Patch(ctx, w.event.Name, types.StrategicMergePatchType, w.patch, metav1.PatchOptions{})
	}
	if w.event.Count <= 1 || apierrors.IsNotFound(err) {
		ev := w.event.DeepCopy()
		ev.ResourceVersion = ""
		_, err = evs.Create(ctx, ev, metav1.CreateOptions{})
	}
	if err != nil {
		r.logger.Error(err, "Could not write Event", "reason", w.event.Reason, "object", klog.KRef(w.event.InvolvedObject.Namespace, w.event.InvolvedObject.Name))
	}
}

// Eventf records an Event about regarding, within the bounds above; its
// note is cut to the API's limit, so that no Event is refused for its
// length. It never waits on the API server.
func (r *Recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	ref, err := reference.GetReference(scheme.Scheme, regarding)
	if err != nil {
		r.logger.Error(err, "Could not make an Event's reference; not recording it", "reason", reason)
		return
	}
	var relatedRef *v1.ObjectReference
	if related != nil {
		relatedRef, _ = reference.GetReference(scheme.Scheme, related)
	}
	now := metav1.NewTime(r.clock.Now())
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	ev := &v1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: util.GenerateEventName(ref.Name, now.UnixNano()), Namespace: namespace},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             boundedNote(fmt.Sprintf(note, args...)),
		Type:                eventtype,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Source:              r.source,
		ReportingController: r.source.Component,
		ReportingInstance:   r.source.Component + "-" + r.source.Host,
		Action:              action,
		Related:             relatedRef,
	}
	result, err := r.correlator.EventCorrelate(ev)
	if err != nil {
		r.logger.Error(err, "Could not correlate an Event; not recording it", "reason", reason)
		return
	}
	if result.Skip {
		// Counted in the Event's next write.
		return
	}
	out := result.Event
	// The aggregator's Event carries the source only; the rest is ours.
	out.ReportingController, out.ReportingInstance = ev.ReportingController, ev.ReportingInstance
	out.Action, out.Related = ev.Action, ev.Related
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.writtenThisRun >= r.limits.PerRun || !r.bucket.TryAccept() {
		r.drop()
		return
	}
	select {
	case r.queue <- write{event: out, patch: result.Patch}:
		r.writtenThisRun++
		if r.inFlight == 0 {
			r.idle = make(chan struct{})
		}
		r.inFlight++
	default:
		r.drop()
	}
}

// BeginRun starts a run's bound on writes and logs the Events the last run
// dropped.
func (r *Recorder) BeginRun(logger klog.Logger) {
	r.mu.Lock()
	dropped := r.dropped
	r.dropped, r.writtenThisRun = 0, 0
	r.mu.Unlock()
	if dropped > 0 {
		logger.Info("Warning: Events not written, beyond the bounds on Event writes or with too many waiting; their log lines stand",
			"dropped", dropped, "perRun", r.limits.PerRun, "perWindow", r.limits.PerWindow, "window", r.limits.Window)
	}
}

func (r *Recorder) done() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight > 0 {
		r.inFlight--
		if r.inFlight == 0 {
			close(r.idle)
		}
	}
}

// Flush waits until every Event queued so far is written (or failed to
// be), or until deadline.
func (r *Recorder) Flush(deadline <-chan time.Time) bool {
	r.mu.Lock()
	idle := r.idle
	r.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-deadline:
		return false
	}
}

// FlushAll waits, at most timeout, until the Events every Recorder
// instance has queued are written. The descheduler command calls it before
// it exits, so that a one-shot run (the CronJob) loses none; a run itself
// never waits on the API server for its Events.
func FlushAll(logger klog.Logger, timeout time.Duration) {
	live.Lock()
	recorders := make([]*Recorder, 0, len(live.recorders))
	for r := range live.recorders {
		recorders = append(recorders, r)
	}
	live.Unlock()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for _, r := range recorders {
		if !r.Flush(timer.C) {
			logger.Info("Warning: gave up waiting for Events to be written", "timeout", timeout)
			return
		}
	}
}

// boundedNote cuts note to the API server's limit on an Event's note.
func boundedNote(note string) string {
	if len(note) <= MaxNote {
		return note
	}
	return strings.ToValidUTF8(note[:MaxNote-len("…")], "") + "…"
}

// drop counts an Event not written; r.mu is held.
func (r *Recorder) drop() {
	r.dropped++
	if r.onDrop != nil {
		r.onDrop()
	}
}
