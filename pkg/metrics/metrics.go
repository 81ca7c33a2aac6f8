// Package metrics holds the metrics Headroom's scheduler and descheduler
// plugins share. They are component-base metrics in legacyregistry, which
// headroom-scheduler and headroom-descheduler both serve on /metrics, next
// to upstream's own.
package metrics

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// InvalidAnnotations counts malformed Headroom annotations a plugin saw
// and ignored (falling back to a default, or treating the node's headroom
// as unknown), by plugin and annotation key. Each count comes with a log
// line and a Warning Event on the object that carries the annotation.
var InvalidAnnotations = metrics.NewCounterVec(&metrics.CounterOpts{
	Namespace:      "headroom",
	Name:           "invalid_annotations_total",
	Help:           "Malformed Headroom annotations seen and ignored, by plugin and annotation key.",
	StabilityLevel: metrics.ALPHA,
}, []string{"plugin", "annotation"})

// Nodes is the number of nodes in each headroom state of a scheduler
// plugin that reads a node sample (NodePIDs, NodeIPs), by plugin, scheduler
// profile and state: known, unknown (no sample), stale (older than the
// plugin's maxSampleAge) or invalid (annotations the plugin ignores).
// Unknown, stale and invalid nodes are neither filtered nor favoured by the
// plugin. plugins/internal/nodestate keeps it.
var Nodes = metrics.NewGaugeVec(&metrics.GaugeOpts{
	Namespace:      "headroom",
	Name:           "nodes",
	Help:           "Nodes by the state of their headroom sample as a scheduler plugin sees it (known, unknown, stale, invalid), by plugin and profile.",
	StabilityLevel: metrics.ALPHA,
}, []string{"plugin", "profile", "state"})

var registerOnce sync.Once

// Register registers the metrics in legacyregistry; plugins call it from
// their constructors, and later calls do nothing.
func Register() {
	registerOnce.Do(func() {
		legacyregistry.MustRegister(InvalidAnnotations, Nodes)
	})
}

// InvalidAnnotation counts one malformed annotation seen and ignored by
// plugin.
func InvalidAnnotation(plugin, annotation string) {
	InvalidAnnotations.WithLabelValues(plugin, annotation).Inc()
}
