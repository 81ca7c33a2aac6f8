package nodeips

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/figure/figuretest"
	"github.com/headroom-k8s/headroom/plugins/internal/nodestate"
)

// TestNodeStateAgreesWithFilter: headroom_nodes counts a node known
// exactly when Filter judges it by its sample, before, at and after the
// sample's age limit, and for every kind of missing or invalid sample
// (figuretest.CheckNodeStates adds the cases every figure has). Every node
// with a sample is full, so Filter rejects the known ones.
func TestNodeStateAgreesWithFilter(t *testing.T) {
	args := defaultArgs()
	args.MaxSampleAge = metav1.Duration{Duration: 30 * time.Second}
	at := now.UTC().Format(time.RFC3339)
	full := func(name string, sampledAt time.Time) *corev1.Node { return ipNode(name, 13, 13, sampledAt) }
	invalid := func(name string, kv ...string) figuretest.NodeState {
		return figuretest.NodeState{Node: figuretest.AnnotatedNode(name, kv...), Want: nodestate.Invalid}
	}
	figuretest.CheckNodeStates(t, Definition, args, pod("p"), full,
		invalid("malformed", ipstats.AnnotationCapacity, "13", ipstats.AnnotationUsed, "-1", ipstats.AnnotationSampledAt, at),
		invalid("used-above-capacity", ipstats.AnnotationCapacity, "13", ipstats.AnnotationUsed, "14", ipstats.AnnotationSampledAt, at),
		invalid("partial", ipstats.AnnotationUsed, "13"),
	)
}
