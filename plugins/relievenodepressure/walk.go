package relievenodepressure

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	kubelettypes "k8s.io/kubernetes/pkg/kubelet/types"
	deschedulerutils "sigs.k8s.io/descheduler/pkg/utils"
)

// plan makes the node's relief from the projection st, over the pods not
// yet tried, in two passes (see evictionOrder). First it walks the
// kubelet's ranking for the signal that fired (walk; the neutral order
// where only the OOM trigger did) and takes every pod that may be evicted
// and moves a pending trigger toward its target, until the node is
// projected at or below its targets or the per-node budget is spent: that
// fixes how many pods each workload gives up. Then each workload's share
// goes to its pods in its own delete order (honourOwnerOrder).
//
// The walk follows the projection: once the signal the kubelet reclaims
// first (memory) is at its target, the next pod comes from the ranking of
// the next one still pending, as the kubelet moves to the next threshold.
// A pod passed over stays passed over: the ledger only grows and the
// pending triggers only shrink, so nothing that kept it can lift.
func (n *nodeRelief) plan(st *pressure) *plan {
	proj := st.clone()
	p := &plan{why: map[types.UID]string{}}
	budget, limited := n.budget()
	windowLeft, windowBudget, windowWhy, windowed := n.windowLeft()
	l := n.ledgerOf(nil)
	visited := sets.New[types.UID]()
	ranked := false
	for proj.pending() {
		order, by := n.walk(proj)
		i := slices.IndexFunc(order, func(pod *v1.Pod) bool { return !visited.Has(pod.UID) })
		if i < 0 {
			break
		}
		pod := order[i]
		visited.Insert(pod.UID)
		p.walked = append(p.walked, pod)
		if _, refused := n.refused[pod.UID]; n.tried.Has(pod.UID) && !refused {
			continue
		}
		if windowed && uint(len(p.steps)) >= windowLeft {
			p.budget, p.budgetSpent = windowBudget, windowWhy
			break
		}
		if limited && uint(len(p.steps)) >= budget {
			p.limit = *n.args.MaxPodsToEvictPerNode
			break
		}
		s, why := n.consider(proj, pod, l)
		if why != "" {
			p.why[pod.UID] = why
			n.logger.V(4).Info("Passing over pod", "pod", klog.KObj(pod), "why", why)
			if by != nil && by.victimOrder() && s.stuck {
				// The kubelet evicts this pod next, and this plugin cannot,
				// whatever the reason. The pods after it in the ranking are
				// not the pressure's cause: evicting them would move
				// bystanders and leave the cause where it is.
				p.blockedBy = pod
				break
			}
			continue
		}
		ranked = ranked || by != nil
		l.add(s)
		p.steps = append(p.steps, s)
		proj.remove(pod, s.gains)
	}
	rest, _ := n.walk(proj)
	for _, pod := range rest {
		if !visited.Has(pod.UID) {
			p.walked = append(p.walked, pod)
		}
	}
	p.aboveThreshold = proj.aboveThreshold()
	if p.aboveThreshold {
		return p
	}
	if !proj.pending() && !ranked {
		// The kubelet's rankings put the largest users first within a
		// priority; a plan on them is a prefix of the kubelet's own order
		// and is not pruned, which would trade a lower-priority pod the
		// kubelet evicts first for a higher-priority one.
		p.steps = prune(st, p.steps)
	}
	n.honourOwnerOrder(st, p)
	return p
}

// plan is a projected relief: the evictions, in order, and the outcome.
type plan struct {
	steps []step
	// aboveThreshold: the plan leaves a trigger above its threshold; it is
	// not carried out.
	aboveThreshold bool
	// why tells, for each pod the plan passed over, why it is not evicted.
	why map[types.UID]string
	// limit is the per-node budget the plan ran into, or 0.
	limit uint
	// walked is every pod of the node in the order the plan walked them,
	// those it did not reach last in the order it would have gone on in.
	walked []*v1.Pod
	// blockedBy is the pod the kubelet's ranking put next that would move
	// a pending trigger but cannot be evicted, for any reason (step.stuck;
	// why[blockedBy.UID] says which): the walk ended there.
	blockedBy *v1.Pod
	// budget is the eviction budget (BudgetTotal, BudgetNode) the plan ran
	// into, or ""; budgetSpent says how.
	budget, budgetSpent string
}

