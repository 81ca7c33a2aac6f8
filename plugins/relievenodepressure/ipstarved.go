package relievenodepressure

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	podutil "sigs.k8s.io/descheduler/pkg/descheduler/pod"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/pkg/calicoipam"
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

// podIPs is a node's pod-IP figure.
type podIPs struct {
	used, allocatable int64
}

// podIPsOf is node's pod-IP figure for the room check and the trigger:
// its headroom.dev/ip-* sample, estimated over its pods as NodeIPs
// estimates it (ipstats.EstimateUsed), from the args' ipSource. The error
// is the source's// (ipstats.IsUnknown) or the pod lister's.
func (c *cycle) podIPsOf(node *v1.Node) (podIPs, error) {
	maxAge := DefaultMaxSampleAge
	if t := c.args.IPStarved; t != nil {
		maxAge = t.MaxSampleAge.Duration
	}
	stats, err := c.ips.Read(node, c.now, maxAge)
	if err != nil {
		return podIPs{}, err
	}
	pods, err := c.handle.GetPodsAssignedToNodeFunc()(node.Name, nil)
	if err != nil {
		return podIPs{}, err
	}
	return podIPs{used: ipstats.EstimateUsed(stats, slices.Values(pods)), allocatable: stats.Capacity}, nil
}

