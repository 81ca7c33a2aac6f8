package relievenodepressure

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	podutil "sigs.k8s.io/descheduler/pkg/descheduler/pod"

	"github.com/headroom-k8s/headroom/pkg/ipstarved"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
)

// EvictionReasonIPStarved is EvictionsTotal's reason for the evictions of
// the ipStarved trigger.
const EvictionReasonIPStarved = "ipstarved"

// ReasonStarvedOfPodIP is the reason of the Normal Event the plugin
// records on each pod the ipStarved trigger evicts; its note is the
// eviction's reason.
const ReasonStarvedOfPodIP = "StarvedOfPodIP"

// starvedFresh is how recent the kubelet's latest report of a pod's
// starvation must be. Its recorder lets 25 Events of one pod through and
// then one every 5 minutes (client-go's spam filter), so a pod still
// failing may show no newer report for 5 minutes; a pod whose sandbox was
// made since has its PodReadyToStartContainers condition True and is no
// longer Waiting, whatever its Events say.
const starvedFresh = 10 * time.Minute

// podIPsOf is node's pod-IP figure for the room check and the trigger:
// its headroom.dev/ip-* sample, estimated over its pods as NodeIPs
// estimates it (ipstats.EstimateUsed). The error is ipstats.ParseNode's
// (ipstats.IsUnknown) or the pod lister's.
func (c *cycle) podIPsOf(node *v1.Node) (roomFigure, error) {
	maxAge := DefaultMaxSampleAge
	if t := c.args.IPStarved; t != nil {
		maxAge = t.MaxSampleAge.Duration
	}
	stats, err := ipstats.ParseNode(node.Annotations, c.now, maxAge)
	if err != nil {
		return roomFigure{}, err
	}
	pods, err := c.handle.GetPodsAssignedToNodeFunc()(node.Name, nil)
	if err != nil {
		return roomFigure{}, err
	}
	return roomFigure{known: true, used: ipstats.EstimateUsed(stats, slices.Values(pods)), allocatable: stats.Capacity}, nil
}

// starvedPlan is the ipStarved trigger's plan for one node.
type starvedPlan struct {
	n *nodeRelief
	// ips is the node's pod-IP figure: the trigger acts only where it is
	// known and leaves no free pod IP.
	ips roomFigure
	// starved are the node's pods starved of a pod IP past the grace, in
	// eviction order, and their evidence.
	starved []*v1.Pod
	since   map[types.UID]ipstarved.Starvation
	// why tells, for each waiting pod not evicted, why.
	why map[types.UID]string
	// waiting are the node's pods ipstarved.Waiting says wait for their
	// sandbox, by namespace and name.
	waiting []*v1.Pod
	plan    *plan
}

