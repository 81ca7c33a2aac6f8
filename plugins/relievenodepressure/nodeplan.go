package relievenodepressure

import (
	"context"
	"fmt"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	podutil "sigs.k8s.io/descheduler/pkg/descheduler/pod"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
)

// NodePlan is what Deschedule would do on one node now: the node's figures,
// and every pod on it in the order the plan walks them, each with the
// eviction it would get or why it is skipped. Plan returns it; Deschedule
// makes the same plan (planNode) before it evicts anything.
type NodePlan struct {
	Node string
	// Figures are the node's figures as the plugin logs them (key, value
	// pairs: PIDsUsed, memoryUsed, OOMShortfall), before the plan and as
	// projected after its evictions.
	Before, After []any
	// Thresholds are the thresholds and targets of the triggers that fired.
	Thresholds []any
	// Unknown tells, for each enabled trigger whose figures are unknown on
	// the node ("PIDs", "memory", "OOM"), why: that trigger leaves the node
	// alone.
	Unknown map[string]string
	// Triggered: a trigger is above its threshold; otherwise nothing is
	// planned and Pods is empty.
	Triggered bool
	// Waiting: a trigger is above its threshold, but in fewer consecutive
	// samples than pressureSamples; it says how many. Nothing is evicted
	// now: the rest of the plan is the one that runs if the pressure
	// lasts, with the figures of now.
	Waiting string
	// Relieves: the plan brings the node to or below its thresholds, so its
	// evictions would be requested. Otherwise nothing is evicted, and the
	// plugin records a NodePressureUnrelievable Warning Event on the Node,
	// unless Budget says why.
	Relieves bool
	// Budget, when not empty, says which eviction budget (evictionBudget)
	// keeps the plan from relieving the node now: nothing is evicted until
	// the window slides past enough earlier evictions.
	Budget string
	// StarvedOfPodIP are the ipStarved trigger's decisions, on a node with
	// no free pod IP, on its pods that wait for their sandbox: its
	// evictions first, in order, then the pods it passes over and why. In
	// a run they come after the pressure triggers' evictions of the node.
	StarvedOfPodIP []PodPlan
	// Pods are the node's pods in eviction order: in the order the plan
	// walked them (the kubelet's ranking for the signal that fired, or the
	// neutral order), each annotated workload's turns taken by its pods in
	// its own order (see evictionOrder).
	Pods []PodPlan
}

// PodPlan is the plan's decision on one pod.
type PodPlan struct {
	Pod *v1.Pod
	// Evict: the plan evicts the pod (when Relieves).
	Evict bool
	// PIDs is what evicting it frees by the PID trigger's count; 0 when
	// the PID trigger is off or its figures unknown.
	PIDs int64
	// MemoryBytes is what evicting it frees by the memory trigger's count;
	// 0 when the memory trigger is off or its figures unknown.
	MemoryBytes int64
	// Reason is the eviction's reason, as the evictor records it on the
	// pod's Event, or why the pod is skipped.
	Reason string
}

// Plan returns what Deschedule, given nodes (the descheduler's ready nodes:
// the room check looks at the others), would do on node now, as the first
// node of a cycle. It evicts nothing and records no Event; the evictor's
// Filter and PreEvictionFilter are consulted as Deschedule consults them.
func (d *RelieveNodePressure) Plan(ctx context.Context, nodes []*v1.Node, node *v1.Node) (*NodePlan, error) {
	quiet := *d
	quiet.recorder = nil
	// The records as the next run reads them, in a copy of its own: a plan
	// changes nothing.
	records, err := d.loadState(ctx)
	if err != nil {
		return nil, err
	}
	logger := klog.FromContext(ctx).WithValues("plugin", PluginName)
	c := quiet.newCycle(logger, nodes, records.clone())
	n, st, p, err := c.planNode(node)
	if err != nil {
		return nil, err
	}
	waiting := c.waiting[node.Name]
	if waiting != "" {
		// Shown all the same: the plan a run makes once the pressure has
		// lasted, that is the same cycle with pressureSamples met.
		lasted := quiet
		args := *quiet.args
		args.PressureSamples = ptr.To[int32](1)
		lasted.args = &args
		c = lasted.newCycle(logger, nodes, records.clone())
		if n, st, p, err = c.planNode(node); err != nil {
			return nil, err
		}
	}
	out := &NodePlan{Node: node.Name, Before: st.keysAndValues(""), Unknown: map[string]string{}, Waiting: waiting}
	pods, _ := podutil.ListPodsOnANode(node.Name, c.handle.GetPodsAssignedToNodeFunc(), nil)
	for i, t := range c.triggers {
		if st.by[i] == nil {
			if _, err := c.assessTrigger(t, node, pods); err != nil {
				out.Unknown[t.name] = err.Error()
			}
		}
	}
	if out.Waiting != "" {
		out.Triggered, out.Thresholds = true, st.thresholdsAndTargets()
	}
	if err := c.planStarvedInto(ctx, out, node); err != nil {
		return nil, err
	}
	if p == nil {
		return out, nil
	}
	out.Triggered, out.Relieves, out.Thresholds = true, !p.aboveThreshold, st.thresholdsAndTargets()
	if p.aboveThreshold {
		_, out.Budget = n.budgetHit(p)
	}
	steps := map[types.UID]step{}
	for _, s := range p.steps {
		steps[s.pod.UID] = s
	}
	out.After = st.without(p.steps).keysAndValues("")
	for _, pod := range n.order.effective(p.walked) {
		pp := PodPlan{Pod: pod}
		if m := st.of(keyPIDs); m != nil {
			pp.PIDs, _ = m.gain(pod)
		}
		if m := st.of(keyMemory); m != nil {
			pp.MemoryBytes, _ = m.gain(pod)
		}
		s, planned := steps[pod.UID]
		why, passed := p.why[pod.UID]
		switch {
		case planned && out.Relieves:
			pp.Evict, pp.Reason = true, s.evictionReason(node)
		case planned:
			pp.Reason = "evictable, but the plan does not bring the node to its threshold: nothing is evicted"
		case passed:
			pp.Reason = why
		case p.budget != "":
			pp.Reason = "beyond the eviction budget: " + p.budgetSpent
		case p.limit > 0:
			pp.Reason = fmt.Sprintf("beyond maxPodsToEvictPerNode %d", p.limit)
		case p.blockedBy != nil:
			pp.Reason = p.afterBlocked()
		default:
			pp.Reason = "not needed: the evictions before it bring the node to its target"
		}
		out.Pods = append(out.Pods, pp)
	}
	return out, nil
}

// planStarvedInto adds the ipStarved trigger's plan for node to out: the
// node's pod-IP figure, and, where its starved pods are evicted, the plan
// are listed in StarvedOfPodIP.
func (c *cycle) planStarvedInto(ctx context.Context, out *NodePlan, node *v1.Node) error {
	if c.args.IPStarved == nil {
		return nil
	}
	ips, err := c.podIPsOf(node)
	if ipstats.IsUnknown(err) {
		out.Unknown["podIPs"] = err.Error()
		return nil
	}
	if err != nil {
		return err
	}
	out.Before = append(out.Before, "podIPsUsed", fmt.Sprintf("%d/%d", ips.used, ips.allocatable))
	sp, err := c.planStarved(ctx, node)
	if err != nil || sp == nil {
		return err
	}
	out.StarvedOfPodIP = sp.podPlans()
	return nil
}