// afterBlocked says why a pod after blockedBy in the walk is not evicted.
func (p *plan) afterBlocked() string {
	return fmt.Sprintf("ranked after %s, which cannot be evicted: not the pressure's cause", klog.KObj(p.blockedBy))
}

// step is one planned eviction.
type step struct {
	pod   *v1.Pod
	gains gains // what it frees by each measured figure
	// target is the index in room.nodes the replacement is counted
	// against, for need; -1 when no room check applies.
	target int
	need   reservation
	// charges are what the eviction counts against the room of other
	// nodes for the rest of the cycle: the target and need of the pod the
	// ranking planned for this turn of the pod's workload. A pod its
	// workload's own order puts in that pod's place (honourOwnerOrder) is
	// charged as that pod, and the last of the workload's pods also for the
	// turns its own order did without, so that no workload's annotations
	// change the room the other nodes' plans see.
	charges []charge
	// pdbs are the PodDisruptionBudgets the eviction counts against.
	pdbs    []types.UID
	reasons []string
	// causes are the keys of the triggers the pod is evicted for: the
	// reasons EvictionsTotal counts it under.
	causes []string
	// stuck: the pod would move a pending trigger and is one the kubelet
	// evicts, but this plugin cannot evict it (no room, a budget, a filter,
	// a limit, a refusal): in the kubelet's victim order the walk ends there.
	stuck bool
}

// charge is a replacement counted against other nodes' room: need at
// room.nodes[target].
type charge struct {
	target int
	need   reservation
}

// budget is how many more evictions a plan may hold on this node, and
// whether there is a limit at all.
func (n *nodeRelief) budget() (uint, bool) {
	if l := n.args.MaxPodsToEvictPerNode; l != nil {
		return *l - min(*l, n.evicted), true
	}
	return 0, false
}

// consider returns the step evicting pod would be, or why it is not taken;
// step.stuck says whether the reason ends a walk of the kubelet's victim
// order. A terminating or mirror pod (spared) is passed over at once.
// The gains come next, a lookup per figure: whether the pod would move a
// pending trigger decides whether a refusal makes it stuck, and a pod that
// moves none is passed over before the costlier checks. Then a refusal
// earlier this run, this plugin's and the evictor's exclusions, and
// placeable (the pre-eviction filter, whose nodeFit lists nodes, last). l is
// what the plan so far takes of other nodes' room and of
// PodDisruptionBudgets; the caller adds the step to it when it takes the
// pod.
func (n *nodeRelief) consider(proj *pressure, pod *v1.Pod, l ledger) (step, string) {
	s := step{pod: pod, target: -1}
	if why := spared(pod); why != "" {
		return s, why
	}
	var belowFloor []string
	var malformed []*malformedPod
	for i, p := range proj.by {
		if p == nil {
			continue
		}
		g, err := p.gain(pod)
		var bad *malformedPod
		if errors.As(err, &bad) {
			malformed = append(malformed, bad)
		}
		s.gains[i] = g
		if !p.level().pending() {
			continue
		}
		reason, whyNot := p.frees(pod, g)
		if reason == "" {
			if whyNot != "" {
				belowFloor = append(belowFloor, whyNot)
			}
			continue
		}
		s.reasons = append(s.reasons, reason)
		s.causes = append(s.causes, proj.triggers[i].key)
	}
	// A malformed declaration is reported on the pods this plugin may
	// evict, whatever they free.
	warn := func() {
		for _, bad := range malformed {
			n.warnOnce(pod, bad.reason, bad.err)
		}
	}
	if len(s.reasons) == 0 {
		if len(malformed) > 0 && n.excluded(pod) == "" {
			warn()
		}
		if len(belowFloor) > 0 {
			return s, strings.Join(belowFloor, "; ")
		}
		return s, "evicting it would not move the node toward its target"
	}
	why, refused := n.refused[pod.UID]
	if !refused {
		why = n.excluded(pod)
	}
	if why == "" {
		warn()
		why = n.placeable(&s, l, func() string {
			for _, p := range proj.by {
				if r, ok := p.(interface{ noRoom() string }); ok {
					return r.noRoom()
				}
			}
			return fmt.Sprintf("no other node has room for %s within NodePIDs' floor and this plugin's thresholds", n.replacement(proj, pod))
		})
	}
	// A critical pod as the kubelet defines it (a static or mirror pod,
	// priority at or above system-critical) is one the kubelet never
	// evicts: no victim of its ranking, so its refusal ends no walk.
	s.stuck = why != "" && !kubelettypes.IsCriticalPod(pod)
	return s, why
}

