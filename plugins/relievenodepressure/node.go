package relievenodepressure

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	podutil "sigs.k8s.io/descheduler/pkg/descheduler/pod"

	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// relieve plans the relief of node and carries the plan out; stop reports
// that the total eviction limit is reached.
func (c *cycle) relieve(ctx context.Context, node *v1.Node) (stop bool, err error) {
	n, st, p, err := c.planNode(node)
	if err != nil || p == nil {
		return false, err
	}
	if p.aboveThreshold {
		if budget, why := n.budgetHit(p); budget != "" {
			// Not unrelievable: the window slides, and the plan runs once
			// the budget allows it. No Event: a spent budget would repeat
			// it every run; the metric and the plan say so.
			n.budgetStop(budget, why)
			left, _, _, _ := n.windowLeft()
			return budget == BudgetTotal && left == 0, nil
		}
		n.unrelievable(st, p)
		return false, nil
	}
	n.logger.V(2).Info("Relief planned", "pods", podNames(p.steps))
	NodesTotal.WithLabelValues(ResultRelieved).Inc()
	defer c.recordRelief(n, st)
	return n.carryOut(ctx, st, p, func() *plan { return n.plan(st) })
}

// planNode assesses node and, when a trigger fired in enough consecutive
// samples, plans its relief over the node's pods in eviction order. p is
// nil when no trigger fired, or not yet in enough samples (c.waiting says).
func (c *cycle) planNode(node *v1.Node) (n *nodeRelief, st *pressure, p *plan, err error) {
	logger := c.logger.WithValues("node", klog.KObj(node))
	// Every pod that is not Succeeded or Failed takes part: the figures count
	// them, and the delete order's ranks count a controller's active pods.
	pods, err := podutil.ListPodsOnANode(node.Name, c.handle.GetPodsAssignedToNodeFunc(), nil)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listing the pods on node %s: %w", node.Name, err)
	}
	st = c.assess(logger, node, pods)
	if !st.triggered() {
		c.calm(node)
		// Most nodes of a run are here: their figures are rendered only
		// for a log that shows them.
		if v := logger.V(4); v.Enabled() {
			v.Info("Node within thresholds", st.keysAndValues("")...)
		}
		return nil, st, nil, nil
	}
	if wait := c.observe(node, st); wait != "" {
		logger.V(2).Info("Node above threshold; waiting for the pressure to last", append(append(st.keysAndValues(""), st.thresholdsAndTargets()...), "seen", wait)...)
		return nil, st, nil, nil
	}
	logger.V(2).Info("Node above threshold, planning its relief", append(append(st.keysAndValues(""), st.thresholdsAndTargets()...), "pods", len(pods))...)

	for _, p := range st.by {
		if p == nil {
			continue
		}
		if w := p.malformedNode(); w != nil {
			c.warnNode(logger, node, w.reason, w.annotation, w.err, w.consequence)
		}
	}
	n = c.newNodeRelief(node, pods, logger)
	for _, pod := range n.order.neutral {
		n.checkPriority(pod)
	}
	return n, st, n.plan(st), nil
}

// assess computes the node's projections by the enabled triggers.
func (c *cycle) assess(logger klog.Logger, node *v1.Node, pods []*v1.Pod) *pressure {
	st := &pressure{triggers: c.triggers, by: make([]projection, len(c.triggers))}
	for i, t := range c.triggers {
		p, err := c.assessTrigger(t, node, pods)
		if err != nil {
			logger.V(4).Info("Figure unknown; its trigger leaves the node alone", "figure", t.name, "reason", err.Error())
		}
		st.by[i] = p
	}
	return st
}

// newNodeRelief starts the relief of node, with pods on it.
func (c *cycle) newNodeRelief(node *v1.Node, pods []*v1.Pod, logger klog.Logger) *nodeRelief {
	return &nodeRelief{cycle: c, node: node, order: newEvictionOrder(c.order, pods, c.now, *c.args.LowerPriorityFirst), logger: logger, tried: sets.New[types.UID]()}
}

// nodeRelief is the relief of one node within a cycle.
type nodeRelief struct {
	*cycle
	node   *v1.Node
	order  evictionOrder
	logger klog.Logger
	// tried holds the pods whose eviction was requested, successfully or
	// not: a re-plan passes over them.
	tried sets.Set[types.UID]
	// evicted counts this plugin's successful evictions from the node;
	// evictedPods are those pods.
	evicted     uint
	evictedPods []*v1.Pod
	// refused holds the pods whose eviction the API server refused this
	// run, and why: a re-plan does not pass over them as evicted.
	refused map[types.UID]string
	// warned holds the pods whose malformed annotations were reported.
	warned sets.Set[types.UID]
	// rankings caches the kubelet's ranking of the node's pods by figure.
	rankings map[string][]*v1.Pod
	// evictedOne, when set, is told of each successful eviction.
	evictedOne func(s step, reason string)
	// budgetNamespaces tells, for each namespace whose pods the
	// per-namespace eviction budget kept from the plan, why.
	budgetNamespaces map[string]string
}

// ReasonNodePressureUnrelievable is the reason of the Warning Event on a
// Node above a threshold that no plan within the limits brings to or below
// it: nothing was evicted.
const ReasonNodePressureUnrelievable = "NodePressureUnrelievable"

// maxNamedUsers is how many of a node's largest users of a figure the
// Warning Event of an unrelievable node names.
const maxNamedUsers = 5

