package nodeips

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/figure/figuretest"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

func TestNodeChangeHint(t *testing.T) {
	sample := now.Add(-time.Minute)
	later := now.Add(-10 * time.Second)
	n := func(used int64, at time.Time) *corev1.Node { return ipNode("n", 13, used, at) }
	withExtra := figuretest.WithOtherAnnotation
	none := figuretest.AnnotatedNode("n")
	invalid := figuretest.AnnotatedNode("n", ipstats.AnnotationCapacity, "13", ipstats.AnnotationUsed, "many",
		ipstats.AnnotationSampledAt, sample.Format(time.RFC3339))
	tests := []struct {
		name     string
		floor    int64
		old, new *corev1.Node
		want     fwk.QueueingHint
	}{
		{name: "added, unknown headroom", new: none, want: fwk.Queue},
		{name: "added with a free IP", new: n(12, sample), want: fwk.Queue},
		{name: "added exhausted", new: n(13, sample), want: fwk.QueueSkip},
		{name: "added with a stale sample", new: n(13, now.Add(-time.Hour)), want: fwk.Queue},
		{name: "annotations removed: unknown now", old: n(13, sample), new: none, want: fwk.Queue},
		{name: "annotation broken: unknown now", old: n(13, sample), new: invalid, want: fwk.Queue},
		{name: "unknown before and after", old: none, new: withExtra(none), want: fwk.QueueSkip},
		{name: "no stats before, free now: NodeIPs passed it already", old: none, new: n(5, later), want: fwk.QueueSkip},
		{name: "stale before, free now", old: n(13, now.Add(-time.Hour)), new: n(12, later), want: fwk.Queue},
		{name: "an IP freed", old: n(13, sample), new: n(12, later), want: fwk.Queue},
		{name: "still exhausted", old: n(13, sample), new: n(13, later), want: fwk.QueueSkip},
		{name: "newer sample, same use, a free IP", old: n(10, sample), new: n(10, later), want: fwk.Queue},
		{name: "same sample, another annotation changed", old: n(10, sample), new: withExtra(n(10, sample)), want: fwk.QueueSkip},
		{name: "floor 2: an IP freed, 2 free is not enough", floor: 2, old: n(13, sample), new: n(11, later), want: fwk.QueueSkip},
		{name: "floor 2: 3 free", floor: 2, old: n(13, sample), new: n(10, later), want: fwk.Queue},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := defaultArgs()
			args.MinFreeIPs = tc.floor
			tp := newPlugin(t, args, nil, nil)
			logger, _ := ktesting.NewTestContext(t)
			var old interface{}
			if tc.old != nil {
				old = tc.old
			}
			got, err := tp.IsSchedulableAfterNodeChange(logger, pod("x"), old, tc.new)
			if err != nil || got != tc.want {
				t.Fatalf("hint = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestPodDeleteHint(t *testing.T) {
	sample := now.Add(-time.Minute)
	known := ipNode("n", 13, 13, sample)
	stale := ipNode("s", 13, 13, now.Add(-time.Hour))
	unknown := figuretest.AnnotatedNode("u")
	failed := func(p *corev1.Pod) *corev1.Pod { p.Status.Phase = corev1.PodFailed; return p }
	tests := []struct {
		name    string
		deleted *corev1.Pod
		want    fwk.QueueingHint
	}{
		{name: "never on a node", deleted: pod("d"), want: fwk.QueueSkip},
		{name: "placed after the sample", deleted: plugintest.BoundAt(pod("d"), "n", sample.Add(time.Second)), want: fwk.Queue},
		{name: "assumed, not bound", deleted: plugintest.Assumed(pod("d"), "n"), want: fwk.Queue},
		{name: "turned terminal after the sample: it counted until now", deleted: failed(plugintest.BoundAt(pod("d"), "n", sample.Add(time.Second))), want: fwk.Queue},
		{name: "in the sample: the next sample shows it", deleted: plugintest.BoundAt(pod("d"), "n", sample.Add(-time.Hour)), want: fwk.QueueSkip},
		{name: "host network: took no IP", deleted: plugintest.BoundAt(hostNetworkPod("d"), "n", sample.Add(time.Second)), want: fwk.QueueSkip},
		{name: "node with a stale sample", deleted: plugintest.BoundAt(pod("d"), "s", sample.Add(-time.Hour)), want: fwk.Queue},
		{name: "node with unknown headroom", deleted: plugintest.BoundAt(pod("d"), "u", sample), want: fwk.QueueSkip},
		{name: "node gone", deleted: plugintest.BoundAt(pod("d"), "gone", sample), want: fwk.QueueSkip},
	}
	tp := newPlugin(t, defaultArgs(), []*corev1.Node{known, stale, unknown}, nil)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			logger, _ := ktesting.NewTestContext(t)
			got, err := tp.IsSchedulableAfterPodDelete(logger, pod("x"), tc.deleted, nil)
			if err != nil || got != tc.want {
				t.Fatalf("hint = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// TestEventsToRegister: the plugin registers the events its queueing
// hints (above) answer, each with its hint.
func TestEventsToRegister(t *testing.T) {
	newPlugin(t, defaultArgs(), nil, nil).CheckEventsToRegister(t)
}
