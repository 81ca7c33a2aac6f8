package relievenodepressure

import (
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// room is the PID headroom of the cycle's nodes as NodePIDs sees it: free =
// allocatable − the shared estimate over each node's pods, and whether a
// node's headroom is unknown (NodePIDs lets pods onto such a node).
type room struct {
	nodes []roomNode
}

type roomNode struct {
	name              string
	free, allocatable int64
	unknown           bool
}

// buildRoom reads every node's PID figures (pidsOf) once.
func (c *cycle) buildRoom() *room {
	r := &room{nodes: make([]roomNode, len(c.nodes))}
	for i, node := range c.nodes {
		rn := roomNode{name: node.Name}
		switch f := c.pidsOf(node, nil); {
		case pidstats.IsUnknown(f.err):
			rn.unknown = true
		case f.err != nil:
			// Without its pods the estimate would be too low: count the node
			// as full rather than risk sending pods there.
			c.logger.V(2).Info("Listing a node's pods failed; counting it as having no room", "node", node.Name, "err", f.err.Error())
		default:
			stats := f.stats
			stats.Used = f.used
			rn.free, rn.allocatable = stats.Free(), stats.Allocatable()
		}
		r.nodes[i] = rn
	}
	return r
}

// roomFor returns a node other than n's own that can take need PIDs above
// NodePIDs' floor, after the PIDs reserved for the plan so far: its index,
// or -1 when a node of unknown headroom takes it (NodePIDs does not filter
// such a node), and whether there is one.
func (n *nodeRelief) roomFor(need int64, reserved map[int]int64) (int, bool) {
	if n.room == nil {
		n.room = n.buildRoom()
	}
	r := n.room
	for i := range r.nodes {
		rn := &r.nodes[i]
		if rn.name == n.node.Name {
			continue
		}
		if rn.unknown {
			return -1, true
		}
		if n.floor.Fits(rn.free-reserved[i], rn.allocatable, need) {
			return i, true
		}
	}
	return -1, false
}

// take counts need PIDs against node i once a pod counted against it is
// evicted.
func (r *room) take(i int, need int64) {
	r.nodes[i].free = max(r.nodes[i].free-need, 0)
}