// planStarved plans the ipStarved trigger's evictions on node: nil when the
// trigger is off, the node's pod-IP figure unknown, or a pod IP free there.
// Only then, and only for the node's pods that wait for their sandbox, are
// Events read.
func (c *cycle) planStarved(ctx context.Context, node *v1.Node) (*starvedPlan, error) {
	t := c.args.IPStarved
	if t == nil {
		return nil, nil
	}
	logger := c.logger.WithValues("node", klog.KObj(node), "trigger", "ipStarved")
	ips, err := c.podIPsOf(node)
	switch {
	case ipstats.IsUnknown(err):
		logger.V(4).Info("Pod IPs unknown; the ipStarved trigger leaves the node alone", "reason", err.Error())
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing the pods on node %s: %w", node.Name, err)
	case ips.used < ips.allocatable:
		logger.V(4).Info("Node has free pod IPs", "podIPsUsed", fmt.Sprintf("%d/%d", ips.used, ips.allocatable))
		return nil, nil
	}
	pods, err := podutil.ListPodsOnANode(node.Name, c.handle.GetPodsAssignedToNodeFunc(), nil)
	if err != nil {
		return nil, fmt.Errorf("listing the pods on node %s: %w", node.Name, err)
	}
	sp := &starvedPlan{ips: ips, since: map[types.UID]ipstarved.Starvation{}, why: map[types.UID]string{}}
	for _, pod := range pods {
		if ipstarved.Waiting(pod) {
			sp.waiting = append(sp.waiting, pod)
		}
	}
	if len(sp.waiting) == 0 {
		return nil, nil
	}
	slices.SortFunc(sp.waiting, func(a, b *v1.Pod) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	n := &nodeRelief{cycle: c, node: node, order: newEvictionOrder(c.order, pods, c.now, *c.args.LowerPriorityFirst),
		logger: logger, tried: sets.New[types.UID]()}
	sp.n = n
	budget := *t.MaxEventsPerNode
	for _, pod := range sp.waiting {
		if budget <= 0 {
			sp.why[pod.UID] = fmt.Sprintf("not checked: the node's %d Events of this run (ipStarved.maxEventsPerNode) were listed", *t.MaxEventsPerNode)
			continue
		}
		events, err := c.sandboxFailures(ctx, pod, budget)
		if err != nil {
			logger.Error(err, "Not checking the pod this run", "pod", klog.KObj(pod))
			sp.why[pod.UID] = "its Events could not be listed"
			continue
		}
		budget -= int64(len(events))
		st, err := ipstarved.Check(pod, events, c.now.Add(-starvedFresh))
		if err != nil {
			sp.why[pod.UID] = "not starved of a pod IP: " + err.Error()
			continue
		}
		if waited := c.now.Sub(st.Since); waited < t.Grace.Duration {
			sp.why[pod.UID] = fmt.Sprintf("starved of a pod IP for %s, within ipStarved.grace %s", waited.Round(time.Second), t.Grace.Duration)
			continue
		}
		sp.since[pod.UID] = st
		sp.starved = append(sp.starved, pod)
	}
	sp.order()
	sp.plan = sp.planSteps()
	return sp, nil
}

// sandboxFailures lists pod's FailedCreatePodSandBox Events, at most limit,
// through the API with field selectors: no cache of every Event in the
// cluster. In the descheduler's dry-run mode the client is its sandbox,
// which holds no Events: no pod is found starved.
func (c *cycle) sandboxFailures(ctx context.Context, pod *v1.Pod, limit int64) ([]v1.Event, error) {
	client := c.handle.ClientSet()
	if client == nil {
		return nil, nil
	}
	selector := fields.AndSelectors(
		fields.OneTermEqualSelector("involvedObject.uid", string(pod.UID)),
		fields.OneTermEqualSelector("reason", ipstarved.ReasonFailedCreatePodSandBox),
	)
	list, err := client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{FieldSelector: selector.String(), Limit: limit})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// order puts the starved pods in eviction order: across workloads the
// longest starved first (each has waited for a pod IP since Since, and none
// frees anything on the node: the order only matters where the limits or
// the room run out), and within a workload its own delete order, as the
// ReplicaSet controller would pick among its pods (the ranking's k-th turn
// of a workload goes to the k-th of its starved pods in that order).
func (sp *starvedPlan) order() {
	bySince := slices.Clone(sp.starved)
	slices.SortStableFunc(bySince, func(a, b *v1.Pod) int {
		return cmp.Or(sp.since[a.UID].Since.Compare(sp.since[b.UID].Since),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	starved := sets.New[types.UID]()
	for _, pod := range sp.starved {
		starved.Insert(pod.UID)
	}
	mine := map[owner][]*v1.Pod{}
	for _, pod := range bySince {
		o := ownerOf(pod)
		if _, ok := mine[o]; ok {
			continue
		}
		for _, p := range sp.n.order.byOwner[o] {
			if starved.Has(p.UID) {
				mine[o] = append(mine[o], p)
			}
		}
	}
	sp.starved = sp.starved[:0]
	for _, pod := range bySince {
		o := ownerOf(pod)
		sp.starved = append(sp.starved, mine[o][0])
		mine[o] = mine[o][1:]
	}
}

// planSteps takes, in order, every starved pod not yet tried that may be
// evicted and whose replacement has room on another node (a free pod IP
// by NodeIPs' figure, and the other triggers' room), counting each
// replacement against its destination, within maxPodsToEvictPerNode.
func (sp *starvedPlan) planSteps() *plan {
	n := sp.n
	p := &plan{why: map[types.UID]string{}}
	budget, limited := n.budget()
	l := n.ledgerOf(nil)
	for _, pod := range sp.starved {
		if n.tried.Has(pod.UID) {
			continue
		}
		if limited && uint(len(p.steps)) >= budget {
			p.limit = *n.args.MaxPodsToEvictPerNode
			p.why[pod.UID] = fmt.Sprintf("beyond maxPodsToEvictPerNode %d", p.limit)
			continue
		}
		s := step{pod: pod, target: -1}
		why := n.excluded(pod)
		if why == "" {
			why = n.placeable(&s, l, func() string {
				return "no other node has a free pod IP for its replacement (NodeIPs' figure), within the other triggers' room"
			})
		}
		if why != "" {
			p.why[pod.UID] = why
			n.logger.V(4).Info("Passing over pod", "pod", klog.KObj(pod), "why", why)
			continue
		}
		st := sp.since[pod.UID]
		s.reasons = []string{fmt.Sprintf("has no free pod IP (%d/%d used), pod starved of one for %s (%s)",
			sp.ips.used, sp.ips.allocatable, n.now.Sub(st.Since).Round(time.Second), st.IPAM)}
		s.causes = []string{EvictionReasonIPStarved}
		l.add(s)
		p.steps = append(p.steps, s)
	}
	for uid, why := range p.why {
		sp.why[uid] = why
	}
	return p
}

// relieveStarved evicts node's pods starved of a pod IP (the ipStarved
// trigger), after the node's pressure relief; stop reports the total
// eviction limit. Each eviction is logged, counted in EvictionsTotal
// ("ipstarved") and, through the evictor, recorded as an Event on the pod
// whose reason names the node and the starvation.
func (c *cycle) relieveStarved(ctx context.Context, node *v1.Node) (stop bool, err error) {
	sp, err := c.planStarved(ctx, node)
	if err != nil || sp == nil || len(sp.plan.steps) == 0 {
		return false, err
	}
	sp.n.logger.V(2).Info("Evicting pods starved of a pod IP", "pods", podNames(sp.plan.steps),
		"podIPsUsed", fmt.Sprintf("%d/%d", sp.ips.used, sp.ips.allocatable))
	// The evictor's own Event on the pod is written in the background and
	// may be lost when a one-shot run exits; the plugin's are flushed.
	sp.n.evictedOne = func(s step, reason string) {
		if c.recorder != nil {
			c.recorder.Eventf(s.pod, nil, v1.EventTypeNormal, ReasonStarvedOfPodIP, "Evict", "%s", reason)
		}
	}
	return sp.n.carryOut(ctx, &pressure{}, sp.plan, sp.planSteps)
}

// starvedPodPlans are the ipStarved trigger's decisions on node's waiting
// pods, for Plan: the evictions first, in order, then the pods passed over.
func (sp *starvedPlan) podPlans() []PodPlan {
	var out []PodPlan
	planned := sets.New[types.UID]()
	for _, s := range sp.plan.steps {
		planned.Insert(s.pod.UID)
		out = append(out, PodPlan{Pod: s.pod, Evict: true, Reason: s.evictionReason(sp.n.node)})
	}
	for _, pod := range sp.waiting {
		if !planned.Has(pod.UID) {
			out = append(out, PodPlan{Pod: pod, Reason: "ipStarved: " + sp.why[pod.UID]})
		}
	}
	return out
}
