package nodepids

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/figure/figuretest"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

func TestNodeChangeHint(t *testing.T) {
	// Defaults: floor 1638 on 32768, an undeclared pod counts 100, so a node
	// has room for it up to 32768 − 1738 = 31030 used.
	const roomy, starved = 20000, 32000
	sample := now.Add(-time.Minute)
	later := now.Add(-10 * time.Second)
	n := func(used int64, at time.Time) *corev1.Node { return pidNode("n", 32768, 0, used, at) }
	withExtra := figuretest.WithOtherAnnotation
	none := st.MakeNode().Name("n").Obj()
	invalid := figuretest.AnnotatedNode("n", pidstats.AnnotationCapacity, "32768", pidstats.AnnotationUsed, "many",
		pidstats.AnnotationSampledAt, sample.Format(time.RFC3339))

	tests := []struct {
		name     string
		pod      *corev1.Pod
		old, new *corev1.Node
		want     fwk.QueueingHint
	}{
		{name: "added, unknown headroom", new: none, want: fwk.Queue},
		{name: "added with room", new: n(roomy, sample), want: fwk.Queue},
		{name: "added without room", new: n(starved, sample), want: fwk.QueueSkip},
		{name: "added with a stale sample", new: n(starved, now.Add(-time.Hour)), want: fwk.Queue},
		{name: "annotations removed: unknown now", old: n(starved, sample), new: none, want: fwk.Queue},
		{name: "annotation broken: unknown now", old: n(starved, sample), new: invalid, want: fwk.Queue},
		{name: "unknown before and after", old: none, new: withExtra(none), want: fwk.QueueSkip},
		{name: "invalid before, room now: NodePIDs passed it already", old: invalid, new: n(roomy, later), want: fwk.QueueSkip},
		{name: "no stats before, room now: NodePIDs passed it already", old: none, new: n(roomy, later), want: fwk.QueueSkip},
		{name: "stale before, room now", old: n(starved, now.Add(-time.Hour)), new: n(roomy, later), want: fwk.Queue},
		{name: "use dropped, room now", old: n(starved, sample), new: n(roomy, later), want: fwk.Queue},
		{name: "use dropped, same sample time", old: n(starved, sample), new: n(roomy, sample), want: fwk.Queue},
		{name: "use dropped, still no room", old: n(32500, sample), new: n(starved, later), want: fwk.QueueSkip},
		{name: "use rose, no room", old: n(roomy, sample), new: n(starved, later), want: fwk.QueueSkip},
		{name: "newer sample with more use but room", old: n(roomy, sample), new: n(roomy+500, later), want: fwk.Queue},
		{name: "same sample, another annotation changed", old: n(roomy, sample), new: withExtra(n(roomy, sample)), want: fwk.QueueSkip},
		{name: "capacity raised", old: n(starved, sample), new: pidNode("n", 65536, 0, starved, sample), want: fwk.Queue},
		{name: "reservation raised, same sample", old: n(roomy, sample), new: pidNode("n", 32768, 1000, roomy, sample), want: fwk.QueueSkip},
		{name: "room for an undeclared pod but not for this one", pod: pod("big", "5000"),
			old: n(starved, sample), new: n(30000, later), want: fwk.QueueSkip},
		{name: "room for this one", pod: pod("big", "5000"), old: n(starved, sample), new: n(25000, later), want: fwk.Queue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newPlugin(t, defaultArgs(), nil, nil)
			p := tc.pod
			if p == nil {
				p = pod("pending", "")
			}
			var oldObj interface{}
			if tc.old != nil {
				oldObj = tc.old
			}
			got, err := tp.IsSchedulableAfterNodeChange(ktesting.NewLogger(t, ktesting.NewConfig()), p, oldObj, tc.new)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("hint = %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("not a node", func(t *testing.T) {
		tp := newPlugin(t, defaultArgs(), nil, nil)
		got, err := tp.IsSchedulableAfterNodeChange(ktesting.NewLogger(t, ktesting.NewConfig()), pod("p", ""), nil, pod("x", ""))
		if err == nil || got != fwk.Queue {
			t.Fatalf("hint = %v, %v; want Queue and an error", got, err)
		}
	})
}

func TestPodDeleteHint(t *testing.T) {
	sample := now.Add(-time.Minute)
	known := pidNode("known", 32768, 0, 20000, sample)
	stale := pidNode("stale", 32768, 0, 32000, now.Add(-time.Hour))
	unknown := st.MakeNode().Name("unknown").Obj()

	tests := []struct {
		name    string
		deleted interface{}
		want    fwk.QueueingHint
	}{
		{name: "unscheduled pod", deleted: pod("d", "1000"), want: fwk.QueueSkip},
		{name: "placed after the sample", deleted: plugintest.BoundAt(pod("d", "1000"), "known", sample.Add(time.Second)), want: fwk.Queue},
		{name: "bound in the sample's second", deleted: plugintest.BoundAt(pod("d", "1000"), "known", sample), want: fwk.Queue},
		{name: "assumed, not bound yet", deleted: plugintest.Assumed(pod("d", ""), "known"), want: fwk.Queue},
		{name: "in the sample", deleted: plugintest.BoundAt(pod("d", "1000"), "known", sample.Add(-time.Second)), want: fwk.QueueSkip},
		{name: "terminal, placed after the sample", deleted: func() *corev1.Pod {
			p := plugintest.BoundAt(pod("d", "1000"), "known", sample.Add(time.Second))
			p.Status.Phase = corev1.PodSucceeded
			return p
		}(), want: fwk.Queue},
		{name: "declared 0 PIDs", deleted: plugintest.BoundAt(pod("d", "0"), "known", sample.Add(time.Second)), want: fwk.QueueSkip},
		{name: "nominated to the node", deleted: func() *corev1.Pod {
			p := pod("d", "")
			p.Status.NominatedNodeName = "known"
			return p
		}(), want: fwk.Queue},
		{name: "node with unknown headroom", deleted: plugintest.BoundAt(pod("d", "1000"), "unknown", sample.Add(time.Second)), want: fwk.QueueSkip},
		{name: "node with a stale sample", deleted: plugintest.BoundAt(pod("d", "1000"), "stale", now.Add(-2*time.Hour)), want: fwk.Queue},
		{name: "node gone", deleted: plugintest.BoundAt(pod("d", "1000"), "gone", sample.Add(time.Second)), want: fwk.QueueSkip},
		{name: "tombstone", deleted: cache.DeletedFinalStateUnknown{Key: "ns/d",
			Obj: plugintest.BoundAt(pod("d", "1000"), "known", sample.Add(time.Second))}, want: fwk.Queue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newPlugin(t, defaultArgs(), []*corev1.Node{known, stale, unknown}, nil)
			got, err := tp.IsSchedulableAfterPodDelete(ktesting.NewLogger(t, ktesting.NewConfig()), pod("pending", ""), tc.deleted, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("hint = %v, want %v", got, tc.want)
			}
		})
	}

	t.Run("without a node lister every assigned pod queues", func(t *testing.T) {
		p, err := New(t.Context(), defaultArgs(), nil) // no handle: no node lister
		if err != nil {
			t.Fatal(err)
		}
		tp := figuretest.Plugin[pidstats.NodeStats]{Plugin: p.(*NodePIDs)}
		got, err := tp.IsSchedulableAfterPodDelete(ktesting.NewLogger(t, ktesting.NewConfig()), pod("pending", ""),
			plugintest.BoundAt(pod("d", "1000"), "known", sample.Add(-time.Hour)), nil)
		if err != nil || got != fwk.Queue {
			t.Fatalf("hint = %v, %v; want Queue", got, err)
		}
	})
}

// TestEventsToRegister: the plugin registers the events its queueing
// hints (above) answer, each with its hint.
func TestEventsToRegister(t *testing.T) {
	newPlugin(t, defaultArgs(), nil, nil).CheckEventsToRegister(t)
}
