// Package nodecache is the per-node cache that Headroom's scheduler plugins
// share: each plugin keeps, per node, a value computed from the node's
// NodeInfo (parsed annotations, a model of the node's pods) and reuses it
// until the NodeInfo changes.
//
// It relies on two properties of the scheduler's snapshot
// (k8s.io/kubernetes/pkg/scheduler/backend/cache):
//
//   - A NodeInfo's generation comes from one process-wide counter and moves
//     on every change to the node or its pods, and copies keep it until they
//     change: a value computed for a generation is exact for any NodeInfo of
//     the same node with that generation.
//   - UpdateSnapshot copies new contents into the snapshot's existing
//     NodeInfo, so a node keeps one NodeInfo pointer across cycles until it
//     is deleted.
//
// The scheduler also passes temporary copies of a NodeInfo (with nominated
// pods added, or victims removed in a preemption dry run). Their values are
// computed but not stored, so they never evict the snapshot's own.
//
// The caches of one scheduler (all plugins of all its profiles, which share
// the scheduler's snapshot) share one index of the nodes: one slot per node
// holds each cache's value, so the plugins that run one after another on a
// node find its slot where the first left it in the CPU's caches, and the
// index is kept once, not once per plugin.
//
// What Filter and Score compare on a hit is a Summary of three figures that
// the slot keeps inline, next to the other caches' summaries: one map probe
// and one or two cache lines per node for all of Headroom's plugins, rather
// than a pointer to chase per plugin (at 5,000 nodes, each a cache miss).
// The full value is one pointer further, for the rarer paths.
//
// PreFilter and PreScore call Refresh (refresh.go) once per scheduling
// cycle; every few cycles it walks the snapshot's nodes in order, recomputes
// the few whose generation moved, keeps bounds of the summaries over all
// nodes (the least room, the least memory slack, ...) and copies the
// summaries into a view in the snapshot's order with a flat table from
// NodeInfo to position. With the bounds a plugin can pass a node in Filter,
// or skip Score, without touching the node's state at all (nodes changed
// since the walk are judged one by one); with the view, a Score that must
// read a summary costs one probe of the flat table and a read of an array
// that Score walks in order.
//
// Without a refresh in the cycle, a hit is a read of an immutable map keyed
// by the snapshot's NodeInfo pointer (no string hashing, no look at the Node
// object), a few atomic loads and a comparison of generations: no lock, no
// allocation. The maps are replaced (copy on write) only when nodes are added
// or removed.
package nodecache

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	fwk "k8s.io/kube-scheduler/framework"
	backendcache "k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// ComputeFunc computes a node's value from its NodeInfo, whose Node() is not
// nil. prev is the value stored for the node before (of an older
// generation, possibly of an older Node object), or nil: a plugin may reuse
// the parts that depend only on a Node object it shares. It must not modify
// prev; it is called concurrently for different nodes.
type ComputeFunc[V any] func(ctx context.Context, ni fwk.NodeInfo, prev *V) V

// Summary is what a plugin's Filter and Score read of a node's value on a
// hit: four figures that its SummaryFunc derives from the value.
type Summary [4]int64

// SummaryFunc derives a value's Summary; it must be cheap and must not
// allocate.
type SummaryFunc[V any] func(*V) Summary

// Cache keeps a value per node. The zero value is not usable; use New.
type Cache[V any] struct {
	compute   ComputeFunc[V]
	summarize SummaryFunc[V]
	// snapshot returns the scheduler's snapshot lister; nil without one.
	snapshot func() fwk.NodeInfoLister
	nodes    *nodes  // shared with the scheduler's other caches
	pos      int     // this cache's place in every slot
	wanted   []Bound // the bounds Refresh keeps for this cache
}

// nodes is the index the caches of one scheduler share.
type nodes struct {
	slots atomic.Pointer[index] // replaced, never modified
	mu    sync.Mutex            // serialises replacements of slots, claims of places and refreshes

	// What Refresh keeps (refresh.go), guarded by mu: the caches by place
	// and the bounds each keeps, the view of the snapshot's node list, the
	// cycle it was last refreshed for, and BoundsFor's last look at a
	// cycle's candidates (pass).
	caches       []refresher
	bounds       [][]Bound
	view         *view
	refreshedFor *framework.CycleState
	// sinceWalk counts the cycles since the last walk over the view, which
	// Refresh makes every walkEvery cycles.
	sinceWalk, walkEvery int
	pass                 uncoveredPass
	// current is view once refreshed: what Filter and Score look in first.
	current atomic.Pointer[view]
	// candidates is the last cycle's candidates, each with its position in
	// current (candidates.go): what Score looks in before current.
	candidates atomic.Pointer[candidates]
}

