package relievenodepressure

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"

	"github.com/headroom-k8s/headroom/pkg/deleteorder"
	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// TestInvalidAnnotationsWhatTheOperatorSees checks, for each bad pod
// annotation the plugin reads, the three things an operator sees: a
// Warning Event on the pod, a log line at the default verbosity naming the
// pod and the value, and one more in headroom_invalid_annotations_total.
func TestInvalidAnnotationsWhatTheOperatorSees(t *testing.T) {
	for _, tc := range []struct {
		name, key, value, reason, note string
	}{
		{"pids not a number", pidstats.AnnotationPodPIDs, "lots", ReasonMalformedPodPIDs, `annotation headroom.dev/pids="lots" is not a base-10 integer in [0, 4194304]`},
		{"pids above 2^22 counts as the maximum", pidstats.AnnotationPodPIDs, "4194305", ReasonMalformedPodPIDs, `annotation headroom.dev/pids="4194305" is above the maximum of 4194304; counting 4194304 PIDs`},
		{"pids negative", pidstats.AnnotationPodPIDs, "-1", ReasonMalformedPodPIDs, `annotation headroom.dev/pids="-1"`},
		{"delete priority not a number", deleteorder.DefaultPriorityAnnotation, "high", ReasonMalformedDeletePriority, `"high"`},
		{"delete priority out of int32", deleteorder.DefaultPriorityAnnotation, "99999999999", ReasonMalformedDeletePriority, `"99999999999"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
			ann := annotate(tc.key, tc.value)
			if tc.key != pidstats.AnnotationPodPIDs {
				ann = func(p *v1.Pod) { annotate(tc.key, tc.value)(p); pids(300)(p) }
			}
			pods := []*v1.Pod{testPod("bad", "n1", ann), testPod("plain", "n1", pids(300))}
			e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, pods)...)
			logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
			e.plugin.logger = logger.WithValues("plugin", PluginName)
			counter := headroommetrics.InvalidAnnotations.WithLabelValues(PluginName, tc.key)
			before, err := testutil.GetCounterMetricValue(counter)
			if err != nil {
				t.Fatal(err)
			}

			e.run(t, n1, n2)

			warnings := e.warningEvents()
			if len(warnings) != 1 || !strings.HasPrefix(warnings[0], "Warning "+tc.reason+" ") || !strings.Contains(warnings[0], "default/bad") ||
				!strings.Contains(warnings[0], tc.note) {
				t.Errorf("Warning Events %q, want one %s naming default/bad and saying %s", warnings, tc.reason, tc.note)
			}
			log := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if !strings.Contains(log, "Warning: malformed pod annotation") || !strings.Contains(log, `pod="default/bad"`) || !strings.Contains(log, tc.reason) {
				t.Errorf("no log line about default/bad's %s:\n%s", tc.key, log)
			}
			after, err := testutil.GetCounterMetricValue(counter)
			if err != nil {
				t.Fatal(err)
			}
			if after-before != 1 {
				t.Errorf(`headroom_invalid_annotations_total{plugin=%q,annotation=%q} rose by %v, want 1`, PluginName, tc.key, after-before)
			}
		})
	}
}
