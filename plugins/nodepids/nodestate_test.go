package nodepids

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/figure/figuretest"
	"github.com/headroom-k8s/headroom/plugins/internal/nodestate"
)

// TestNodeStateAgreesWithFilter: headroom_nodes counts a node known
// exactly when Filter judges it by its sample, before, at and after the
// sample's age limit, and for every kind of missing or invalid sample
// (figuretest.CheckNodeStates adds the cases every figure has).
func TestNodeStateAgreesWithFilter(t *testing.T) {
	big := pod("big", strconv.Itoa(pidstats.MaxNodePIDs))
	args := defaultArgs()
	args.MaxSampleAge = metav1.Duration{Duration: 30 * time.Second}
	at := now.UTC().Format(time.RFC3339)
	roomy := func(name string, sampledAt time.Time) *corev1.Node { return pidNode(name, 32768, 0, 1000, sampledAt) }
	figuretest.CheckNodeStates(t, Definition, args, big, roomy,
		figuretest.NodeState{Node: pidNode("full", 32768, 0, 32768, now), Want: nodestate.Known},
		figuretest.NodeState{Node: figuretest.AnnotatedNode("reserved-alone", pidstats.AnnotationReserved, "10"), Want: nodestate.Unknown},
		figuretest.NodeState{Node: figuretest.AnnotatedNode("malformed", pidstats.AnnotationCapacity, "32Ki", pidstats.AnnotationUsed, "1",
			pidstats.AnnotationSampledAt, at), Want: nodestate.Invalid},
		figuretest.NodeState{Node: figuretest.AnnotatedNode("partial", pidstats.AnnotationCapacity, "32768"), Want: nodestate.Invalid},
		figuretest.NodeState{Node: figuretest.AnnotatedNode("bad-pod-list", pidstats.AnnotationCapacity, "32768", pidstats.AnnotationUsed, "1",
			pidstats.AnnotationSampledAt, at, pidstats.AnnotationPIDPods, "x"), Want: nodestate.Known},
	)
}
