package relievenodepressure

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	"k8s.io/klog/v2"
)

// flushTimeout bounds how long a Deschedule call waits for its Events to be
// written.
const flushTimeout = 10 * time.Second

// maxQueuedEvents bounds the Events waiting to be written; more are
// dropped and counted in EventsDroppedTotal.
const maxQueuedEvents = 1000

// maxEventNote is the API server's limit on an Event's note.
const maxEventNote = 1024

// recorder writes the plugin's Events (events.k8s.io) and can wait until
// every Event it accepted is written: the descheduler exits right after a
// one-shot run (--descheduling-interval=0, as the CronJob runs it), and an
// Event still queued would be lost with the process. Deschedule flushes
// before it returns.
//
// It counts an Event as in flight exactly when it queues it for its writer,
// and drops (and counts) an Event the full queue cannot take, so a burst
// never leaves a later flush waiting for Events that were never going to
// be written. client-go's broadcaster cannot promise that: its watchers
// drop Events when their channel is full, unseen by the sender.
type recorder struct {
	logger     klog.Logger
	controller string
	instance   string
	queue      chan *eventsv1.Event

	mu       sync.Mutex
	inFlight int
	// dropped counts the Events dropped since the last flush, which logs
	// them once.
	dropped int
	// idle is closed while nothing is in flight.
	idle chan struct{}
}

var _ events.EventRecorder = &recorder{}

// newRecorder returns a recorder writing to client's events.k8s.io API
// until ctx ends. In dry-run mode the handle's client is the descheduler's
// sandbox, so a dry run writes no Events to the cluster, as upstream's
// evictor does.
func newRecorder(ctx context.Context, client clientset.Interface) *recorder {
	instance, _ := os.Hostname()
	r := &recorder{
		logger:     klog.FromContext(ctx),
		controller: EventReportingController,
		instance:   EventReportingController + "-" + instance,
		queue:      make(chan *eventsv1.Event, maxQueuedEvents),
		idle:       make(chan struct{}),
	}
	close(r.idle)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-r.queue:
				wctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
				if _, err := client.EventsV1().Events(ev.Namespace).Create(wctx, ev, metav1.CreateOptions{}); err != nil {
					r.logger.Error(err, "Could not write Event", "reason", ev.Reason, "regarding", ev.Regarding.Name)
				}
				cancel()
				r.done()
			}
		}
	}()
	return r
}

// Eventf queues an Event about regarding; its note is cut to the API's
// limit, so that no Event is refused for its length.
func (r *recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	ref, err := reference.GetReference(scheme.Scheme, regarding)
	if err != nil {
		r.logger.Error(err, "Could not make an Event's reference; not recording it", "reason", reason)
		return
	}
	var relatedRef *v1.ObjectReference
	if related != nil {
		relatedRef, _ = reference.GetReference(scheme.Scheme, related)
	}
	now := time.Now()
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	ev := &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: util.GenerateEventName(ref.Name, now.UnixNano()), Namespace: namespace},
		EventTime:           metav1.NewMicroTime(now),
		ReportingController: r.controller,
		ReportingInstance:   r.instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Related:             relatedRef,
		Note:                boundedNote(fmt.Sprintf(note, args...)),
		Type:                eventtype,
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case r.queue <- ev:
		if r.inFlight == 0 {
			r.idle = make(chan struct{})
		}
		r.inFlight++
	default:
		EventsDroppedTotal.Inc()
		r.dropped++
	}
}

func (r *recorder) done() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.inFlight > 0 {
		r.inFlight--
		if r.inFlight == 0 {
			close(r.idle)
		}
	}
}

// flush waits, at most flushTimeout, until every Event queued so far is
// written (or failed to be).
func (r *recorder) flush(logger klog.Logger) {
	r.mu.Lock()
	idle, dropped := r.idle, r.dropped
	r.dropped = 0
	r.mu.Unlock()
	if dropped > 0 {
		logger.Info("Warning: too many Events queued; dropped some", "dropped", dropped, "queue", maxQueuedEvents)
	}
	timer := time.NewTimer(flushTimeout)
	defer timer.Stop()
	select {
	case <-idle:
	case <-timer.C:
		logger.Info("Warning: gave up waiting for Events to be written", "timeout", flushTimeout)
	}
}

// boundedNote cuts note to the API server's limit on an Event's note.
func boundedNote(note string) string {
	if len(note) <= maxEventNote {
		return note
	}
	return strings.ToValidUTF8(note[:maxEventNote-len("…")], "") + "…"
}
