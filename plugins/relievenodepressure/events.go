package relievenodepressure

import (
	"context"
	"sync"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
)

// flushTimeout bounds how long a Deschedule call waits for its Events to be
// written.
const flushTimeout = 10 * time.Second

// recorder records the plugin's Events through a client-go events
// broadcaster and can wait until every Event it recorded is written: the
// descheduler exits right after a one-shot run (--descheduling-interval=0,
// as the CronJob runs it), and an Event still queued in a broadcaster would
// be lost with the process. Deschedule flushes before it returns.
//
// The broadcaster's own sink writer is asynchronous and merges repeats into
// series written later, so the recorder writes each Event itself from a
// watcher on the broadcaster, and counts what is in flight.
type recorder struct {
	events.EventRecorder
	broadcaster events.EventBroadcaster
	pending     sync.WaitGroup
	stop        func()
}

// newRecorder returns a recorder writing to client's events.k8s.io API.
// In dry-run mode the handle's client is the descheduler's sandbox, so a
// dry run writes no Events to the cluster, as upstream's evictor does.
func newRecorder(ctx context.Context, client clientset.Interface) (*recorder, error) {
	sink := &events.EventSinkImpl{Interface: client.EventsV1()}
	broadcaster := events.NewBroadcaster(sink)
	r := &recorder{broadcaster: broadcaster}
	logger := klog.FromContext(ctx)
	stop, err := broadcaster.StartEventWatcher(func(obj runtime.Object) {
		defer r.pending.Done()
		ev, ok := obj.(*eventsv1.Event)
		if !ok {
			return
		}
		wctx, cancel := context.WithTimeout(context.Background(), flushTimeout)
		defer cancel()
		if _, err := sink.Create(wctx, ev.DeepCopy()); err != nil {
			logger.Error(err, "Could not write Event", "reason", ev.Reason, "regarding", ev.Regarding.Name)
		}
	})
	if err != nil {
		return nil, err
	}
	r.stop = stop
	r.EventRecorder = broadcaster.NewRecorder(scheme.Scheme, EventReportingController)
	go func() {
		<-ctx.Done()
		r.flush(logger)
		stop()
		broadcaster.Shutdown()
	}()
	return r, nil
}

// Eventf records an Event; flush waits for it to be written.
func (r *recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...interface{}) {
	r.pending.Add(1)
	r.EventRecorder.Eventf(regarding, related, eventtype, reason, action, note, args...)
}

// flush waits, at most flushTimeout, until every Event recorded so far is
// written (or failed to be). An Event the broadcaster dropped (its queue
// holds 1000) ends the wait at the timeout.
func (r *recorder) flush(logger klog.Logger) {
	done := make(chan struct{})
	go func() {
		r.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(flushTimeout):
		logger.Info("Warning: gave up waiting for Events to be written", "timeout", flushTimeout)
	}
}
