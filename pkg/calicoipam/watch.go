package calicoipam

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/headroom-k8s/headroom/pkg/watchcache"
)

// ErrNotSynced is what Watch.Cluster returns until every watch has
// completed its first list.
var ErrNotSynced = watchcache.ErrNotSynced

// Watch keeps Calico's IPAM objects in a cache, filled by a list and watch
// of each resource (watchcache), and every node's figures summed from them
// (Cluster), recomputed after a change: reading a node's figures costs the
// API server nothing and the reader a map lookup.
//
// IPAMBlocks are cluster-scoped, named after their CIDR, and carry the node
// only in spec.affinity, which the API server cannot select on (a CRD
// selects on metadata.name and its declared selectableFields; Calico's
// declare none). So a watcher sees every block write (each pod start or
// stop on any node): one Watch serves every node, and a process should
// hold one (the scheduler, the descheduler), never one per node. What it
// keeps is bounded: a transform replaces every block, as it arrives, by its
// Block summary, never the object with its allocation attributes. The
// watch runs only while it is used: Cluster starts it, Stop ends it.
//
// Safe for concurrent use.
type Watch struct {
	*watchcache.Watch
	// changes counts the events the informers delivered; a Cluster
	// computed at another count is recomputed.
	changes atomic.Uint64

	mu   sync.Mutex
	last *summary
}

type summary struct {
	changes uint64
	cluster *Cluster
	err     error
}

// NewWatch returns a Watch of Calico's IPAM objects. Nothing is requested
// before the first Cluster.
func NewWatch(client dynamic.Interface) *Watch {
	w := &Watch{}
	changed := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.changes.Add(1) },
		UpdateFunc: func(any, any) { w.changes.Add(1) },
		DeleteFunc: func(any) { w.changes.Add(1) },
	}
	w.Watch = watchcache.New("Calico's IPAM objects", func() []cache.SharedIndexInformer {
		inf := func(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
			i := dynamicinformer.NewFilteredDynamicInformer(client, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
			_, _ = i.AddEventHandler(changed)
			return i
		}
		blocks := inf(IPAMBlocks)
		_ = blocks.SetTransform(summarize)
		// New informers list everything again: count it as a change.
		w.changes.Add(1)
		return []cache.SharedIndexInformer{blocks, inf(IPPools), inf(IPAMConfigs)}
	})
	return w
}

// blockSummary is what the block informer's store keeps of an IPAMBlock.
type blockSummary struct {
	metav1.ObjectMeta
	Block
	Err error
}

func summarize(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil // a DeletedFinalStateUnknown tombstone
	}
	s := &blockSummary{ObjectMeta: metav1.ObjectMeta{Name: u.GetName(), ResourceVersion: u.GetResourceVersion()}}
	b, err := u.MarshalJSON()
	if err == nil {
		s.Block, err = ParseBlock(b)
	}
	s.Err = err
	return s, nil
}

// Cluster returns every node's figures as the caches hold them, summed
// again only when an object changed since the last call. It starts the
// watches if they are not running, bound to ctx (unless Detached).
func (w *Watch) Cluster(ctx context.Context) (*Cluster, error) {
	informers, err := w.Synced(ctx)
	if err != nil {
		return nil, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	// Read the count before the stores: a change after it is seen next
	// time.
	changes := w.changes.Load()
	if w.last != nil && w.last.changes == changes {
		return w.last.cluster, w.last.err
	}
	c, err := read(informers)
	w.last = &summary{changes: changes, cluster: c, err: err}
	return c, err
}

// Usage counts node's figures with the network's families.
func (w *Watch) Usage(ctx context.Context, node string, fams Families) (Usage, error) {
	c, err := w.Cluster(ctx)
	if err != nil {
		return Usage{}, err
	}
	return c.Usage(node, fams)
}

// sortPools: Calico picks pools in no set order; a fixed one keeps the
// figures stable when maxBlocksPerHost splits the claimable blocks.
func sortPools(pools []Pool) {
	slices.SortFunc(pools, func(a, b Pool) int { return a.CIDR.Addr().Compare(b.CIDR.Addr()) })
}

func read(informers []cache.SharedIndexInformer) (*Cluster, error) {
	blockStore, poolStore, configStore := informers[0].GetStore(), informers[1].GetStore(), informers[2].GetStore()
	var blocks []Block
	for _, o := range blockStore.List() {
		s, ok := o.(*blockSummary)
		if !ok {
			return nil, fmt.Errorf("an IPAMBlock is cached as %T", o)
		}
		if s.Err != nil {
			return nil, s.Err
		}
		blocks = append(blocks, s.Block)
	}
	var pools []Pool
	for _, o := range poolStore.List() {
		b, err := o.(*unstructured.Unstructured).MarshalJSON()
		if err != nil {
			return nil, err
		}
		p, err := ParsePool(b)
		if err != nil {
			return nil, err
		}
		pools = append(pools, p)
	}
	sortPools(pools)
	cfg := DefaultConfig
	if o, ok, err := configStore.GetByKey(IPAMConfigName); err != nil {
		return nil, err
	} else if ok {
		b, err := o.(*unstructured.Unstructured).MarshalJSON()
		if err != nil {
			return nil, err
		}
		if cfg, err = ParseConfig(b); err != nil {
			return nil, err
		}
	}
	return Summarize(blocks, pools, cfg), nil
}
