package nodepids

import (
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/internal/nodestate"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

// TestNodeStateAgreesWithFilter: headroom_nodes counts a node known
// exactly when Filter judges it by its sample, before, at and after the
// sample's age limit, and for every kind of missing or invalid sample.
func TestNodeStateAgreesWithFilter(t *testing.T) {
	const maxAge = 30 * time.Second
	args := defaultArgs()
	args.MaxSampleAge = metav1.Duration{Duration: maxAge}
	at := now.UTC().Format(time.RFC3339)
	nodes := []*corev1.Node{
		pidNode("fresh", 32768, 0, 1000, now),
		pidNode("at-the-limit", 32768, 0, 1000, now.Add(-maxAge)),
		pidNode("old", 32768, 0, 1000, now.Add(-maxAge-time.Second)),
		pidNode("full", 32768, 0, 32768, now),
		annotatedNode("none"),
		annotatedNode("reserved-alone", pidstats.AnnotationReserved, "10"),
		annotatedNode("malformed", pidstats.AnnotationCapacity, "32Ki", pidstats.AnnotationUsed, "1", pidstats.AnnotationSampledAt, at),
		annotatedNode("partial", pidstats.AnnotationCapacity, "32768"),
		pidNode("future", 32768, 0, 1000, now.Add(2*time.Minute)),
		annotatedNode("bad-pod-list", pidstats.AnnotationCapacity, "32768", pidstats.AnnotationUsed, "1", pidstats.AnnotationSampledAt, at,
			pidstats.AnnotationPIDPods, "x"),
	}
	want := map[string]nodestate.State{
		"fresh": nodestate.Known, "at-the-limit": nodestate.Known, "old": nodestate.Stale, "full": nodestate.Known,
		"none": nodestate.Unknown, "reserved-alone": nodestate.Unknown,
		"malformed": nodestate.Invalid, "partial": nodestate.Invalid, "future": nodestate.Invalid,
		"bad-pod-list": nodestate.Known,
	}
	tp := newPlugin(t, args, nodes, nil)
	clk := tp.Clock.(*testingclock.FakePassiveClock)
	big := pod("big", strconv.Itoa(pidstats.MaxNodePIDs))
	plugintest.NodeStates(t, tp.NodePIDs, clk.SetTime, tp.NodeStateConfig(), big, nodes,
		[]time.Time{now, now.Add(time.Second), now.Add(maxAge), now.Add(maxAge + time.Second), now.Add(time.Hour)}, want)
}
