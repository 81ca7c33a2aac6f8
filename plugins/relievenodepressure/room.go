package relievenodepressure

import (
	v1 "k8s.io/api/core/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

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
	// unschedulable (cordoned) nodes are never room; taints are checked
	// against each pod's tolerations.
	unschedulable bool
	taints        []v1.Taint
}

// buildRoom reads every node's PID figures (pidsOf) once.
func (c *cycle) buildRoom() *room {
	r := &room{nodes: make([]roomNode, len(c.nodes))}
	for i, node := range c.nodes {
		rn := roomNode{name: node.Name, unschedulable: node.Spec.Unschedulable, taints: node.Spec.Taints}
		switch f := c.pidsOf(node, nil); {
		case pidstats.IsUnknown(f.err):
			rn.unknown = true
		case f.err != nil:
			// Without its pods the estimate would be too low: count the node
			// as full rather than risk sending pods there.
			c.logger.V(2).Info("Listing a node's pods failed; counting it as having no room", "node", node.Name, "err", f.err.Error())
		default:
			// A replacement must fit beside what the node holds now, its
			// terminating pods' PIDs included, as NodePIDs judges it.
			stats := f.stats
			stats.Used = f.usage.Held
			rn.free, rn.allocatable = stats.Free(), stats.Allocatable()
		}
		r.nodes[i] = rn
	}
	return r
}

// roomFor returns a node other than n's own that can take pod's need PIDs
// above NodePIDs' floor, after the PIDs reserved for the plan so far: its
// index, or -1 when a node of unknown headroom takes it (NodePIDs does not
// filter such a node), and whether there is one. A node no scheduler would
// place the pod on is no room: a cordoned one, or one with a NoSchedule or
// NoExecute taint the pod does not tolerate (the checks of the scheduler's
// NodeUnschedulable and TaintToleration filters; the evictor's nodeFit, when
// enabled, checks the rest).
func (n *nodeRelief) roomFor(pod *v1.Pod, need int64, reserved map[int]int64) (int, bool) {
	if n.room == nil {
		n.room = n.buildRoom()
	}
	r := n.room
	for i := range r.nodes {
		rn := &r.nodes[i]
		if rn.name == n.node.Name || !rn.admits(n.logger, pod) {
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

// admits reports whether the scheduler could place pod on the node as far
// as cordons and taints go. Tolerations with comparison operators (an alpha
// feature) are not taken to match: the node then counts as no room.
func (rn *roomNode) admits(logger klog.Logger, pod *v1.Pod) bool {
	if rn.unschedulable {
		return false
	}
	_, untolerated := v1helper.FindMatchingUntoleratedTaint(logger, rn.taints, pod.Spec.Tolerations, func(t *v1.Taint) bool {
		return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
	}, false)
	return !untolerated
}

// take counts need PIDs against node i once a pod counted against it is
// evicted.
func (r *room) take(i int, need int64) {
	r.nodes[i].free = max(r.nodes[i].free-need, 0)
}