// index finds a node's slot: by the snapshot's NodeInfo (the hot path) or by
// name (copies, and bookkeeping). Both maps hold the same slots.
type index struct {
	byInfo map[*framework.NodeInfo]*slot
	byName map[string]*slot
}

// slot is one node's place in the index: each cache's summary and its
// entry, an *entry[V] of the cache's V, one of each per cache registered
// (their backing arrays come in blocks, in the snapshot's order of the
// nodes; see slotForLocked).
type slot struct {
	hot []hot
	cur []atomic.Value
}

// newSlots returns count slots for caches caches, their summaries and
// entries in one block each.
func newSlots(count, caches int) []slot {
	slots := make([]slot, count)
	hots := make([]hot, count*caches)
	curs := make([]atomic.Value, count*caches)
	for i := range slots {
		slots[i].hot = hots[i*caches : (i+1)*caches : (i+1)*caches]
		slots[i].cur = curs[i*caches : (i+1)*caches : (i+1)*caches]
	}
	return slots
}

// hot is a cache's Summary of a node's value and the generation it is of
// (0: none yet), kept as a sequence lock: gen is writing (no generation has
// it) while a writer changes the figures, so a reader that sees the same
// generation before and after reading them has read them whole.
type hot struct {
	gen atomic.Int64
	sum [len(Summary{})]atomic.Int64
	// note is a Note's word: the low 32 bits of the generation it was
	// kept for, then the plugin's 32 bits.
	note atomic.Uint64
}

// figures returns the summary's figures as they are; for its only writer.
func (h *hot) figures() Summary {
	var s Summary
	for i := range s {
		s[i] = h.sum[i].Load()
	}
	return s
}

// writing marks a summary being written. Generations are positive (they
// count up from 1).
const writing = -1

// read returns the summary if it is of generation gen.
func (h *hot) read(gen int64) (Summary, bool) {
	if h.gen.Load() != gen {
		return Summary{}, false
	}
	s := h.figures()
	return s, h.gen.Load() == gen
}

// write stores s as generation gen's summary, unless another writer is at
// it (the figures are then left to it; a reader of gen falls back to the
// entry).
func (h *hot) write(gen int64, s Summary) {
	old := h.gen.Load()
	if old == writing || !h.gen.CompareAndSwap(old, writing) {
		return
	}
	for i := range s {
		h.sum[i].Store(s[i])
	}
	h.note.Store(0)
	h.gen.Store(gen)
}

// entry is a value computed for one generation of one NodeInfo; immutable.
// A hit reads the generation and then the value's first fields, so they come
// first: plugins put what Filter and Score compare at the start of V.
type entry[V any] struct {
	generation int64
	value      V
	owner      fwk.NodeInfo // the NodeInfo it was computed from
}

// shared finds the index of every live scheduler snapshot. It holds both
// weakly: the caches hold their index, and it goes with them and their
// scheduler.
var shared struct {
	mu   sync.Mutex
	byID map[weak.Pointer[backendcache.Snapshot]]weak.Pointer[nodes]
}

// nodesFor returns an index with a free place, and the place: the one
// shared by the caches of the scheduler whose snapshot h has, or a new one
// for a handle without the scheduler's snapshot type.
func nodesFor(h fwk.Handle) *nodes {
	var snap *backendcache.Snapshot
	if h != nil {
		snap, _ = h.SnapshotSharedLister().(*backendcache.Snapshot)
	}
	if snap == nil {
		return newNodes()
	}
	key := weak.Make(snap)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	entry, known := shared.byID[key]
	n := entry.Value()
	if n == nil {
		if shared.byID == nil {
			shared.byID = map[weak.Pointer[backendcache.Snapshot]]weak.Pointer[nodes]{}
		}
		if !known {
			runtime.AddCleanup(snap, func(key weak.Pointer[backendcache.Snapshot]) {
				shared.mu.Lock()
				delete(shared.byID, key)
				shared.mu.Unlock()
			}, key)
		}
		n = newNodes()
		shared.byID[key] = weak.Make(n)
	}
	return n
}

