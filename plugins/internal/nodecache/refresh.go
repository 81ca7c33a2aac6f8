package nodecache

import (
	"context"
	"math"
	"math/bits"
	"unsafe"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// Refresh is how a plugin learns, once per scheduling cycle, something of
// every node without looking at each: it brings the values of every node of
// the snapshot up to date in all the caches that share the index, and keeps,
// per cache, the least or greatest of the summary figures the cache asked
// for. A plugin whose pod passes Filter, or scores the same, on every node
// within those bounds can then pass (Bounds.Covers) or skip the nodes
// without reading their memory: at 5,000 nodes that first touch of each
// node's state is most of what the plugins cost.
//
// The walk over the snapshot reads each NodeInfo's generation, in the
// snapshot's order, and recomputes only the nodes whose generation moved
// since the last walk; the bounds move with them, and are counted again from
// the nodes' figures only when a node that held a bound moved away from it.
//
// The walk itself, one read of each node's memory, is most of what a cycle
// costs Headroom at 5,000 nodes, so it is not made every cycle but every
// walkEvery cycles. The bounds stay exact in between for the NodeInfos they
// cover: a NodeInfo whose generation is not above the greatest the walk saw
// has not changed since (a change takes a new generation from the
// process-wide counter, greater than any before). The few that changed are
// not covered: Filter judges them one by one, as it judges copies, and
// BoundsFor folds the candidates among them into the bounds PreScore reads.

// walkEvery is how many cycles Refresh lets pass between walks. At 5,000
// nodes a walk costs 30-60 µs, a sixteenth of that a cycle; in between the
// nodes that change (two a cycle where pods are placed one by one: the
// placement, then the binding as the API server reports it) are judged one
// by one, a few dozen of thousands.
const walkEvery = 16

// Bound names a summary figure whose least or greatest value over the
// snapshot's nodes a cache keeps for Refresh to report.
type Bound struct {
	Figure   int  // an index into Summary
	Greatest bool // the greatest value; the least otherwise
}

// Bounds is what Refresh reports of one cache.
type Bounds struct {
	// Generation is the greatest generation of the snapshot's NodeInfos
	// at the last walk. A NodeInfo that changed since, or a copy the
	// scheduler changes in the cycle (nominated pods added, preemption
	// victims removed), has a new, greater one: the bounds cover only
	// NodeInfos of this or a smaller generation (Covers).
	Generation int64
	// Least and Greatest hold the bounds the cache asked for at New, over
	// the NodeInfos covered (and, from BoundsFor, the candidates given);
	// the other figures hold 0. Without nodes a least
	// is math.MaxInt64 and a greatest math.MinInt64.
	Least, Greatest Summary
}

// Covers reports whether ni is one the bounds hold for: the snapshot's
// NodeInfo of a node as the last walk saw it, or a copy the scheduler did not
// change. The zero Bounds cover nothing.
func (b Bounds) Covers(ni fwk.NodeInfo) bool {
	return b.Generation > 0 && ni.GetGeneration() <= b.Generation
}

// refresher is a cache as Refresh drives it.
type refresher interface {
	// refresh brings the cache's value in s up to ni's generation and
	// returns its summary.
	refresh(ctx context.Context, ni *framework.NodeInfo, s *slot) Summary
}

// view is the snapshot's node list as Refresh walks it: a position per
// node, with its slot, the generation it was last refreshed at and each
// cache's summary of it then. After a refresh Filter and Score find a node's
// summary here (find): one probe of a flat table and a read of an array in
// the order Filter visits the nodes, not a map probe and a slot per node.
type view struct {
	list  []fwk.NodeInfo // the snapshot's list, compared by identity
	infos []*framework.NodeInfo
	slots []*slot
	gens  []int64 // 0: not refreshed yet; guarded by nodes.mu
	// hot holds each cache's summary per position, written by Refresh
	// only (under nodes.mu), read by anyone: a position's summaries side
	// by side (hotOf), so that the plugins that score a node one after
	// another read one stretch of memory, where the first one's read
	// brought the others' into the CPU's caches.
	hot    []hot
	bounds []viewBounds
	// generation is the greatest of gens after the last refresh.
	generation int64
	// table finds a NodeInfo's position: open addressing on its address,
	// a power of two long, at most half full. Immutable.
	table []tableEntry
	shift uint // 64 - log2(len(table))
}

type tableEntry struct {
	info *framework.NodeInfo // nil: empty
	pos  int32
}

// viewBounds is one cache's bounds over a view's summaries.
type viewBounds struct {
	least, greatest Summary
	// recount is set when a position that held a bound moved away from
	// it: the bound is counted again from the summaries before it is
	// reported.
	recount bool
}

// hotOf returns cache k's summary at position i.
func (v *view) hotOf(k, i int) *hot { return &v.hot[i*len(v.bounds)+k] }

// bucket is where p's search in the table starts (Fibonacci hashing of
// its address: the allocator aligns NodeInfos, so the low bits vary least).
func (v *view) bucket(p *framework.NodeInfo) int { return bucket(p, v.shift) }

// bucket is where p's search starts in a table of 2^(64-shift) entries.
func bucket(p *framework.NodeInfo, shift uint) int {
	return int((uint64(uintptr(unsafe.Pointer(p))) * 0x9E3779B97F4A7C15) >> shift)
}

// find returns p's position in the view.
func (v *view) find(p *framework.NodeInfo) (int, bool) {
	mask := len(v.table) - 1
	for i := v.bucket(p); ; i = (i + 1) & mask {
		e := &v.table[i]
		if e.info == p {
			return int(e.pos), true
		}
		if e.info == nil {
			return 0, false
		}
	}
}

// register makes c one of the caches Refresh drives, keeping bounds, and
// returns its place in every slot. Slots have a place for each cache registered when they were
// made: the index starts afresh when it holds any (the scheduler builds
// every plugin before its first cycle, so in practice it holds none).
func (n *nodes) register(c refresher, bounds []Bound) (pos int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	pos = len(n.caches)
	n.caches = append(n.caches, c)
	n.bounds = append(n.bounds, bounds)
	if idx := n.slots.Load(); len(idx.byName) > 0 || len(idx.byInfo) > 0 {
		n.slots.Store(&index{byInfo: map[*framework.NodeInfo]*slot{}, byName: map[string]*slot{}})
	}
	n.view = nil // a new view gives the new cache its summaries and bounds
	n.current.Store(nil)
	return pos
}

// Refresh brings the nodes of the scheduler's snapshot up to date in all the
// caches that share c's index, walking them every walkEvery scheduling
// cycles (state; a nil state walks every call), and returns c's bounds.
// PreFilter and PreScore call it; Filter and Score must not (it takes a
// lock). It reports false without a snapshot.
func (c *Cache[V]) Refresh(ctx context.Context, state fwk.CycleState) (Bounds, bool) {
	lister := c.snapshot()
	if lister == nil {
		return Bounds{}, false
	}
	list, err := lister.List()
	if err != nil {
		return Bounds{}, false
	}
	n := c.nodes
	n.mu.Lock()
	defer n.mu.Unlock()
	cycle, _ := state.(*framework.CycleState)
	v := n.view
	if v == nil || !sameList(v.list, list) {
		v = c.newView(list)
		n.view, n.refreshedFor = v, nil
	}
	if cycle == nil || cycle != n.refreshedFor {
		n.refreshedFor = cycle
		n.sinceWalk++
		if cycle == nil || v.generation == 0 || n.sinceWalk >= n.walkEvery {
			n.refresh(ctx, v)
			n.sinceWalk = 0
		}
	}
	b := &v.bounds[c.pos]
	if b.recount {
		b.count(v, c.pos, n.bounds[c.pos])
	}
	return Bounds{Generation: v.generation, Least: b.least, Greatest: b.greatest}, true
}

// BoundsFor is Refresh for a claim about nodes, PreScore's candidates: the
// bounds also hold for those of them the last walk does not cover (nodes
// changed since), whose summaries it reads one by one. Covers still tells
// only the NodeInfos the walk saw.
func (c *Cache[V]) BoundsFor(ctx context.Context, state fwk.CycleState, nodes []fwk.NodeInfo) (Bounds, bool) {
	b, ok := c.Refresh(ctx, state)
	if !ok {
		return b, false
	}
	c.fold(ctx, &b, c.nodes.uncovered(state, nodes, b, true))
	return b, true
}

// Claim reports whether claim holds for BoundsFor's bounds of nodes, and
// returns them. claim must be one that wider bounds cannot make true (a
// lower least, a greater greatest): Claim asks it first of the bounds over
// the nodes the last walk covers, and reads the candidates the walk does
// not cover only where it holds there. Where nodes are tight, most cycles'
// claims fail on the walk's bounds, and the pass over the candidates,
// which reads every one of them, is left out.
func (c *Cache[V]) Claim(ctx context.Context, state fwk.CycleState, nodes []fwk.NodeInfo, claim func(Bounds) bool) (Bounds, bool) {
	b, ok := c.Refresh(ctx, state)
	if !ok {
		return b, false
	}
	// With no node walked, the bounds are empty, not wide: only the
	// candidates can tell.
	walked := b.Generation > 0
	if walked && !claim(b) {
		c.nodes.uncovered(state, nodes, b, false)
		return b, false
	}
	c.fold(ctx, &b, c.nodes.uncovered(state, nodes, b, true))
	return b, claim(b)
}

// fold widens b by the summaries of nodes.
func (c *Cache[V]) fold(ctx context.Context, b *Bounds, nodes []fwk.NodeInfo) {
	for _, ni := range nodes {
		sum := c.Summary(ctx, ni)
		for _, w := range c.wanted {
			if f := w.Figure; w.Greatest {
				b.Greatest[f] = max(b.Greatest[f], sum[f])
			} else {
				b.Least[f] = min(b.Least[f], sum[f])
			}
		}
	}
}

// uncoveredPass is BoundsFor's look at one cycle's candidates: those that
// bounds of generation leave out. The caches that share the index call
// BoundsFor with the same candidates in the same cycle, so the first call
// looks at each candidate and the others reuse what it found: a few nodes,
// where the candidates are hundreds. The pass holds the cycle's state and
// the candidates, so neither can be freed and its address reused by a later
// cycle while the pass compares them.
type uncoveredPass struct {
	cycle      *framework.CycleState
	first      *fwk.NodeInfo // the candidates, by identity: &candidates[0]
	count      int
	generation int64
	// found tells whether infos was looked for: a pass whose claims all
	// failed on the walk's bounds (Claim) never looks.
	found bool
	infos []fwk.NodeInfo // never modified once found: callers read it unlocked
}

// uncovered indexes the cycle's candidates for Score (once per cycle) and,
// when find is set, returns those, with a Node, that b does not cover.
func (n *nodes) uncovered(state fwk.CycleState, candidates []fwk.NodeInfo, b Bounds, find bool) []fwk.NodeInfo {
	if len(candidates) == 0 {
		return nil
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	cycle, _ := state.(*framework.CycleState)
	p := &n.pass
	if cycle == nil || p.cycle != cycle || p.first != &candidates[0] || p.count != len(candidates) || p.generation != b.Generation {
		*p = uncoveredPass{cycle: cycle, first: &candidates[0], count: len(candidates), generation: b.Generation}
		if v := n.current.Load(); v != nil {
			n.candidates.Store(newCandidates(v, candidates))
		}
	}
	if find && !p.found {
		for _, ni := range candidates {
			if !b.Covers(ni) && ni.Node() != nil {
				p.infos = append(p.infos, ni)
			}
		}
		p.found = true
	}
	return p.infos
}

// sameList reports whether a and b are the same slice: the snapshot
// replaces its list when nodes are added or removed, and only then.
func sameList(a, b []fwk.NodeInfo) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// newView returns a view of list, every node with its slot in the index.
func (c *Cache[V]) newView(list []fwk.NodeInfo) *view {
	v := &view{list: list, infos: make([]*framework.NodeInfo, len(list)), slots: make([]*slot, len(list)), gens: make([]int64, len(list))}
	idx := c.nodes.slots.Load()
	for i, ni := range list {
		p, _ := ni.(*framework.NodeInfo)
		if p == nil || p.Node() == nil {
			continue
		}
		s := idx.byInfo[p]
		if s == nil {
			// Indexes every node of the snapshot in one replacement.
			s = c.slotForLocked(p.Node().Name, p)
			idx = c.nodes.slots.Load()
		}
		v.infos[i], v.slots[i] = p, s
	}
	size := 2
	for size < 2*len(list) {
		size *= 2
	}
	v.table = make([]tableEntry, size)
	v.shift = uint(64 - bits.TrailingZeros(uint(size)))
	for i, p := range v.infos {
		if p == nil {
			continue
		}
		j := v.bucket(p)
		for v.table[j].info != nil {
			j = (j + 1) & (size - 1)
		}
		v.table[j] = tableEntry{info: p, pos: int32(i)}
	}
	k := len(c.nodes.caches)
	v.hot, v.bounds = make([]hot, k*len(list)), make([]viewBounds, k)
	for k := range v.bounds {
		v.bounds[k].reset(c.nodes.bounds[k])
	}
	return v
}

// refresh walks the view, recomputing the nodes whose generation moved.
func (n *nodes) refresh(ctx context.Context, v *view) {
	var greatest int64
	for i, ni := range v.infos {
		if ni == nil {
			continue
		}
		gen := ni.Generation
		greatest = max(greatest, gen)
		if gen == v.gens[i] {
			continue
		}
		for k, c := range n.caches {
			h := v.hotOf(k, i)
			old := h.figures()
			sum := c.refresh(ctx, ni, v.slots[i])
			h.write(gen, sum)
			v.bounds[k].set(old, sum, n.bounds[k], v.gens[i] == 0)
		}
		v.gens[i] = gen
	}
	v.generation = greatest
	n.current.Store(v)
}

// refresh is the cache's part of Refresh for one node.
func (c *Cache[V]) refresh(ctx context.Context, ni *framework.NodeInfo, s *slot) Summary {
	gen := ni.Generation
	if sum, ok := s.hot[c.pos].read(gen); ok {
		return sum
	}
	prev := c.load(s)
	if prev != nil && prev.generation == gen && prev.owner == fwk.NodeInfo(ni) {
		sum := c.summarize(&prev.value)
		s.hot[c.pos].write(gen, sum)
		return sum
	}
	e := &entry[V]{owner: ni, generation: gen}
	var pv *V
	if prev != nil {
		pv = &prev.value
	}
	e.value = c.compute(ctx, ni, pv)
	c.store(s, e)
	return c.summarize(&e.value)
}

// reset empties the bounds.
func (b *viewBounds) reset(wanted []Bound) {
	for _, w := range wanted {
		if w.Greatest {
			b.greatest[w.Figure] = math.MinInt64
		} else {
			b.least[w.Figure] = math.MaxInt64
		}
	}
	b.recount = false
}

// set records a position's new summary, replacing old (unless first). A
// bound that moves towards the new figure is updated; one the position held
// and left is counted again.
func (b *viewBounds) set(old, sum Summary, wanted []Bound, first bool) {
	for _, w := range wanted {
		f := w.Figure
		if w.Greatest {
			if sum[f] >= b.greatest[f] {
				b.greatest[f] = sum[f]
			} else if !first && old[f] == b.greatest[f] {
				b.recount = true
			}
		} else {
			if sum[f] <= b.least[f] {
				b.least[f] = sum[f]
			} else if !first && old[f] == b.least[f] {
				b.recount = true
			}
		}
	}
}

// count works cache k's bounds out afresh from the positions' summaries.
func (b *viewBounds) count(v *view, k int, wanted []Bound) {
	b.reset(wanted)
	for i, ni := range v.infos {
		if ni == nil || v.gens[i] == 0 {
			continue
		}
		sum := v.hotOf(k, i).figures()
		for _, w := range wanted {
			f := w.Figure
			if w.Greatest {
				b.greatest[f] = max(b.greatest[f], sum[f])
			} else {
				b.least[f] = min(b.least[f], sum[f])
			}
		}
	}
}
