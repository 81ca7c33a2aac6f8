// Package watchcache holds the life of the node agent's watches: informers
// started by their first read, read from their caches so that a tick costs
// the API server nothing, stopped by Stop, and able to say why they have
// not listed yet (a refused or unserved resource never syncs). Each watch
// (a node's CiliumNode or NodeNetworkConfig, Calico's IPAM objects, the
// node's pods) is a Watch over informers of its own.
package watchcache

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
)

// ErrNotSynced is what Synced returns until every informer has completed
// its first list and none has failed yet.
var ErrNotSynced = errors.New("the watch has not completed its first list")

// Watch runs the informers that build makes, from the first Synced to Stop.
// An informer cannot be restarted once stopped, so every start builds new
// ones.
//
// Safe for concurrent use.
type Watch struct {
	// SyncWait is how long Synced waits for the first lists; zero returns
	// at once. Set it before the first Synced.
	SyncWait time.Duration
	// Detached runs the informers until Stop, whatever becomes of the
	// context of the Synced that started them; otherwise they also end with
	// it, and the next Synced starts new ones.
	Detached bool

	what  string
	build func() []cache.SharedIndexInformer

	mu      sync.Mutex
	running *run
}

type run struct {
	informers []cache.SharedIndexInformer
	cancel    context.CancelFunc
	done      chan struct{}

	mu      sync.Mutex
	lastErr error // of the last failed list or watch
}

// New returns a Watch of what (named in its errors) over the informers
// build makes. Nothing is requested before the first Synced.
func New(what string, build func() []cache.SharedIndexInformer) *Watch {
	return &Watch{what: what, build: build}
}

// Synced starts the informers if they are not running, waits up to
// SyncWait for their first lists, and returns them once every one has
// listed. Until then it returns the last list or watch error, wrapped
// naming the watch, or ErrNotSynced where none failed.
func (w *Watch) Synced(ctx context.Context) ([]cache.SharedIndexInformer, error) {
	r := w.start(ctx)
	synced := func() bool {
		for _, i := range r.informers {
			if !i.HasSynced() {
				return false
			}
		}
		return true
	}
	if !synced() && w.SyncWait > 0 {
		waitCtx, cancel := context.WithTimeout(ctx, w.SyncWait)
		cache.WaitForCacheSync(waitCtx.Done(), synced)
		cancel()
	}
	if !synced() {
		r.mu.Lock()
		err := r.lastErr
		r.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("watching %s: %w", w.what, err)
		}
		return nil, ErrNotSynced
	}
	return r.informers, nil
}

// Stop ends the informers, if they run, and returns once their requests
// have ended. A later Synced starts new ones.
func (w *Watch) Stop() {
	w.mu.Lock()
	r := w.running
	w.running = nil
	w.mu.Unlock()
	if r != nil {
		r.cancel()
		<-r.done
	}
}

func (w *Watch) start(ctx context.Context) *run {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running != nil {
		select {
		case <-w.running.done: // its context ended: start anew
		default:
			return w.running
		}
	}
	if w.Detached {
		ctx = context.WithoutCancel(ctx)
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &run{informers: w.build(), cancel: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for _, i := range r.informers {
		// Keeps client-go's logging of the failure, and the failure for
		// Synced.
		_ = i.SetWatchErrorHandlerWithContext(func(ctx context.Context, reflector *cache.Reflector, err error) {
			r.mu.Lock()
			r.lastErr = err
			r.mu.Unlock()
			cache.DefaultWatchErrorHandler(ctx, reflector, err)
		})
		wg.Go(func() { i.RunWithContext(ctx) })
	}
	go func() {
		wg.Wait()
		close(r.done)
	}()
	w.running = r
	return r
}