func newNodes() *nodes {
	n := &nodes{walkEvery: walkEvery}
	n.slots.Store(&index{byInfo: map[*framework.NodeInfo]*slot{}, byName: map[string]*slot{}})
	return n
}

// New returns an empty cache that computes values with compute, and their
// summaries with summarize, and that keeps the bounds named (Refresh). h is the
// scheduler's handle: its snapshot tells the snapshot's own NodeInfos from
// temporary copies, and which nodes are gone, and the caches of handles with
// the same snapshot share one index of the nodes. A nil h (or one without a
// snapshot) stores every value and never prunes.
func New[V any](h fwk.Handle, compute ComputeFunc[V], summarize SummaryFunc[V], bounds ...Bound) *Cache[V] {
	c := &Cache[V]{compute: compute, summarize: summarize, wanted: bounds, snapshot: func() fwk.NodeInfoLister { return nil }}
	if h != nil {
		c.snapshot = func() fwk.NodeInfoLister {
			if l := h.SnapshotSharedLister(); l != nil {
				return l.NodeInfos()
			}
			return nil
		}
	}
	c.nodes = nodesFor(h)
	c.pos = c.nodes.register(c, bounds)
	return c
}

// load returns the cache's entry in s, or nil.
func (c *Cache[V]) load(s *slot) *entry[V] {
	e, _ := s.cur[c.pos].Load().(*entry[V])
	return e
}

// Get returns the value for ni, computing it when the node's stored value
// is of another generation. The result is shared: callers must not modify
// it. ni.Node() must not be nil.
func (c *Cache[V]) Get(ctx context.Context, ni fwk.NodeInfo) *V {
	e, _ := c.get(ctx, ni, ni.GetGeneration())
	return &e.value
}

// Summary returns the summary of ni's value, as Get would return it. On a
// hit it reads the node's slot only, not the value. ni.Node() must not be
// nil.
func (c *Cache[V]) Summary(ctx context.Context, ni fwk.NodeInfo) Summary {
	sum, _ := c.SummaryNote(ctx, ni)
	return sum
}

// SummaryNote is Summary with the node's Note, kept beside the summary.
func (c *Cache[V]) SummaryNote(ctx context.Context, ni fwk.NodeInfo) (Summary, Note) {
	generation := ni.GetGeneration()
	// The scheduler's NodeInfos are *framework.NodeInfo; a map keyed by the
	// concrete pointer hashes 8 bytes.
	p, _ := ni.(*framework.NodeInfo)
	if p == nil {
		e, _ := c.get(ctx, ni, generation)
		return c.summarize(&e.value), Note{}
	}
	if v := c.nodes.current.Load(); v != nil {
		if i, ok := c.nodes.position(v, p); ok {
			h := v.hotOf(c.pos, i)
			if sum, ok := h.read(generation); ok {
				return sum, Note{h, generation}
			}
		}
	}
	if s := c.nodes.slots.Load().byInfo[p]; s != nil {
		h := &s.hot[c.pos]
		if sum, ok := h.read(generation); ok {
			return sum, Note{h, generation}
		}
	}
	e, s := c.get(ctx, ni, generation)
	sum := c.summarize(&e.value)
	if s != nil && e.generation == generation {
		// The value was stored without its summary (another writer was
		// at it): the next reader finds it.
		s.hot[c.pos].write(generation, sum)
		return sum, Note{&s.hot[c.pos], generation}
	}
	return sum, Note{}
}

// Note is a word a plugin keeps beside a node's summary, valid for the
// summary's generation only: what the plugin worked out from the node's
// value for the pods it scores (OOMRisk: the score of the last pod shape
// it scored there), found where the summary is, without reading the
// value. A new generation leaves it unset; nothing else clears it. The
// zero Note keeps nothing.
type Note struct {
	h   *hot
	gen int64
}

// Load returns the word kept for the note's generation, if one is.
func (n Note) Load() (uint32, bool) {
	if n.h == nil {
		return 0, false
	}
	w := n.h.note.Load()
	return uint32(w), w != 0 && uint32(w>>32) == uint32(n.gen)
}

// Store keeps v for the note's generation. A summary rewritten since for
// a newer generation ignores it: Load checks the generation.
func (n Note) Store(v uint32) {
	if n.h != nil {
		n.h.note.Store(uint64(uint32(n.gen))<<32 | uint64(v))
	}
}

