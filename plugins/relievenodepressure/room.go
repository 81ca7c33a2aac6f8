package relievenodepressure

import (
	"math"

	v1 "k8s.io/api/core/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/oomkill"
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
	// figures are the node's measured figures as the scheduler sees them;
	// not known where the figure is unknown on the node (the scheduler's
	// plugins let pods onto such a node) or its trigger is off.
	figures [numFigures]roomFigure
	// oom is the node's memory model; nil where the OOM trigger is off or
	// the node's memory is unknown.
	oom *oomkill.Node
	// ips is the node's pod-IP figure as NodeIPs sees it; not known where
	// the node's figure is unknown (NodeIPs lets pods onto such a node).
	ips roomFigure
	// worstTaken is the worst-case memory of the replacements counted
	// against the node by evictions made this cycle.
	worstTaken int64
	// full: the node's pods could not be listed; it takes nothing.
	full bool
	// unschedulable (cordoned) nodes are never room; taints are checked
	// against each pod's tolerations.
	unschedulable bool
	taints        []v1.Taint
}

// roomFigure is a node's figure for the room check.
type roomFigure struct {
	known bool
	// used is the shared estimate over the node's pods, terminating ones
	// included (Usage.Held: what a new pod must fit beside), and the
	// replacements counted against it by evictions made this cycle.
	used, allocatable int64
	// declared is what a replacement is counted for there, as the
	// estimate counts a pod placed after the sample.
	declared func(*v1.Pod) (int64, error)
}

// reservation is what the plan so far counts against a node for the
// replacements of pods it evicts: by each measured figure, and the
// worst-case memory of the OOM model.
type reservation struct {
	figures gains
	worst   int64
	// ips is the pod IPs the replacements take: 1 each on the pod network.
	ips int64
}

func (r reservation) plus(o reservation) reservation {
	for id := range r.figures {
		r.figures[id] = addSat(r.figures[id], o.figures[id])
	}
	r.worst = addSat(r.worst, o.worst)
	r.ips = addSat(r.ips, o.ips)
	return r
}

// buildRoom reads every node's figures once: the measured ones through
// figureOf, memory's worst case through the OOM model.
func (c *cycle) buildRoom() *room {
	r := &room{nodes: make([]roomNode, len(c.nodes))}
	for i, node := range c.nodes {
		rn := roomNode{name: node.Name, unschedulable: node.Spec.Unschedulable, taints: node.Spec.Taints}
		for _, f := range c.measures {
			if f == nil || rn.full {
				continue
			}
			switch nf := c.figureOf(f, node, nil); {
			case nf.unknown:
			case nf.err != nil:
				// Without its pods the estimate would be too low: count the
				// node as full rather than risk sending pods there.
				c.logger.V(2).Info("Listing a node's pods failed; counting it as having no room", "node", node.Name, "err", nf.err.Error())
				rn.full = true
			default:
				// A replacement must fit beside what the node holds now, its
				// terminating pods included, as the scheduler judges it.
				rn.figures[f.id] = roomFigure{known: true, used: nf.usage.Held, allocatable: nf.allocatable, declared: nf.declared}
			}
		}
		if !rn.full {
			ips, err := c.podIPsOf(node)
			switch {
			case err == nil:
				rn.ips = ips
			case !ipstats.IsUnknown(err):
				c.logger.V(2).Info("Listing a node's pods failed; counting it as having no room", "node", node.Name, "err", err.Error())
				rn.full = true
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
// pod's replacement after what the plan so far reserved, and what the
// replacement is counted for there: by each measured figure the node
// knows, its need (n.need) added to the node's estimate stays at or below the
// trigger's threshold (and, for PIDs, above NodePIDs' floor); by the pod-IP
// figure NodeIPs reads, a free pod IP for it; by the OOM
// model, the node's worst-case shortfall with it stays at or below the OOM
// threshold. A figure unknown there does not keep the pod off it, as the
// scheduler's plugins do not. A node no scheduler would place the pod on is
// no room: a cordoned one, or one with a NoSchedule or NoExecute taint the
// pod does not tolerate (the checks of the scheduler's NodeUnschedulable and
// TaintToleration filters; the evictor's nodeFit, when enabled, checks the
// rest).
func (n *nodeRelief) roomFor(pod *v1.Pod, reserved map[int]reservation) (int, reservation, bool) {
	if n.room == nil {
		n.room = n.buildRoom()
	}
	incoming := oomkill.NewIncoming(pod)
nodes:
	for i := range n.room.nodes {
		rn := &n.room.nodes[i]
		if rn.name == n.node.Name || rn.full || !rn.admits(n.logger, pod) {
			continue
		}
		var need reservation
		for id := range rn.figures {
			rf := &rn.figures[id]
			if !rf.known {
				continue
			}
			f := n.measures[id]
			want := n.need(f, rf.declared, pod)
			used := addSat(rf.used, reserved[i].figures[id])
			if f.fits != nil && !f.fits(max(rf.allocatable-used, 0), rf.allocatable, want) ||
				exceeds(addSat(used, want), rf.allocatable, f.threshold) {
				continue nodes
			}
			need.figures[id] = want
		}
		if rf := &rn.ips; rf.known && ipstats.TakesIP(pod) {
			// NodeIPs' Filter with its default minFreeIPs of 0.
			if addSat(rf.used, addSat(reserved[i].ips, 1)) > rf.allocatable {
				continue
			}
			need.ips = 1
		}
		if rn.oom != nil {
			worst := incoming.WorstOn(rn.oom)
			total := addSat(addSat(rn.oom.TotalWorst(), rn.worstTaken), addSat(reserved[i].worst, worst))
			if exceeds(max(total-rn.oom.Allocatable(), 0), rn.oom.Allocatable(), *n.args.OOM.ThresholdPercent) {
				continue
			}
			need.worst = worst
		}
		return i, need, true
	}
	return -1, reservation{}, false
}

// need is what pod's replacement is counted for by figure f on a node whose
// declared function is declared: the larger of what the pod declares there
// (at least the figure's declaredFloor) and what the node agent listed it
// holding on its own node. A replacement
// holds what the pod held: a pod listed at 5,000 PIDs that declares nothing
// is not moved to a node that can take 1,488, though the scheduler,
// counting its declaration, would place it there.
func (n *nodeRelief) need(f *figure, declared func(*v1.Pod) (int64, error), pod *v1.Pod) int64 {
	want, _ := declared(pod)
	want = max(want, f.declaredFloor)
	if nf := n.figureOf(f, n.node, nil); nf.err == nil {
		if held, ok := nf.pods.LookupPod(pod); ok {
			want = max(want, held)
		}
	}
	return want
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
	for id := range rn.figures {
		if rf := &rn.figures[id]; rf.known {
			rf.used = addSat(rf.used, need.figures[id])
		}
	}
	rn.worstTaken = addSat(rn.worstTaken, need.worst)
	if rn.ips.known {
		rn.ips.used = addSat(rn.ips.used, need.ips)
	}
}

// addSat adds non-negative figures, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}
