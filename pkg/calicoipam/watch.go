package calicoipam

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/headroom-k8s/headroom/pkg/watchcache"
)

// ErrNotSynced is what Watch.Usage returns until every watch has completed
// its first list.
var ErrNotSynced = watchcache.ErrNotSynced

// Watch keeps Calico's IPAM objects in a cache, filled by a list and watch
// of each resource (watchcache), so that counting a node's figures costs the
// API server nothing per tick.
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
	*watchcache.Watch
	node string
}

// NewWatch returns a Watch counting for the node of that name. Nothing is
// requested before the first Usage.
func NewWatch(client dynamic.Interface, node string) *Watch {
	w := &Watch{node: node}
	w.Watch = watchcache.New("Calico's IPAM objects", func() []cache.SharedIndexInformer {
		inf := func(gvr schema.GroupVersionResource) cache.SharedIndexInformer {
			return dynamicinformer.NewFilteredDynamicInformer(client, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
		}
		blocks := inf(IPAMBlocks)
		_ = blocks.SetTransform(w.summarize)
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
	informers, err := w.Synced(ctx)
	if err != nil {
		return Usage{}, err
	}
	blockStore, poolStore, configStore := informers[0].GetStore(), informers[1].GetStore(), informers[2].GetStore()
	var blocks []Block
	for _, o := range blockStore.List() {
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
	for _, o := range poolStore.List() {
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
	if o, ok, err := configStore.GetByKey(IPAMConfigName); err != nil {
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
