package nodeips

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/internal/nodestate"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

// TestNodeStateAgreesWithFilter: headroom_nodes counts a node known
// exactly when Filter judges it by its sample, before, at and after the
// sample's age limit, and for every kind of missing or invalid sample.
// Every node with a sample is full, so Filter rejects the known ones.
func TestNodeStateAgreesWithFilter(t *testing.T) {
	const maxAge = 30 * time.Second
	args := defaultArgs()
	args.MaxSampleAge = metav1.Duration{Duration: maxAge}
	at := now.UTC().Format(time.RFC3339)
	nodes := []*corev1.Node{
		ipNode("fresh", 13, 13, now),
		ipNode("at-the-limit", 13, 13, now.Add(-maxAge)),
		ipNode("old", 13, 13, now.Add(-maxAge-time.Second)),
		annotatedNode("none"),
		annotatedNode("malformed", ipstats.AnnotationCapacity, "13", ipstats.AnnotationUsed, "-1", ipstats.AnnotationSampledAt, at),
		annotatedNode("used-above-capacity", ipstats.AnnotationCapacity, "13", ipstats.AnnotationUsed, "14", ipstats.AnnotationSampledAt, at),
		annotatedNode("partial", ipstats.AnnotationUsed, "13"),
		ipNode("future", 13, 13, now.Add(2*time.Minute)),
	}
	want := map[string]nodestate.State{
		"fresh": nodestate.Known, "at-the-limit": nodestate.Known, "old": nodestate.Stale,
		"none": nodestate.Unknown, "malformed": nodestate.Invalid, "used-above-capacity": nodestate.Invalid,
		"partial": nodestate.Invalid, "future": nodestate.Invalid,
	}
	tp := newPlugin(t, args, nodes, nil)
	clk := tp.Clock.(*testingclock.FakePassiveClock)
	plugintest.NodeStates(t, tp.NodeIPs, clk.SetTime, tp.NodeStateConfig(), pod("p"), nodes,
		[]time.Time{now, now.Add(time.Second), now.Add(maxAge), now.Add(maxAge + time.Second), now.Add(time.Hour)}, want)
}
