package relievenodepressure

import (
	"math"

	v1 "k8s.io/api/core/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// room is what the cycle's other nodes can take of an evicted pod's
// replacement, by every enabled trigger: a replacement must leave its
// destination within NodePIDs' floor and at or below this plugin's own
// thresholds, or the relief of one node would push another over and be
// relieved in turn.
type room struct {
	nodes []roomNode
}

type roomNode struct {
	name string
	// PIDs: used and allocatable as NodePIDs sees them (the shared
	// estimate over the node's pods, terminating ones included); pidsKnown
	// is false where the node's PID headroom is unknown (NodePIDs lets pods
	// onto such a node) or the PID trigger is off.
	pidsUsed, pidsAllocatable int64
	pidsKnown                 bool
	// oom is the node's memory model; nil where the OOM trigger is off or
	// the node's memory is unknown.
	oom *oomkill.Node
	// memoryTaken is the worst-case memory of the replacements counted
	// against the node by evictions made this cycle.
	memoryTaken int64
	// full: the node's pods could not be listed; it takes nothing.
	full bool
	// unschedulable (cordoned) nodes are never room; taints are checked
	// against each pod's tolerations.
	unschedulable bool
	taints        []v1.Taint
}

// reservation is what the plan so far counts against a node for the
// replacements of pods it evicts.
type reservation struct {
	pids, memory int64
}

func (r reservation) plus(o reservation) reservation {
	return reservation{pids: addSat(r.pids, o.pids), memory: addSat(r.memory, o.memory)}
}

func (r reservation) minus(o reservation) reservation {
	return reservation{pids: max(r.pids-o.pids, 0), memory: max(r.memory-o.memory, 0)}
}

// buildRoom reads every node's figures once: PIDs through pidsOf, memory
// through the OOM model.
func (c *cycle) buildRoom() *room {
	r := &room{nodes: make([]roomNode, len(c.nodes))}
	for i, node := range c.nodes {
		rn := roomNode{name: node.Name, unschedulable: node.Spec.Unschedulable, taints: node.Spec.Taints}
		if c.args.PIDs != nil {
			switch f := c.pidsOf(node, nil); {
			case pidstats.IsUnknown(f.err):
			case f.err != nil:
				// Without its pods the estimate would be too low: count the
				// node as full rather than risk sending pods there.
				c.logger.V(2).Info("Listing a node's pods failed; counting it as having no room", "node", node.Name, "err", f.err.Error())
				rn.full = true
			default:
				// A replacement must fit beside what the node holds now, its
				// terminating pods' PIDs included, as NodePIDs judges it.
				rn.pidsUsed, rn.pidsAllocatable, rn.pidsKnown = f.usage.Held, f.stats.Allocatable(), true
			}
		}
		if t := c.args.OOM; t != nil && !rn.full {
			pods, err := c.handle.GetPodsAssignedToNodeFunc()(node.Name, nil)
			if err != nil {
				c.logger.V(2).Info("Listing a node's pods failed; counting it as having no room", "node", node.Name, "err", err.Error())
				rn.full = true
			} else if model, err := c.assessOOM(t, node, pods); err == nil {
				rn.oom = model.model
			}
		}
		r.nodes[i] = rn
	}
	return r
}

// roomFor returns the index of a node other than n's own that can take
// pod's replacement after what the plan so far reserved: within NodePIDs'
// floor and the PID threshold, and at or below the OOM threshold, for the
// figures the node has (a figure unknown there does not keep the pod off
// it, as the scheduler's plugins do not). It also returns what the
// replacement is counted for there (its PIDs when there is no room). A node no scheduler would place the pod
// on is no room: a cordoned one, or one with a NoSchedule or NoExecute taint
// the pod does not tolerate (the checks of the scheduler's NodeUnschedulable
// and TaintToleration filters; the evictor's nodeFit, when enabled, checks
// the rest).
func (n *nodeRelief) roomFor(pod *v1.Pod, reserved map[int]reservation) (int, reservation, bool) {
	if n.room == nil {
		n.room = n.buildRoom()
	}
	var pidNeed int64
	if t := n.args.PIDs; t != nil {
		pidNeed, _ = pidstats.PodPIDs(pod, *t.DefaultPodPIDs)
	}
	incoming := oomkill.NewIncoming(pod)
	for i := range n.room.nodes {
		rn := &n.room.nodes[i]
		if rn.name == n.node.Name || rn.full || !rn.admits(n.logger, pod) {
			continue
		}
		var need reservation
		if rn.pidsKnown {
			used := addSat(rn.pidsUsed, reserved[i].pids)
			free := max(rn.pidsAllocatable-used, 0)
			if !n.floor.Fits(free, rn.pidsAllocatable, pidNeed) ||
				exceeds(addSat(used, pidNeed), rn.pidsAllocatable, *n.args.PIDs.ThresholdPercent) {
				continue
			}
			need.pids = pidNeed
		}
		if rn.oom != nil {
			worst := incoming.WorstOn(rn.oom)
			total := addSat(addSat(rn.oom.TotalWorst(), rn.memoryTaken), addSat(reserved[i].memory, worst))
			if exceeds(max(total-rn.oom.Allocatable(), 0), rn.oom.Allocatable(), *n.args.OOM.ThresholdPercent) {
				continue
			}
			need.memory = worst
		}
		return i, need, true
	}
	return -1, reservation{pids: pidNeed}, false
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

// take counts a replacement against node i once the pod it replaces is
// evicted.
func (r *room) take(i int, need reservation) {
	rn := &r.nodes[i]
	rn.pidsUsed = addSat(rn.pidsUsed, need.pids)
	rn.memoryTaken = addSat(rn.memoryTaken, need.memory)
}

// addSat adds non-negative figures, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}