// get returns the entry for ni, and the slot of the snapshot's NodeInfo
// when ni is that one.
func (c *Cache[V]) get(ctx context.Context, ni fwk.NodeInfo, generation int64) (*entry[V], *slot) {
	idx := c.nodes.slots.Load()
	p, _ := ni.(*framework.NodeInfo)
	var s *slot
	var known bool
	if v := c.nodes.current.Load(); v != nil && p != nil {
		if i, ok := c.nodes.position(v, p); ok {
			s, known = v.slots[i], true
		}
	}
	if !known && p != nil {
		s, known = idx.byInfo[p]
	}
	if known {
		if e := c.load(s); e != nil && e.generation == generation {
			return e, s
		}
	}
	return c.miss(ctx, ni, generation, s, known, idx)
}

// miss is Get's slow path: a changed node, a copy, or a node the index
// does not know by its NodeInfo yet.
func (c *Cache[V]) miss(ctx context.Context, ni fwk.NodeInfo, generation int64, s *slot, known bool, idx *index) (*entry[V], *slot) {
	name := ni.Node().Name
	if !known {
		s = idx.byName[name]
	}
	var prev *entry[V]
	if s != nil {
		// A copy of the same generation has the same contents.
		if prev = c.load(s); prev != nil && prev.generation == generation {
			if !known {
				s = nil
			}
			return prev, s
		}
	}

	e := &entry[V]{owner: ni, generation: generation}
	var pv *V
	if prev != nil {
		pv = &prev.value
	}
	e.value = c.compute(ctx, ni, pv)
	// The snapshot's NodeInfo is the one the previous value was stored
	// for; anything else is looked up once (a new node, a node re-added
	// under the same name, or a temporary copy, whose value is computed
	// from scratch anyway).
	if known || (prev != nil && prev.owner == ni) || c.own(name, ni) {
		if !known {
			s = c.slotFor(name, ni)
		}
		c.store(s, e)
		return e, s
	}
	return e, nil
}

// store keeps e in s unless a value of a newer generation is stored already.
func (c *Cache[V]) store(s *slot, e *entry[V]) {
	v := &s.cur[c.pos]
	for {
		cur := v.Load()
		old, _ := cur.(*entry[V])
		if old != nil && old.owner == e.owner && old.generation > e.generation {
			return
		}
		if v.CompareAndSwap(cur, e) {
			s.hot[c.pos].write(e.generation, c.summarize(&e.value))
			return
		}
	}
}

// own reports whether ni may be stored: it is the snapshot's own NodeInfo of
// the node, or the snapshot does not hold the node (or there is none), so
// there is no entry to protect.
func (c *Cache[V]) own(name string, ni fwk.NodeInfo) bool {
	lister := c.snapshot()
	if lister == nil {
		return true
	}
	got, err := lister.Get(name)
	return err != nil || got == ni
}

// slotFor returns name's slot, adding it, and a slot for every node of the
// snapshot, in one replacement of the index, and indexes it under ni: the
// first cycle after a fleet of nodes is added copies the index once, not
// once per node.
func (c *Cache[V]) slotFor(name string, ni fwk.NodeInfo) *slot {
	c.nodes.mu.Lock()
	defer c.nodes.mu.Unlock()
	return c.slotForLocked(name, ni)
}

