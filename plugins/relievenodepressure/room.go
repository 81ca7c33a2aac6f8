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

// buildRoom assesses every node of the cycle once.
func (c *cycle) buildRoom() *room {
	t := c.args.PIDs
	r := &room{nodes: make([]roomNode, len(c.nodes))}
	for i, node := range c.nodes {
		rn := roomNode{name: node.Name}
		stats, err := pidstats.ParseNode(node.Annotations, c.now, t.MaxSampleAge.Duration)
		if err != nil {
			rn.unknown = true
			r.nodes[i] = rn
			continue
		}
		pods, err := c.handle.GetPodsAssignedToNodeFunc()(node.Name, nil)
		if err != nil {
			// Without its pods the estimate would be too low: count the node
			// as full rather than risk sending pods there.
			c.logger.V(2).Info("Listing a node's pods failed; counting it as having no room", "node", node.Name, "err", err.Error())
			r.nodes[i] = rn
			continue
		}
		stats.Used = pidstats.EstimateUsed(stats, pods, *t.DefaultPodPIDs)
		rn.free, rn.allocatable = stats.Free(), stats.Allocatable()
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