// spared says why pod is passed over before anything else, or "": it is
// terminating (what it holds is already being freed), or a static pod's
// mirror pod. The kubelet evicts neither, so neither ends the walk.
func spared(pod *v1.Pod) string {
	switch {
	case pod.DeletionTimestamp != nil:
		return "terminating: what it holds is already being freed"
	case deschedulerutils.IsMirrorPod(pod):
		// Whatever the evictor is told (its evict annotation lets any pod
		// through): the kubelet runs a static pod from its manifest and
		// makes its mirror pod again; evicting it frees nothing.
		return "a static pod's mirror pod: the kubelet runs it whatever the API says"
	}
	return ""
}

// excluded says why pod is not evicted whatever it frees, though the
// kubelet would: not one of the args' pods, kept by the evictor's filter,
// or of a namespace at its limit; "" when none holds.
func (n *nodeRelief) excluded(pod *v1.Pod) string {
	switch {
	case !n.schedulers.Has(schedulerName(pod)):
		return fmt.Sprintf("placed by %s, not by one of schedulerNames %v", schedulerName(pod), sets.List(n.schedulers))
	case n.include.Len() > 0 && !n.include.Has(pod.Namespace), n.exclude.Has(pod.Namespace):
		return fmt.Sprintf("namespace %s is excluded", pod.Namespace)
	case !n.selector.Matches(labels.Set(pod.Labels)):
		return "not selected by labelSelector"
	case !n.handle.Evictor().Filter(pod):
		return "the evictor's filter keeps it (DefaultEvictor: e.g. DaemonSet, bare, system-critical or local-storage pod, minReplicas, minPodAge)"
	case n.limited.Has(pod.Namespace):
		return fmt.Sprintf("namespace %s reached the per-namespace eviction limit", pod.Namespace)
	}
	if why := n.namespaceBudgetSpent(pod.Namespace); why != "" {
		return why
	}
	return ""
}

// schedulerName is the pod's scheduler, "default-scheduler" when unset (the
// API server defaults it so; test objects may leave it empty).
func schedulerName(pod *v1.Pod) string {
	if pod.Spec.SchedulerName == "" {
		return v1.DefaultSchedulerName
	}
	return pod.Spec.SchedulerName
}

// ledger is what a plan's steps take of other nodes' room and of
// PodDisruptionBudgets, on top of the cycle's evictions so far.
type ledger struct {
	reserved    map[int]reservation
	disruptions map[types.UID]int32
}

// ledgerOf counts steps on top of the cycle's evictions.
func (n *nodeRelief) ledgerOf(steps []step) ledger {
	l := ledger{reserved: map[int]reservation{}, disruptions: maps.Clone(n.disrupted)}
	if l.disruptions == nil {
		l.disruptions = map[types.UID]int32{}
	}
	for _, s := range steps {
		l.add(s)
	}
	return l
}

func (l ledger) add(s step) {
	if s.target >= 0 {
		l.reserved[s.target] = l.reserved[s.target].plus(s.need)
	}
	for _, uid := range s.pdbs {
		l.disruptions[uid]++
	}
}

// prune drops, earliest first, every step of a plan on the neutral order
// (the OOM trigger's) that reaches the targets without it: a pod early in
// the order that frees little is not evicted when a later one frees enough
// on its own. The neutral order walks pods as the ReplicaSet controller
// would delete them, not by what they free;
// on a real node three small pods of a ReplicaSet with more replicas there
// went before the one pod that held the PIDs. The steps kept stay in order,
// and the plan still reaches the targets. Plans are at most
// maxPodsToEvictPerNode long, so the quadratic walk costs nothing.
func prune(st *pressure, steps []step) []step {
	for i := 0; i < len(steps); {
		if st.without(slices.Delete(slices.Clone(steps), i, i+1)).pending() {
			i++
			continue
		}
		steps = slices.Delete(steps, i, i+1)
	}
	return steps
}

