package relievenodepressure

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	v1helper "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// placeable completes s, the eviction of s.pod, with where its replacement
// goes and the PodDisruptionBudgets it counts against, or says why it
// cannot be made: a budget that allows no more disruption after l, no room
// on another node the replacement may go to after l (noRoom says so, with
// the nodes the scheduler's static filters keep it off), or the evictor's
// pre-eviction filter.
func (n *nodeRelief) placeable(s *step, l ledger, noRoom func() string) string {
	pod := s.pod
	pdbs, err := n.matchingPDBs(pod)
	if err != nil {
		n.logger.Error(err, "Not planning to evict the pod this run", "pod", klog.KObj(pod))
		return "its PodDisruptionBudgets could not be listed"
	}
	for _, pdb := range pdbs {
		if pdb.Status.DisruptionsAllowed-l.disruptions[pdb.UID] < 1 {
			return fmt.Sprintf("PodDisruptionBudget %s allows no disruption", klog.KObj(pdb))
		}
	}
	target, need, barred, ok := n.roomFor(pod, l.reserved)
	if !ok {
		if barred != "" {
			return fmt.Sprintf("%s (other nodes it may not go to: %s)", noRoom(), barred)
		}
		return noRoom()
	}
	s.target, s.need = target, need
	s.charges = []charge{{target, need}}
	if !n.handle.Evictor().PreEvictionFilter(pod) {
		return "the evictor's pre-eviction filter keeps it (nodeFit: no other node fits it)"
	}
	for _, pdb := range pdbs {
		s.pdbs = append(s.pdbs, pdb.UID)
	}
	return ""
}

// matchingPDBs returns the PodDisruptionBudgets whose selector matches pod,
// as client-go's lister matches them (a nil selector matches nothing, an
// empty one every pod of the namespace). The lister reports "none" as an
// error; only other errors are returned.
func (n *nodeRelief) matchingPDBs(pod *v1.Pod) ([]*policyv1.PodDisruptionBudget, error) {
	if n.pdbs == nil {
		return nil, nil
	}
	pdbs, err := n.pdbs.GetPodPodDisruptionBudgets(pod)
	if err != nil && !isNoPDB(err) {
		return nil, fmt.Errorf("listing the PodDisruptionBudgets of pod %s: %w", klog.KObj(pod), err)
	}
	return pdbs, nil
}

// isNoPDB reports whether err is GetPodPodDisruptionBudgets' way of saying
// that no PodDisruptionBudget matches (an unexported fmt.Errorf upstream;
// TestIsNoPDB pins its text).
func isNoPDB(err error) bool {
	return strings.HasPrefix(err.Error(), "could not find PodDisruptionBudget for pod ")
}