// podIPsRoom is node's pod-IP figure as a destination, whether or not the
// ipStarved trigger is on: a replacement that takes a pod IP (not on the
// host's network) needs a free one there, as NodeIPs' Filter with its
// default minFreeIPs of 0 has it.
func podIPsRoom(c *cycle, node *v1.Node) (*roomFigure, error) {
	ips, err := c.podIPsOf(node)
	switch {
	case ipstats.IsUnknown(err):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return &roomFigure{
		used: ips.used,
		need: func(_ *nodeRelief, pod *v1.Pod) (int64, bool) { return 1, ipstats.TakesIP(pod) },
		fits: func(used, need int64) bool { return addSat(used, need) <= ips.allocatable },
	}, nil
}

// starvedPlan is the ipStarved trigger's plan for one node.
type starvedPlan struct {
	n *nodeRelief
	// ips is the node's pod-IP figure: the trigger acts only where it is
	// known and leaves no free pod IP.
	ips podIPs
	// starved are the node's pods starved of a pod IP past the grace, in
	// eviction order, and their evidence.
	starved []*v1.Pod
	since   map[types.UID]ipstarved.Starvation
	// why tells, for each waiting pod not evicted, why.
	why map[types.UID]string
	// waiting are the node's pods ipstarved.Waiting says wait for their
	// sandbox, by namespace and name.
	waiting  []*v1.Pod
	pressure *pressure
	plan     *plan
}

// planStarved plans the ipStarved trigger's evictions on node: nil when the
// trigger is off, the node's pod-IP figure unknown, or a pod IP free there.
// Only then, and only for the node's pods that wait for their sandbox and
// that the plugin may evict, are their Events read from the cache
// (ipstarved_events.go), at most maxEventsPerNode of them, the namespaces
// taking turns.
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
	sp.n = c.newNodeRelief(node, pods, logger)
	// A pod the plugin would never evict costs no look at its Events.
	var candidates []*v1.Pod
	for _, pod := range sp.waiting {
		if why := sp.n.excluded(pod); why != "" {
			sp.why[pod.UID] = why
			continue
		}
		candidates = append(candidates, pod)
	}
	if len(candidates) > 0 && !c.sandboxFailuresSynced(ctx) {
		logger.Info("Not checking the node's waiting pods this run: the cache of FailedCreatePodSandBox Events has not synced")
		for _, pod := range candidates {
			sp.why[pod.UID] = "not checked: the cache of FailedCreatePodSandBox Events has not synced"
		}
		candidates = nil
	}
	budget := *t.MaxEventsPerNode
	for _, pod := range byNamespaceInTurn(candidates, c.firstNamespace) {
		events := c.sandboxFailuresOf(pod)
		cost := max(int64(len(events)), 1)
		if cost > budget {
			sp.why[pod.UID] = fmt.Sprintf("not checked: its %d Events exceed what is left of the node's %d of this run (ipStarved.maxEventsPerNode)", len(events), *t.MaxEventsPerNode)
			continue
		}
		budget -= cost
		st, err := ipstarved.Check(pod, events, c.now, c.now.Add(-starvedFresh))
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
	sp.pressure = &pressure{triggers: []*trigger{ipStarvedTrigger}, by: []projection{
		&starvedPods{starvedPlan: sp, left: int64(len(sp.starved))}}}
	sp.plan = sp.planSteps()
	return sp, nil
}

// ipStarvedTrigger is the ipStarved trigger: its pressure is its node's
// starved pods (starvedPods), planned by planStarved after the pressure
// triggers, with no debounce (its grace is one); its figure, pod IPs, is
// a destination's room whatever the triggers.
var ipStarvedTrigger = &trigger{key: EvictionReasonIPStarved, name: "podIPs", room: podIPsRoom}

// starvedPods is a node's projection by the ipStarved trigger: evicting
// each of its pods starved of a pod IP past the grace relieves it, in the
// plan's order (ranking), and the trigger evicts what it can.
type starvedPods struct {
	*starvedPlan
	// left are the starved pods the plan has not evicted yet.
	left int64
}

func (s *starvedPods) level() gauge {
	return gauge{start: int64(len(s.starved)), used: s.left, allocatable: s.ips.allocatable, bestEffort: true}
}

func (s *starvedPods) gain(pod *v1.Pod) (int64, error) {
	if _, ok := s.since[pod.UID]; ok {
		return 1, nil
	}
	return 0, nil
}

func (s *starvedPods) frees(pod *v1.Pod, g int64) (reason, whyNot string) {
	if g == 0 {
		return "", ""
	}
	st := s.since[pod.UID]
	return fmt.Sprintf("has no free pod IP (%d/%d used), pod starved of one for %s (%s)",
		s.ips.used, s.ips.allocatable, s.n.now.Sub(st.Since).Round(time.Second), st.IPAM), ""
}

func (s *starvedPods) remove(_ *v1.Pod, g int64) { s.left -= g }

func (s *starvedPods) clone() projection {
	c := *s
	return &c
}

func (s *starvedPods) accounts(*v1.Pod) bool { return true }

func (s *starvedPods) sampleTime() time.Time { return time.Time{} }

func (s *starvedPods) keysAndValues(prefix string) []any {
	return []any{logKey(prefix, "podIPsUsed"), fmt.Sprintf("%d/%d", s.ips.used, s.ips.allocatable)}
}

func (s *starvedPods) summary() string {
	return fmt.Sprintf("no free pod IP (%d/%d used), %d pods starved of one", s.ips.used, s.ips.allocatable, len(s.starved))
}

func (s *starvedPods) malformedNode() *malformedNode { return nil }

func (s *starvedPods) ranking(*nodeRelief) []*v1.Pod { return s.starved }

func (s *starvedPods) reclaimOrder() int { return 0 }

func (s *starvedPods) victimOrder() bool { return false }

func (s *starvedPods) noRoom() string {
	return "no other node has a free pod IP for its replacement (NodeIPs' figure), within the other triggers' room"
}

// byNamespaceInTurn orders pods (sorted by namespace and name) for their
// look at the Events: each namespace's first pod, then each one's second,
// and so on, so that one namespace with many waiting pods, or pods with many
// Events, cannot spend the node's budget before another's pods get a look.
// The namespaces go in name order from the first'th (modulo their number),
// so that from one run to the next each namespace comes first in turn and
// none is always the one the budget runs out before.
func byNamespaceInTurn(pods []*v1.Pod, first uint64) []*v1.Pod {
	var queues [][]*v1.Pod
	for i, pod := range pods {
		if i == 0 || pod.Namespace != pods[i-1].Namespace {
			queues = append(queues, nil)
		}
		queues[len(queues)-1] = append(queues[len(queues)-1], pod)
	}
	if len(queues) > 0 {
		k := int(first % uint64(len(queues)))
		queues = slices.Concat(queues[k:], queues[:k])
	}
	out := make([]*v1.Pod, 0, len(pods))
	for len(out) < len(pods) {
		for i, q := range queues {
			if len(q) > 0 {
				out = append(out, q[0])
				queues[i] = q[1:]
			}
		}
	}
	return out
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

// planSteps plans the starved pods' evictions with the core's plan, in
// the trigger's order, each replacement counted against its destination,
// within maxPodsToEvictPerNode; the plan's reasons for passing over a pod
// add to the Events' (sp.why).
func (sp *starvedPlan) planSteps() *plan {
	p := sp.n.plan(sp.pressure)
	for uid, why := range p.why {
		if _, ok := sp.why[uid]; !ok {
			sp.why[uid] = why
		}
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
	if err != nil || sp == nil {
		return false, err
	}
	if len(sp.plan.steps) == 0 {
		if budget, why := sp.n.budgetHit(sp.plan); budget != "" {
			sp.n.budgetStop(budget, why)
		}
		return false, nil
	}
	sp.n.logger.V(2).Info("Evicting pods starved of a pod IP", "pods", podNames(sp.plan.steps),
		"podIPsUsed", fmt.Sprintf("%d/%d", sp.ips.used, sp.ips.allocatable))
	// The evictor's own Event on the pod is written in the background and
	// may be lost when a one-shot run exits; the plugin's are written
	// before the command exits (eventrecorder.FlushAll).
	sp.n.evictedOne = func(s step, reason string) {
		if c.recorder != nil {
			c.recorder.Eventf(s.pod, nil, v1.EventTypeNormal, ReasonStarvedOfPodIP, "Evict", "%s", reason)
		}
	}
	return sp.n.carryOut(ctx, sp.pressure, sp.plan, sp.planSteps)
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
		why, ok := sp.why[pod.UID]
		switch {
		case ok:
		case sp.plan.budget != "":
			why = "beyond the eviction budget: " + sp.plan.budgetSpent
		case sp.plan.limit > 0:
			why = fmt.Sprintf("beyond maxPodsToEvictPerNode %d", sp.plan.limit)
		}
		if !planned.Has(pod.UID) {
			out = append(out, PodPlan{Pod: pod, Reason: "ipStarved: " + why})
		}
	}
	return out
}

// calicoSyncWait is how long building the plugin waits for the first lists
// of Calico's objects; until then every node's pod-IP figures are unknown.
const calicoSyncWait = 30 * time.Second

// ipSourceOf returns the pod-IP source that ipSource names (validated):
// with config.IPSourceCalicoIPAM the process's one watch of Calico's
// objects (calicoipam.DefaultSource, through the descheduler's client).
func ipSourceOf(ipSource string) (ipstats.Source, error) {
	if ipSource != config.IPSourceCalicoIPAM {
		return ipstats.Annotations{}, nil
	}
	src, err := calicoipam.DefaultSource()
	if err != nil {
		return nil, err
	}
	if err := src.WaitSynced(calicoSyncWait); err != nil {
		klog.Background().Info("Calico's IPAM objects are not listed yet: pod-IP headroom unknown", "plugin", PluginName, "err", err)
	}
	return src, nil
}
