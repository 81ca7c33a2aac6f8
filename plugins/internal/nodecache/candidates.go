package nodecache

import (
	"math/bits"

	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// candidates are one cycle's candidates for Score, each with its position
// in a view, in a table of their own. The scheduler scores a few hundred
// nodes of thousands; their entries in the view's table lie scattered over
// it (256 KiB at 5,000 nodes), where each Score of each plugin would miss
// the CPU's caches, while this table (16 KiB for 500) stays in them. BoundsFor
// builds it once a cycle for every cache that shares the index; the
// scheduler hands the candidates over in the snapshot's order, so each one's
// position is mostly the one after its predecessor's, without a probe of
// the view's table.
type candidates struct {
	v     *view
	table []tableEntry
	shift uint
}

func newCandidates(v *view, list []fwk.NodeInfo) *candidates {
	size := 2
	for size < 2*len(list) {
		size *= 2
	}
	c := &candidates{v: v, table: make([]tableEntry, size), shift: uint(64 - bits.TrailingZeros(uint(size)))}
	next := -1
	for _, ni := range list {
		p, _ := ni.(*framework.NodeInfo)
		if p == nil {
			continue
		}
		i := next
		if i < 0 || i >= len(v.infos) || v.infos[i] != p {
			var ok bool
			if i, ok = v.find(p); !ok {
				continue
			}
		}
		next = i + 1
		j := bucket(p, c.shift)
		for c.table[j].info != nil {
			j = (j + 1) & (size - 1)
		}
		c.table[j] = tableEntry{info: p, pos: int32(i)}
	}
	return c
}

// find returns p's position in the view, if p is a candidate.
func (c *candidates) find(p *framework.NodeInfo) (int, bool) {
	mask := len(c.table) - 1
	for i := bucket(p, c.shift); ; i = (i + 1) & mask {
		e := &c.table[i]
		if e.info == p {
			return int(e.pos), true
		}
		if e.info == nil {
			return 0, false
		}
	}
}

// position returns p's position in v: from the cycle's candidates when
// they are of v and p is one, from v's table otherwise.
func (n *nodes) position(v *view, p *framework.NodeInfo) (int, bool) {
	if c := n.candidates.Load(); c != nil && c.v == v {
		if i, ok := c.find(p); ok {
			return i, true
		}
	}
	return v.find(p)
}
