package relievenodepressure

import (
	"sync"

	"k8s.io/component-base/metrics"
	deschedulermetrics "sigs.k8s.io/descheduler/metrics"
)

// The plugin's metrics, served with the descheduler's own on its secure
// port's /metrics (legacyregistry), e.g.
// headroom_relieve_node_pressure_nodes_total{result="unrelievable"}.
var (
	// NodesTotal counts the nodes found above a threshold, by what the
	// plugin did about them: "relieved" (the plan reached the threshold and
	// its evictions were requested; the count includes nodes where the
	// evictor's limits or an API refusal cut the plan short) or
	// "unrelievable" (no plan within the limits reaches the threshold:
	// nothing evicted, a Warning Event on the Node).
	NodesTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "headroom",
		Subsystem:      "relieve_node_pressure",
		Name:           "nodes_total",
		Help:           "Nodes RelieveNodePressure found above a threshold, by result: relieved or unrelievable.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})

	// EventsDroppedTotal counts the Events the plugin dropped because too
	// many were waiting to be written.
	EventsDroppedTotal = metrics.NewCounter(&metrics.CounterOpts{
		Namespace:      "headroom",
		Subsystem:      "relieve_node_pressure",
		Name:           "events_dropped_total",
		Help:           "Events RelieveNodePressure dropped because too many were waiting to be written.",
		StabilityLevel: metrics.ALPHA,
	})

	// EvictionsTotal counts the evictions the plugin requested that
	// succeeded, by the figure the pod was evicted for: "pids", "memory"
	// (each above its threshold), "oom" (the node's OOM shortfall) or
	// "ipstarved" (a pod starved of a pod IP, the ipStarved trigger). An
	// eviction that relieves two counts under both; the descheduler's
	// descheduler_pods_evicted_total counts each once.
	EvictionsTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "headroom",
		Subsystem:      "relieve_node_pressure",
		Name:           "evictions_total",
		Help:           "Pods RelieveNodePressure evicted, by reason: pids, memory, oom or ipstarved; an eviction for two reasons counts under both.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})

	// BudgetExhaustedTotal counts the reliefs an eviction budget
	// (evictionBudget) stopped, by budget: "total" (cluster-wide),
	// "node" or "namespace". A node whose plan waits for the window to
	// slide counts once per run: every second in Deployment mode.
	BudgetExhaustedTotal = metrics.NewCounterVec(&metrics.CounterOpts{
		Namespace:      "headroom",
		Subsystem:      "relieve_node_pressure",
		Name:           "budget_exhausted_total",
		Help:           "Reliefs RelieveNodePressure did not carry out because an eviction budget over its window was spent, by budget: total, node or namespace.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"budget"})

	registerMetrics sync.Once
)

// EvictionReasonOOM is the reason of EvictionsTotal for evictions that cut
// the node's OOM shortfall; the measured figures count under their keys
// ("pids", "memory").
const EvictionReasonOOM = "oom"

// Results of NodesTotal.
const (
	ResultRelieved     = "relieved"
	ResultUnrelievable = "unrelievable"
)

// RegisterMetrics registers the plugin's metrics with the registry the
// descheduler serves, once.
func RegisterMetrics() {
	registerMetrics.Do(func() {
		deschedulermetrics.RegisterMetrics(NodesTotal, EventsDroppedTotal, EvictionsTotal, BudgetExhaustedTotal)
	})
}
