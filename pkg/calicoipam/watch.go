package calicoipam

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// ErrNotSynced is what Watch.Usage returns until every watch has completed
// its first list.
var ErrNotSynced = errors.New("the watches of Calico's IPAM objects have not completed their first list")

// Watch keeps Calico's IPAM objects in a cache, filled by a list and watch
// of each resource, so that counting a node's figures costs the API server
// nothing per tick.
//
// IPAMBlocks are cluster-scoped, named after their CIDR, and carry the node
// only in spec.affinity, which the API server cannot select on (a CRD
// selects on metadata.name and its declared selectableFields; Calico's
// declare none). So every agent lists and watches every block: one block
// write (each pod start or stop on any node) is one watch event to every
// agent. What each agent keeps is bounded: a transform replaces every
// block, as it arrives, by its Block summary (some 400 bytes), never the
// object with its allocation attributes. The watch runs only while it is
// used: Usage starts it, Stop ends it.
//
// Safe for concurrent use.
type Watch struct {
	client dynamic.Interface
	node   string

	// SyncWait is how long Usage waits for the first lists; zero returns
	// ErrNotSynced at once. Set it before the first Usage.
	SyncWait time.Duration

	mu      sync.Mutex
	running *runningWatch
}

type runningWatch struct {
	blocks, pools, configs cache.SharedIndexInformer
	cancel                 context.CancelFunc
	done                   chan struct{}

	mu      sync.Mutex
	lastErr error
}

// NewWatch returns a Watch counting for the node of that name. Nothing is
// requested before the first Usage.
func NewWatch(client dynamic.Interface, node string) *Watch {
	return &Watch{client: client, node: node}
}

// blockSummary is what the block informer's store keeps of an IPAMBlock.
type blockSummary struct {
	metav1.ObjectMeta
	Block
	Err error
}

func (w *Watch) summarize(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone
	}
	s := &blockSummary{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), ResourceVersion: u.GetResourceVersion()}}
	b, err := u.MarshalJSON()
	if err == nil {
		s.Block, err = ParseBlock(b, w.node)
	}
	s.Err = err
	return s, nil
}

// Usage counts the node's figures from the cache, with the network's
// families. It starts the watches if they are not running, bound to ctx.
func (w *Watch) Usage(ctx context.Context, fams Families) (Usage, error) {
	r := w.start(ctx)
	synced := func() bool { return r.blocks.HasSynced() && r.pools.HasSynced() && r.configs.HasSynced() }
	if !synced() && w.SyncWait > 0 {
		waitCtx, cancel := context.WithTimeout(ctx, w.SyncWait)
		cache.WaitForCacheSync(waitCtx.Done(), synced)
		cancel()
	}
	if !synced() {
		if err := r.lastError(); err != nil {
			return Usage{}, fmt.Errorf("watching Calico's IPAM objects: %w", err)
		}
		return Usage{}, ErrNotSynced
	}
	var blocks []Block
	for _, o := range r.blocks.GetStore().List() {
		s, ok := o.(*blockSummary)
		if !ok {
			return Usage{}, fmt.Errorf("an IPAMBlock is cached as %T", o)
		}
		if s.Err != nil {
			return Usage{}, s.Err
		}
		blocks = append(blocks, s.Block)
	}
	var pools []Pool
	for _, o := range r.pools.GetStore().List() {
		b, err := o.(*unstructured.Unstructured).MarshalJSON()
		if err != nil {
			return Usage{}, err
		}
		p, err := ParsePool(b)
		if err != nil {
			return Usage{}, err
		}
		pools = append(pools, p)
	}
	// Calico picks pools in no set order; a fixed one keeps the figures
	// stable when maxBlocksPerHost splits the claimable blocks.
	slices.SortFunc(pools, func(a, b Pool) int { return a.CIDR.Addr().Compare(b.CIDR.Addr()) })
	cfg := DefaultConfig
	if o, ok, err := r.configs.GetStore().GetByKey(IPAMConfigName); err != nil {
		return Usage{}, err
	} else if ok {
		b, err := o.(*unstructured.Unstructured).MarshalJSON()
		if err != nil {
			return Usage{}, err
		}
		if cfg, err = ParseConfig(b); err != nil {
			return Usage{}, err
		}
	}
	return Count(w.node, fams, blocks, pools, cfg)
}

// Stop ends the watches, if they run, and returns once their requests have
// ended. A later Usage starts new ones.
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

func (w *Watch) start(ctx context.Context) *runningWatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running != nil {
		select {
		case <-w.running.done:
		default:
			return w.running
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	r := &runningWatch{cancel: cancel, done: make(chan struct{})}
	inf := func(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
		i := dynamicinformer.NewFilteredDynamicInformer(w.client, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
		_ = i.SetWatchErrorHandlerWithContext(func(ctx context.Context, reflector *cache.Reflector, err error) {
			r.mu.Lock()
			r.lastErr = fmt.Errorf("%s: %w", gvr.Resource, err)
			r.mu.Unlock()
			cache.DefaultWatchErrorHandler(ctx, reflector, err)
		})
		return i
	}
	r.blocks, r.pools, r.configs = inf(IPAMBlocks), inf(IPPools), inf(IPAMConfigs)
	_ = r.blocks.SetTransform(w.summarize)
	var wg sync.WaitGroup
	for _, i := range []cache.SharedIndexInformer{r.blocks, r.pools, r.configs} {
		wg.Go(func() { i.RunWithContext(ctx) })
	}
	go func() {
		wg.Wait()
		close(r.done)
	}()
	w.running = r
	return r
}

func (r *runningWatch) lastError() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}