// roomFor returns the index of a node other than n's own that can take
// pod's replacement after what the plan so far reserved, and what the
// replacement is counted for there: the scheduler could place the
// replacement on the node by its static filters (admits), and by each
// figure the node knows, what the replacement needs fits beside what the
// node holds and what is reserved (roomFigure.fits). A figure unknown there
// does not keep the pod off it, as the scheduler's plugins do not. Both are
// checked on the same node: room on a node the replacement may not use is
// no room. Where no node has room, barred says how many other nodes the
// static filters kept out and why ("" when none), for the plan's reason.
func (n *nodeRelief) roomFor(pod *v1.Pod, reserved map[int]reservation) (target int, need reservation, barred string, ok bool) {
	if n.room == nil {
		n.room = n.buildRoom()
	}
	kept := map[string]int{}
nodes:
	for i := range n.room.nodes {
		rn := &n.room.nodes[i]
		if rn.node.Name == n.node.Name || rn.full {
			continue
		}
		if why := rn.admits(n.logger, pod); why != "" {
			kept[why]++
			continue
		}
		var need reservation
		for j, rf := range rn.figures {
			if rf == nil {
				continue
			}
			want, ok := rf.need(n, pod)
			if !ok {
				continue
			}
			if !rf.fits(addSat(rf.used, reserved[i][j]), want) {
				continue nodes
			}
			need[j] = want
		}
		return i, need, "", true
	}
	var parts []string
	for _, why := range slices.Sorted(maps.Keys(kept)) {
		parts = append(parts, fmt.Sprintf("%d %s", kept[why], why))
	}
	return -1, reservation{}, strings.Join(parts, ", "), false
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

// replacement names what pod's replacement needs by each measured figure
// known on the node (n.need, with the node's own declared function):
// "its replacement's 1000 PIDs and 512Mi of memory".
func (n *nodeRelief) replacement(st *pressure, pod *v1.Pod) string {
	var needs []string
	for _, p := range st.by {
		if m, ok := p.(*measured); ok {
			needs = append(needs, m.amount(n.need(m.figure, m.declared, pod)))
		}
	}
	if len(needs) == 0 {
		return "its replacement"
	}
	return "its replacement's " + strings.Join(needs, " and ")
}

// room is what the cycle's other nodes can take of an evicted pod's
// replacement, by every enabled trigger and the pod-IP figure: a
// replacement must leave its destination within NodePIDs' floor, with a
// free pod IP, and at or below this plugin's own thresholds, or the relief
// of one node would push another over and be relieved in turn.
type room struct {
	nodes []roomNode
}

type roomNode struct {
	// node is the destination as the cycle listed it: the scheduler's
	// static filters are checked on it (admits), the node whose figures
	// these are.
	node *v1.Node
	// figures are the node's figures as the scheduler sees them, indexed
	// as the cycle's room checks; nil where the figure is unknown on the
	// node (the scheduler's plugins let pods onto such a node).
	figures []*roomFigure
	// full: the node's pods could not be listed; it takes nothing.
	full bool
}

// roomCheck reads a node's figure as a destination of replacements: nil
// and no error where the figure is unknown there, an error where the
// node's pods could not be listed.
type roomCheck func(c *cycle, node *v1.Node) (*roomFigure, error)

// roomFigure is a node's figure for the room check.
type roomFigure struct {
	// used is what the node holds by the figure, as a new pod must fit
	// beside it, and the replacements counted against it by evictions
	// made this cycle.
	used int64
	// need is what pod's replacement, evicted from n's node, takes of the
	// figure here; false where it takes none and is not checked.
	need func(n *nodeRelief, pod *v1.Pod) (int64, bool)
	// fits reports whether the node, holding used, takes need more.
	fits func(used, need int64) bool
}

// reservation is what the plan so far counts against a node for the
// replacements of pods it evicts, by each room check.
type reservation [maxFigures]int64

func (r reservation) plus(o reservation) reservation {
	for i := range r {
		r[i] = addSat(r[i], o[i])
	}
	return r
}

// roomChecks are the figures a destination is checked by: every enabled
// trigger's, and the ipStarved trigger's, pod IPs as NodeIPs reads them,
// whatever the triggers.
func roomChecks(triggers []*trigger) []roomCheck {
	checks := make([]roomCheck, 0, len(triggers)+1)
	for _, t := range triggers {
		checks = append(checks, t.room)
	}
	return append(checks, ipStarvedTrigger.room)
}

// buildRoom reads every node's figures once.
func (c *cycle) buildRoom() *room {
	r := &room{nodes: make([]roomNode, len(c.nodes))}
	for i, node := range c.nodes {
		rn := roomNode{node: node}
		for _, check := range c.rooms {
			rf, err := check(c, node)
			if err != nil {
				// Without its pods the estimate would be too low: count the
				// node as full rather than risk sending pods there.
				c.logger.V(2).Info("Listing a node's pods failed; counting it as having no room", "node", node.Name, "err", err.Error())
				rn.full = true
				break
			}
			rn.figures = append(rn.figures, rf)
		}
		r.nodes[i] = rn
	}
	return r
}

// Why the scheduler's static filters keep a replacement off a node, as
// roomFor counts the nodes.
const (
	keptCordoned = "cordoned"
	keptTainted  = "with a taint it does not tolerate"
	keptAffinity = "outside its node selector or required node affinity"
)

// admits says why the scheduler could not place pod's replacement (a pod
// of the same spec) on the node by its static filters, or "" where it
// could: NodeUnschedulable (a cordoned node takes only a pod that tolerates
// the unschedulable taint), TaintToleration (NoSchedule and NoExecute
// taints) and NodeAffinity (node selector and required node affinity, with
// the filter's own matcher). Tolerations with comparison operators (an alpha
// feature) are not taken to match: the node then counts as no room. The
// evictor's nodeFit, when enabled, checks requests on top.
func (rn *roomNode) admits(logger klog.Logger, pod *v1.Pod) string {
	node := rn.node
	if node.Spec.Unschedulable && !v1helper.TolerationsTolerateTaint(logger, pod.Spec.Tolerations,
		&v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}, false) {
		return keptCordoned
	}
	if _, untolerated := v1helper.FindMatchingUntoleratedTaint(logger, node.Spec.Taints, pod.Spec.Tolerations, func(t *v1.Taint) bool {
		return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
	}, false); untolerated {
		return keptTainted
	}
	if match, err := nodeaffinity.GetRequiredNodeAffinity(pod).Match(node); err != nil || !match {
		// An affinity the matcher cannot parse places the pod nowhere: the
		// scheduler's filter fails it too.
		return keptAffinity
	}
	return ""
}

// take counts a replacement against node i once the pod it replaces is
// evicted.
func (r *room) take(i int, need reservation) {
	for j, rf := range r.nodes[i].figures {
		if rf != nil {
			rf.used = addSat(rf.used, need[j])
		}
	}
}

// addSat adds non-negative figures, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return math.MaxInt64
}