// slotForLocked is slotFor with the index's lock held.
func (c *Cache[V]) slotForLocked(name string, ni fwk.NodeInfo) *slot {
	n := c.nodes
	old := n.slots.Load()
	if p, _ := ni.(*framework.NodeInfo); p != nil {
		if s, ok := old.byInfo[p]; ok {
			return s
		}
	}
	var infos []fwk.NodeInfo
	if lister := c.snapshot(); lister != nil {
		infos, _ = lister.List()
	}
	next := &index{
		byInfo: make(map[*framework.NodeInfo]*slot, max(len(old.byInfo), len(infos))+1),
		byName: make(map[string]*slot, max(len(old.byName), len(infos))+1),
	}
	for name, s := range old.byName {
		next.byName[name] = s
	}
	// New nodes' slots come from one block, in the snapshot's order of its
	// nodes, which is the order in which Filter visits them: a node's
	// neighbours in that order are its neighbours in memory, which the CPU
	// fetches ahead. (A block stays allocated while one of its slots is in
	// use: at most one block's worth per addition of nodes.)
	fresh := 1
	for _, info := range infos {
		if node := info.Node(); node != nil && next.byName[node.Name] == nil {
			fresh++
		}
	}
	block := newSlots(fresh, len(n.caches))[:0]
	add := func(name string, ni fwk.NodeInfo) *slot {
		s := next.byName[name]
		if s == nil {
			if len(block) < cap(block) {
				block = block[:len(block)+1]
				s = &block[len(block)-1]
			} else {
				s = &newSlots(1, len(n.caches))[0]
			}
			next.byName[name] = s
		}
		if p, _ := ni.(*framework.NodeInfo); p != nil {
			next.byInfo[p] = s
		}
		return s
	}
	for _, info := range infos {
		if node := info.Node(); node != nil {
			add(node.Name, info)
		}
	}
	// NodeInfos the snapshot no longer holds (replaced by a re-added node's)
	// are left out; those of nodes it never held (no snapshot) are kept.
	for info, s := range old.byInfo {
		if len(infos) == 0 && next.byInfo[info] == nil {
			next.byInfo[info] = s
		}
	}
	s := add(name, ni)
	n.slots.Store(next)
	return s
}

// Prune drops the nodes that the snapshot no longer holds, for every cache
// that shares the index. It costs a length comparison unless the index holds
// more nodes than the snapshot, so plugins call it once per scheduling cycle
// (PreFilter, PreScore): the index never outgrows the cluster by more than
// the nodes deleted since the last cycle.
func (c *Cache[V]) Prune() {
	lister := c.snapshot()
	if lister == nil {
		return
	}
	infos, err := lister.List()
	n := c.nodes
	if err != nil || len(n.slots.Load().byName) <= len(infos) {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	old := n.slots.Load()
	next := &index{byInfo: make(map[*framework.NodeInfo]*slot, len(infos)), byName: make(map[string]*slot, len(infos))}
	for name, s := range old.byName {
		if _, err := lister.Get(name); err == nil {
			next.byName[name] = s
		}
	}
	for info, s := range old.byInfo {
		if node := info.Node(); node != nil {
			if got, err := lister.Get(node.Name); err == nil && got == info {
				next.byInfo[info] = s
			}
		}
	}
	n.slots.Store(next)
}

// Len returns the number of nodes the cache has a place for.
func (c *Cache[V]) Len() int { return len(c.nodes.slots.Load().byName) }

// Stored returns the value stored for the node, or nil: for tests and
// diagnostics, which look at the cache without computing.
func (c *Cache[V]) Stored(name string) *V {
	if s := c.nodes.slots.Load().byName[name]; s != nil {
		if e := c.load(s); e != nil {
			return &e.value
		}
	}
	return nil
}

// Store is what a plugin sees of its per-node state: a value per node,
// kept until the node's NodeInfo changes, the summary of it that Filter
// and Score read, and bounds of the summaries over the snapshot's nodes.
// *Cache implements it.
type Store[V any] interface {
	// Summary returns the summary of ni's value. It allocates nothing on
	// a hit.
	Summary(ctx context.Context, ni fwk.NodeInfo) Summary
	// SummaryNote is Summary with the word the plugin keeps beside it.
	SummaryNote(ctx context.Context, ni fwk.NodeInfo) (Summary, Note)
	// Get returns ni's value, shared: callers must not modify it.
	Get(ctx context.Context, ni fwk.NodeInfo) *V
	// Refresh brings every node of the snapshot up to date, at most once
	// per scheduling cycle, and returns the bounds; PreFilter and
	// PreScore call it.
	Refresh(ctx context.Context, state fwk.CycleState) (Bounds, bool)
	// BoundsFor is Refresh for a claim about nodes, PreScore's candidates.
	BoundsFor(ctx context.Context, state fwk.CycleState, nodes []fwk.NodeInfo) (Bounds, bool)
	// Claim reports whether a claim that wider bounds cannot make true
	// holds for BoundsFor's bounds, reading the candidates the last walk
	// does not cover only where it holds over the nodes it covers.
	Claim(ctx context.Context, state fwk.CycleState, nodes []fwk.NodeInfo, claim func(Bounds) bool) (Bounds, bool)
	// Prune drops the nodes the snapshot no longer holds.
	Prune()
}

var _ Store[int] = (*Cache[int])(nil)
