package ciliumipam

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// ErrNotSynced is what NodeWatch.Get returns until its watch has completed
// its first list: whether the node has a CiliumNode is not known yet.
var ErrNotSynced = errors.New("the watch of the node's CiliumNode has not completed its first list")

// NodeWatch keeps one node's CiliumNode in a cache, filled by a list and
// watch of that one name (fieldSelector metadata.name=<node>), so that
// reading it costs the API server nothing: one GET per node and tick would
// be some 500 consistent reads per second at 5,000 nodes and 10 s. The
// watch runs only while it is used: Get starts it, Stop ends it.
//
// Safe for concurrent use.
type NodeWatch struct {
	client    dynamic.Interface
	resource  schema.GroupVersionResource
	namespace string
	name      string

	// SyncWait is how long Get waits for a watch's first list; zero
	// returns ErrNotSynced at once. Set it before the first Get.
	SyncWait time.Duration

	mu      sync.Mutex
	running *runningWatch
}

// runningWatch is one run of the informer; an informer cannot be
// restarted once stopped.
type runningWatch struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
	done     chan struct{}

	mu      sync.Mutex
	lastErr error // of the last failed list or watch
}

// NewNodeWatch returns a NodeWatch of the CiliumNode named as the node.
// Nothing is requested before the first Get.
func NewNodeWatch(client dynamic.Interface, nodeName string) *NodeWatch {
	return NewObjectWatch(client, CiliumNodes, metav1.NamespaceAll, nodeName)
}

// NewObjectWatch returns a NodeWatch of another node's object of its own,
// such as Azure CNS's NodeNetworkConfig (namespace kube-system, named as
// the node).
func NewObjectWatch(client dynamic.Interface, resource schema.GroupVersionResource, namespace, name string) *NodeWatch {
	return &NodeWatch{client: client, resource: resource, namespace: namespace, name: name}
}

// Get returns the unstructured content of the node's CiliumNode from the
// watch's cache; the caller must not modify it. It starts the watch if it
// is not running, bound to ctx: it ends with ctx or Stop. Until the
// watch's first list, Get returns ErrNotSynced, or the error of the last
// failed attempt (a NotFound error where the API server does not serve
// CiliumNodes). A node without a CiliumNode is a NotFound error.
func (w *NodeWatch) Get(ctx context.Context) (map[string]any, error) {
	r := w.start(ctx)
	if !r.informer.HasSynced() && w.SyncWait > 0 {
		waitCtx, cancel := context.WithTimeout(ctx, w.SyncWait)
		cache.WaitForCacheSync(waitCtx.Done(), r.informer.HasSynced)
		cancel()
	}
	if !r.informer.HasSynced() {
		if err := r.lastError(); err != nil {
			return nil, fmt.Errorf("watching the %s %s: %w", w.resource.Resource, w.name, err)
		}
		return nil, ErrNotSynced
	}
	key := w.name
	if w.namespace != "" {
		key = w.namespace + "/" + w.name
	}
	obj, exists, err := r.informer.GetStore().GetByKey(key)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(w.resource.GroupResource(), w.name)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("the %s %s is cached as %T", w.resource.Resource, w.name, obj)
	}
	return u.UnstructuredContent(), nil
}

// Stop ends the watch, if it is running, and returns once its requests
// have ended. A later Get starts a new one.
func (w *NodeWatch) Stop() {
	w.mu.Lock()
	r := w.running
	w.running = nil
	w.mu.Unlock()
	if r != nil {
		r.cancel()
		<-r.done
	}
}

func (w *NodeWatch) start(ctx context.Context) *runningWatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running != nil {
		select {
		case <-w.running.done: // its context ended: start anew
		default:
			return w.running
		}
	}
	byName := func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.name).String()
	}
	informer := dynamicinformer.NewFilteredDynamicInformer(w.client, w.resource, w.namespace, 0, cache.Indexers{}, byName).Informer()
	ctx, cancel := context.WithCancel(ctx)
	r := &runningWatch{informer: informer, cancel: cancel, done: make(chan struct{})}
	// Keeps client-go's logging of the failure, and the failure for Get.
	_ = informer.SetWatchErrorHandlerWithContext(func(ctx context.Context, reflector *cache.Reflector, err error) {
		r.mu.Lock()
		r.lastErr = err
		r.mu.Unlock()
		cache.DefaultWatchErrorHandler(ctx, reflector, err)
	})
	go func() {
		defer close(r.done)
		informer.RunWithContext(ctx)
	}()
	w.running = r
	return r
}

func (r *runningWatch) lastError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}