// honourOwnerOrder hands each workload's share of the plan to its pods in
// the workload's own delete order (delete-priority, then the ReplicaSet
// controller's rules with pod-deletion-cost), as the ReplicaSet controller
// would pick them on scale-down. The annotations choose which of a
// workload's pods go, never another workload's: the
// other workloads' steps stay exactly as the ranking's pass made them, and
// the workload's pods stand in for its planned ones only if as many of
// them, taken in its own order, bring the node at least as far by every
// trigger, within the room on other nodes and the PodDisruptionBudgets.
// Otherwise the neutral pass's pods stand, and a log line says so. Its own
// order may need fewer of its pods (a larger one first), never none; the
// room the replacements take on other nodes is charged as the ranking
// planned it, whichever of the workload's pods go.
func (n *nodeRelief) honourOwnerOrder(st *pressure, p *plan) {
	goal := st.without(p.steps)
	var owners []owner
	for _, s := range p.steps {
		if o := ownerOf(s.pod); !slices.Contains(owners, o) {
			owners = append(owners, o)
		}
	}
	for _, owner := range owners {
		if !n.order.annotated.Has(owner) {
			// Without annotations the workload's order is the neutral one,
			// and the plan already took its pods by it and by what they free.
			continue
		}
		var others, mine []step
		for _, s := range p.steps {
			if ownerOf(s.pod) == owner {
				mine = append(mine, s)
			} else {
				others = append(others, s)
			}
		}
		proj := st.without(others)
		l := n.ledgerOf(others)
		var chosen []step
		why := map[types.UID]string{}
		for _, pod := range n.order.byOwner[owner] {
			// At least one: a workload that the ranking planned to give up
			// pods gives up one at least, whatever its annotations.
			if len(chosen) > 0 && proj.reaches(goal) {
				break
			}
			if n.tried.Has(pod.UID) {
				continue
			}
			if len(chosen) == len(mine) {
				break
			}
			s, reason := n.consider(proj, pod, l)
			if reason != "" {
				why[pod.UID] = reason
				n.logger.V(4).Info("Passing over pod", "pod", klog.KObj(pod), "why", reason)
				continue
			}
			l.add(s)
			chosen = append(chosen, s)
			proj.remove(pod, s.gains)
		}
		if len(chosen) == 0 || !proj.reaches(goal) {
			n.logger.V(2).Info("A workload's own delete order does not relieve the node as far with as many of its pods; evicting the pods the neutral order chose",
				"owner", owner, "pods", podNames(mine))
			continue
		}
		for uid, reason := range why {
			p.why[uid] = reason
		}
		if slices.EqualFunc(chosen, mine, func(a, b step) bool { return a.pod.UID == b.pod.UID }) {
			continue
		}
		// Each of the workload's turns is charged to other nodes' room as
		// the ranking planned it (step.charges).
		for i := range chosen {
			chosen[i].charges = mine[i].charges
		}
		for _, s := range mine[len(chosen):] {
			last := &chosen[len(chosen)-1]
			last.charges = append(slices.Clip(last.charges), s.charges...)
		}
		for _, s := range mine {
			if !slices.ContainsFunc(chosen, func(c step) bool { return c.pod.UID == s.pod.UID }) {
				p.why[s.pod.UID] = "its workload's delete-priority and pod-deletion-cost put other pods of it first"
			}
		}
		// The workload's pods take the place of its first planned one.
		at := slices.IndexFunc(p.steps, func(s step) bool { return ownerOf(s.pod) == owner })
		rest := slices.DeleteFunc(slices.Clone(p.steps), func(s step) bool { return ownerOf(s.pod) == owner })
		before := 0
		for _, s := range p.steps[:at] {
			if ownerOf(s.pod) != owner {
				before++
			}
		}
		p.steps = slices.Insert(rest, before, chosen...)
	}
}

func podNames(steps []step) []string {
	names := make([]string, len(steps))
	for i, s := range steps {
		names[i] = klog.KObj(s.pod).String()
	}
	return names
}
