package relievenodepressure

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/descheduler/pkg/descheduler/evictions"
)

// carryOut requests the plan's evictions in order. An eviction refused by
// the API server (a PodDisruptionBudget that changed since it was read, the
// per-namespace limit) frees nothing: the rest of the order is planned
// again from the figures reached so far, and the evictions go on only if
// that plan still brings the node to or below its threshold; otherwise the
// node is left as it is, partly relieved, until the next run sees a new
// sample. An eviction whose outcome is unknown (outcomeUnknown: the API
// server did not answer) ends the node's relief for this cycle: the pod may
// be gone, and the next cycle's figures show whether it is. stop reports the
// total eviction limit. replan makes the plan again from what is reached.
func (n *nodeRelief) carryOut(ctx context.Context, st *pressure, p *plan, replan func() *plan) (stop bool, err error) {
	for len(p.steps) > 0 {
		s := p.steps[0]
		p.steps = p.steps[1:]
		n.tried.Insert(s.pod.UID)
		podLogger := n.logger.WithValues("pod", klog.KObj(s.pod))
		// Counted against the eviction budget before it is requested, so
		// that the bound holds exactly, within a run and across replicas.
		budget, why, err := n.reserve(ctx, n.node.Name, s.pod)
		if err != nil {
			podLogger.Error(err, "Not evicting: the eviction budget's ledger could not be written; leaving the node for the next run")
			return false, nil
		}
		if budget != "" {
			n.budgetStop(budget, why)
			if budget != BudgetNamespace {
				return budget == BudgetTotal, nil
			}
			// Its namespace's pods are kept now (excluded): plan again.
			if p = replan(); p.aboveThreshold {
				n.logger.V(2).Info("The rest of the order no longer brings the node to its threshold; leaving it for the next sample", st.keysAndValues("")...)
				return false, nil
			}
			continue
		}
		before := st.keysAndValues("before")
		reason := s.evictionReason(n.node)
		err = n.handle.Evictor().Evict(ctx, s.pod, evictions.EvictOptions{StrategyName: PluginName, Reason: reason})
		if err == nil {
			n.evicted++
			for _, cause := range s.causes {
				EvictionsTotal.WithLabelValues(cause).Inc()
			}
			n.evictedPods = append(n.evictedPods, s.pod)
			pdbs, err := n.matchingPDBs(s.pod)
			if err != nil {
				// Later plans this run may then count on a disruption the
				// budget no longer allows; the API server refuses that one.
				podLogger.Error(err, "Evicted pod's disruption not counted against its PodDisruptionBudgets")
			}
			for _, pdb := range pdbs {
				if n.disrupted == nil {
					n.disrupted = map[types.UID]int32{}
				}
				n.disrupted[pdb.UID]++
			}
			st.remove(s.pod, s.gains)
			for _, c := range s.charges {
				n.room.take(c.target, c.need)
			}
			n.saveRelief(ctx, st)
			podLogger.V(2).Info("Evicted pod to relieve node", append(append(before, st.keysAndValues("after")...), "reason", reason)...)
			if n.evictedOne != nil {
				n.evictedOne(s, reason)
			}
			continue
		}
		var (
			nodeLimit      *evictions.EvictionNodeLimitError
			namespaceLimit *evictions.EvictionNamespaceLimitError
			totalLimit     *evictions.EvictionTotalLimitError
		)
		if outcomeUnknown(err) {
			// Recorded as evicted: if it was, the next runs must not evict
			// again for the PIDs it held.
			n.evictedPods = append(n.evictedPods, s.pod)
			n.saveRelief(ctx, st)
			// Planning again would take the pods after it: if the API
			// server did evict it, that is one eviction more than the plan.
			// The next cycle sees the pod terminating or gone (its listed
			// PIDs freed) if it was evicted, and plans from there.
			podLogger.Info("Warning: eviction outcome unknown: the API server did not answer or failed; leaving the node for the next cycle", append(st.keysAndValues(""), "err", err.Error())...)
			// Its count against the budget stays: it may have been evicted.
			return false, nil
		}
		// Refused: the pod stays, and its count is given back.
		n.release(ctx, n.node.Name, s.pod)
		switch {
		case errors.As(err, &nodeLimit):
			n.logger.V(2).Info("Node reached the evictor's per-node limit before the plan was done; set maxPodsToEvictPerNode to the policy's maxNoOfPodsToEvictPerNode", st.keysAndValues("")...)
			return false, nil
		case errors.As(err, &totalLimit):
			n.logger.V(2).Info("Reached the total eviction limit; stopping", st.keysAndValues("")...)
			return true, nil
		case errors.As(err, &namespaceLimit):
			podLogger.V(2).Info("Namespace reached the per-namespace eviction limit; planning again without its pods")
			n.limited.Insert(s.pod.Namespace)
		default:
			podLogger.V(2).Info("Eviction refused; planning again without the pod", "err", err.Error())
			if n.refused == nil {
				n.refused = map[types.UID]string{}
			}
			n.refused[s.pod.UID] = "its eviction was refused: " + err.Error()
		}
		if p = replan(); p.aboveThreshold {
			n.logger.V(2).Info("The rest of the order no longer brings the node to its threshold; leaving it for the next sample", st.keysAndValues("")...)
			return false, nil
		}
	}
	if st.pending() {
		n.logger.V(2).Info("Node relieved to or below its threshold, not to its target", st.keysAndValues("")...)
	} else {
		n.logger.V(2).Info("Node relieved", st.keysAndValues("")...)
	}
	return false, nil
}

// outcomeUnknown reports whether an eviction's error leaves open whether
// the pod was evicted: the API server did not answer (connection refused or
// reset, as while it restarts; a timeout; the request's context ended) or
// answered with a server error (5xx: e.g. its own timeout, 504, after which
// the request may still complete, or 503 while it shuts down). Anything else
// is a refusal that leaves the pod in place: a 4xx answer (the evictor
// reports a PodDisruptionBudget's 429 and a 404 in errors of its own) or
// one of the evictor's limits.
func outcomeUnknown(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Code >= http.StatusInternalServerError
	}
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// evictionReason is the reason the eviction of the step's pod gives: the
// evictor logs it and records it as the reason of the pod's Event.
func (s step) evictionReason(node *v1.Node) string {
	return eventReason(fmt.Sprintf("%s: node %s %s", PluginName, node.Name, strings.Join(s.reasons, ", ")))
}

// eventReason keeps an eviction reason within the API server's limit on an
// Event's reason, which the evictor copies it into.
func eventReason(s string) string {
	if len(s) <= maxEventReason {
		return s
	}
	return strings.ToValidUTF8(s[:maxEventReason], "")
}

// maxEventReason is the API server's limit on an Event's reason; the
// evictor uses the eviction reason as the Event's reason.
const maxEventReason = 128