// unrelievable records that no plan relieves the node: a log line, the
// metric and one Warning Event on the Node naming its largest users of the
// figures that fired and why each is not evicted.
func (n *nodeRelief) unrelievable(st *pressure, p *plan) {
	NodesTotal.WithLabelValues(ResultUnrelievable).Inc()
	var b strings.Builder
	if p.blockedBy != nil {
		fmt.Fprintf(&b, "the pod the kubelet would evict next, %s, cannot be evicted (%s), and the pods after it are not the cause (%s); nothing evicted.",
			klog.KObj(p.blockedBy), p.why[p.blockedBy.UID], st.summary())
	} else {
		fmt.Fprintf(&b, "no eviction within the limits brings the node to its threshold (%s); nothing evicted.", st.summary())
	}
	planned := sets.New[types.UID]()
	for _, s := range p.steps {
		planned.Insert(s.pod.UID)
	}
	var sections []string
	named := namedFigures(st)
	for _, m := range named {
		// Two figures' users share the Event's note: fewer of each.
		users := n.largestUsers(m, (maxNamedUsers+len(named)-1)/len(named))
		if len(users) == 0 {
			continue
		}
		var sb strings.Builder
		fmt.Fprintf(&sb, "Largest %s users:", m.noun)
		for i, u := range users {
			why, ok := p.why[u.pod.UID]
			switch {
			case ok:
			case planned.Has(u.pod.UID):
				why = "evictable, not enough on its own"
			case p.limit > 0:
				why = fmt.Sprintf("beyond maxPodsToEvictPerNode %d", p.limit)
			case p.blockedBy != nil:
				why = p.afterBlocked()
			default:
				why = "not reached"
			}
			sep := ";"
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(&sb, "%s %s (%s): %s", sep, klog.KObj(u.pod), m.amount(u.held), why)
		}
		sections = append(sections, sb.String())
	}
	if len(sections) > 0 {
		b.WriteString(" " + strings.Join(sections, ". "))
	}
	note := b.String()
	n.logger.Info("Warning: node cannot be relieved", append(st.keysAndValues(""), "reason", ReasonNodePressureUnrelievable, "note", note)...)
	if n.recorder != nil {
		n.recorder.Eventf(n.node, nil, v1.EventTypeWarning, ReasonNodePressureUnrelievable, "Relieve", "%s", note)
	}
}

// namedFigures are the measured figures whose largest users an
// unrelievable node's Event names: those that fired or, where only the OOM
// trigger fired, every one known on the node.
func namedFigures(st *pressure) []*measured {
	var fired, known []*measured
	for _, p := range st.by {
		m, ok := p.(*measured)
		if !ok {
			continue
		}
		known = append(known, m)
		if m.level().triggered() {
			fired = append(fired, m)
		}
	}
	if len(fired) > 0 {
		return fired
	}
	return known
}

type user struct {
	pod  *v1.Pod
	held int64
}

// largestUsers returns the node's largest users of m's figure at the
// sample, at most limit: the listed pods still on the node, largest first;
// without a list, the pods by what they would free.
func (n *nodeRelief) largestUsers(m *measured, limit int) []user {
	byUID := make(map[types.UID]*v1.Pod, len(n.order.neutral))
	for _, pod := range n.order.neutral {
		byUID[pod.UID] = pod
	}
	var users []user
	for _, e := range m.pods.Entries() {
		if pod, ok := byUID[e.UID]; ok && len(users) < limit {
			users = append(users, user{pod, e.Value})
		}
	}
	if len(users) > 0 {
		return users
	}
	for _, pod := range n.order.neutral {
		g, _ := m.gain(pod)
		users = append(users, user{pod, g})
	}
	slices.SortStableFunc(users, func(a, b user) int { return cmp.Compare(b.held, a.held) })
	return users[:min(len(users), limit)]
}

// warn logs err about pod, records a Warning Event on it and counts it in
// headroom_invalid_annotations_total.
func (c *cycle) warn(logger klog.Logger, pod *v1.Pod, reason string, err error) {
	logger.Info("Warning: malformed pod annotation", "pod", klog.KObj(pod), "reason", reason, "err", err.Error())
	annotation := pidstats.AnnotationPodPIDs
	if reason == ReasonMalformedDeletePriority {
		annotation = c.order.PriorityAnnotation
	}
	headroommetrics.InvalidAnnotation(PluginName, annotation)
	if c.recorder != nil {
		c.recorder.Eventf(pod, nil, v1.EventTypeWarning, reason, PluginName, "%s", err.Error())
	}
}

// warnNode logs err about an annotation of node, with what the plugin does
// instead (consequence), records a Warning Event on the Node and counts it in
// headroom_invalid_annotations_total, as warn does for a pod.
func (c *cycle) warnNode(logger klog.Logger, node *v1.Node, reason, annotation string, err error, consequence string) {
	logger.Info("Warning: malformed node annotation; "+consequence, "reason", reason, "annotation", annotation, "err", err.Error())
	headroommetrics.InvalidAnnotation(PluginName, annotation)
	if c.recorder != nil {
		c.recorder.Eventf(node, nil, v1.EventTypeWarning, reason, PluginName, "%s; %s", err.Error(), consequence)
	}
}

// checkPriority reports a malformed delete-priority annotation once; the
// order already counts it as 0.
func (n *nodeRelief) checkPriority(pod *v1.Pod) {
	if _, err := n.cycle.RelieveNodePressure.order.Priority(pod); err != nil {
		n.warnOnce(pod, ReasonMalformedDeletePriority, err)
	}
}

func (n *nodeRelief) warnOnce(pod *v1.Pod, reason string, err error) {
	if n.warned == nil {
		n.warned = sets.New[types.UID]()
	}
	key := types.UID(reason + "/" + string(pod.UID))
	if n.warned.Has(key) {
		return
	}
	n.warned.Insert(key)
	n.warn(n.logger, pod, reason, err)
}
