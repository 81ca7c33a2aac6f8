package nodeips

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"

	"github.com/headroom-k8s/headroom/apis/config"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/figure/figuretest"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

func TestFilter(t *testing.T) {
	sample := now.Add(-time.Minute)
	before, after := sample.Add(-time.Hour), sample.Add(time.Second)
	succeeded := func(p *corev1.Pod) *corev1.Pod { p.Status.Phase = corev1.PodSucceeded; return p }
	tests := []struct {
		name  string
		floor int64
		pod   *corev1.Pod
		ni    fwk.NodeInfo
		want  bool // passes
	}{
		{name: "no annotations: unknown, passes", pod: pod("x"), ni: plugintest.NodeInfo(figuretest.AnnotatedNode("n")), want: true},
		{name: "invalid annotation: unknown, passes", pod: pod("x"),
			ni: plugintest.NodeInfo(figuretest.AnnotatedNode("n", ipstats.AnnotationCapacity, "13", ipstats.AnnotationUsed, "fourteen",
				ipstats.AnnotationSampledAt, sample.Format(time.RFC3339))), want: true},
		{name: "used above capacity: unknown, passes", pod: pod("x"), ni: plugintest.NodeInfo(figuretest.AnnotatedNode("n", ipstats.AnnotationCapacity, "13",
			ipstats.AnnotationUsed, "14", ipstats.AnnotationSampledAt, sample.Format(time.RFC3339))), want: true},
		{name: "stale sample: unknown, passes", pod: pod("x"), ni: plugintest.NodeInfo(ipNode("n", 13, 13, now.Add(-time.Hour))), want: true},
		{name: "exhausted", pod: pod("x"), ni: plugintest.NodeInfo(ipNode("n", 13, 13, sample)), want: false},
		{name: "one free", pod: pod("x"), ni: plugintest.NodeInfo(ipNode("n", 13, 12, sample)), want: true},
		{name: "capacity 0", pod: pod("x"), ni: plugintest.NodeInfo(ipNode("n", 0, 0, sample)), want: false},
		{name: "host-network pod on an exhausted node", pod: hostNetworkPod("x"), ni: plugintest.NodeInfo(ipNode("n", 13, 13, sample)), want: true},
		{name: "floor 2, 2 free: the pod would leave 1", floor: 2, pod: pod("x"), ni: plugintest.NodeInfo(ipNode("n", 13, 11, sample)), want: false},
		{name: "floor 2, 3 free", floor: 2, pod: pod("x"), ni: plugintest.NodeInfo(ipNode("n", 13, 10, sample)), want: true},
		{name: "one free, taken by an assumed pod", pod: pod("x"),
			ni: plugintest.NodeInfo(ipNode("n", 13, 12, sample), plugintest.Assumed(pod("a"), "n")), want: false},
		{name: "one free, taken by a pod bound after the sample", pod: pod("x"),
			ni: plugintest.NodeInfo(ipNode("n", 13, 12, sample), plugintest.BoundAt(pod("a"), "n", after)), want: false},
		{name: "one free; the pod bound before the sample is in it", pod: pod("x"),
			ni: plugintest.NodeInfo(ipNode("n", 13, 12, sample), plugintest.BoundAt(pod("a"), "n", before)), want: true},
		{name: "one free; a host-network pod placed since takes none", pod: pod("x"),
			ni: plugintest.NodeInfo(ipNode("n", 13, 12, sample), plugintest.Assumed(hostNetworkPod("a"), "n")), want: true},
		{name: "one free; a succeeded pod placed since holds none", pod: pod("x"),
			ni: plugintest.NodeInfo(ipNode("n", 13, 12, sample), succeeded(plugintest.BoundAt(pod("a"), "n", after))), want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := defaultArgs()
			args.MinFreeIPs = tc.floor
			tp := newPlugin(t, args, nil, nil)
			s := tp.RunFilter(t, tc.pod, tc.ni)
			if got := s.IsSuccess(); got != tc.want {
				t.Fatalf("Filter = %v, want pass %v", s, tc.want)
			}
			if !tc.want {
				if s.Code() != fwk.Unschedulable || len(s.Reasons()) != 1 || s.Reasons()[0] != ErrReasonNoFreeIPs {
					t.Fatalf("rejection %v (code %v), want Unschedulable with %q", s.Reasons(), s.Code(), ErrReasonNoFreeIPs)
				}
			}
		})
	}
}

// A burst of pods within one sampling interval fills a node's pool exactly:
// each placed pod counts on top of the sample until the next one.
func TestFilterCountsABurst(t *testing.T) {
	sample := now.Add(-time.Minute)
	tp := newPlugin(t, defaultArgs(), nil, nil)
	ni := plugintest.NodeInfo(ipNode("n", 13, 10, sample))
	placed := 0
	for i := range 5 {
		if !tp.RunFilter(t, pod("x"), ni).IsSuccess() {
			break
		}
		ni.AddPod(plugintest.Assumed(pod(string(rune('a'+i))), "n"))
		placed++
	}
	if placed != 3 {
		t.Fatalf("placed %d pods on a node with 3 free IPs", placed)
	}
}

func TestScore(t *testing.T) {
	sample := now.Add(-time.Minute)
	a := plugintest.NodeInfo(ipNode("a", 254, 54, sample))  // 200 free, 199 after the pod
	b := plugintest.NodeInfo(ipNode("b", 254, 154, sample)) // 100 free, 99 after
	full := plugintest.NodeInfo(ipNode("full", 13, 13, sample))
	unknown := plugintest.NodeInfo(figuretest.AnnotatedNode("u"))

	noLimit := defaultArgs()
	noLimit.AmpleFreeIPs = 0
	t.Run("favours free IPs", func(t *testing.T) {
		tp := newPlugin(t, noLimit, nil, nil)
		got := tp.Scores(t, pod("x"), a, b, full)
		if got["a"] != 100 || got["b"] != 49 || got["full"] != 0 {
			t.Fatalf("scores = %v, want a 100, b ⌊99·100/199⌋ = 49, full 0", got)
		}
	})
	t.Run("ample free IPs score as well as any", func(t *testing.T) {
		// The default AmpleFreeIPs, 110: a's 199 count as 110, b's 99 not.
		got := newPlugin(t, defaultArgs(), nil, nil).Scores(t, pod("x"), a, b, full)
		if got["a"] != 100 || got["b"] != 99*100/110 || got["full"] != 0 {
			t.Fatalf("scores = %v, want a 100, b ⌊99·100/110⌋ = 90, full 0", got)
		}
	})
	t.Run("unknown node scores the mean of the known", func(t *testing.T) {
		tp := newPlugin(t, noLimit, nil, nil)
		got := tp.Scores(t, pod("x"), a, b, unknown)
		if got["u"] != (100+49)/2 {
			t.Fatalf("scores = %v, want u = %d", got, (100+49)/2)
		}
	})
	t.Run("configured unknown score", func(t *testing.T) {
		args := defaultArgs()
		args.UnknownNodeScore = 7
		tp := newPlugin(t, args, nil, nil)
		if got := tp.Scores(t, pod("x"), a, unknown); got["u"] != 7 || got["a"] != 100 {
			t.Fatalf("scores = %v", got)
		}
	})
	t.Run("no known node: scoring skipped", func(t *testing.T) {
		tp := newPlugin(t, defaultArgs(), nil, nil)
		if got := tp.Scores(t, pod("x"), unknown, plugintest.NodeInfo(ipNode("stale", 13, 0, now.Add(-time.Hour)))); got != nil {
			t.Fatalf("scores = %v, want PreScore to skip", got)
		}
	})
	t.Run("host-network pod: scoring skipped", func(t *testing.T) {
		tp := newPlugin(t, defaultArgs(), nil, nil)
		if got := tp.Scores(t, hostNetworkPod("x"), a, b); got != nil {
			t.Fatalf("scores = %v, want PreScore to skip", got)
		}
	})
	t.Run("pods placed since the sample count", func(t *testing.T) {
		tp := newPlugin(t, defaultArgs(), nil, nil)
		c := plugintest.NodeInfo(ipNode("c", 13, 3, sample)) // 10 free, 9 after
		d := plugintest.NodeInfo(ipNode("d", 13, 0, sample), plugintest.Assumed(pod("p1"), "d"), plugintest.Assumed(pod("p2"), "d"),
			plugintest.Assumed(pod("p3"), "d"), plugintest.Assumed(hostNetworkPod("h"), "d")) // 13 − 3 = 10 free, 9 after
		got := tp.Scores(t, pod("x"), c, d)
		if got["c"] != 100 || got["d"] != 100 {
			t.Fatalf("scores = %v, want both 100", got)
		}
	})
}

func TestNew(t *testing.T) {
	ctx := context.Background()
	if _, err := New(ctx, &config.NodePIDsArgs{}, nil); err == nil || !strings.Contains(err.Error(), "NodeIPsArgs") {
		t.Errorf("args of another type: %v", err)
	}
	bad := defaultArgs()
	bad.MinFreeIPs = -1
	if _, err := New(ctx, bad, nil); err == nil || !strings.Contains(err.Error(), "minFreeIPs") {
		t.Errorf("negative floor: %v, want an error naming minFreeIPs", err)
	}
	p, err := New(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	pl := p.(*NodeIPs)
	if s := pl.Settings(); s.MaxSampleAge != configv1.DefaultMaxSampleAge || s.UnknownScore != configv1.DefaultUnknownNodeScore || s.Ample != configv1.DefaultAmpleFreeIPs {
		t.Errorf("nil args: %+v, want the v1 defaults", s)
	}
	if a, err := Definition.Args(nil); err != nil || a.MinFreeIPs != configv1.DefaultMinFreeIPs {
		t.Errorf("nil args: %+v, %v; want the v1 defaults", a, err)
	}
	var typed *config.NodeIPsArgs
	if _, err := New(ctx, typed, nil); err != nil {
		t.Errorf("typed nil args: %v", err)
	}
	args := &config.NodeIPsArgs{MinFreeIPs: 3, MaxSampleAge: metav1.Duration{Duration: time.Minute}, UnknownNodeScore: 10, IPSource: config.IPSourceAnnotations}
	p, err = New(ctx, args, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := p.(*NodeIPs).Settings(); s.MaxSampleAge != time.Minute || s.UnknownScore != 10 {
		t.Errorf("args not taken: %+v", s)
	}
}

func TestSignPod(t *testing.T) {
	tp := newPlugin(t, defaultArgs(), nil, nil)
	sign := func(p *corev1.Pod) any {
		f, s := tp.SignPod(context.Background(), p)
		if !s.IsSuccess() || len(f) != 1 || f[0].Key != hostNetworkSignerName {
			t.Fatalf("SignPod = %v, %v", f, s)
		}
		return f[0].Value
	}
	if sign(pod("a")) != sign(pod("b")) {
		t.Error("two pod-network pods signed differently")
	}
	if sign(pod("a")) == sign(hostNetworkPod("h")) {
		t.Error("a host-network pod signed like a pod-network pod")
	}
}

// The cached path allocates nothing: Filter and Score on a node that has
// not changed since the last cycle.
func TestCachedPathAllocatesNothing(t *testing.T) {
	sample := now.Add(-time.Minute)
	var pods []*corev1.Pod
	for i := range 50 {
		pods = append(pods, plugintest.BoundAt(pod(string(rune('A'+i))), "n", sample.Add(time.Duration(i-25)*time.Second)))
	}
	args := defaultArgs()
	args.AmpleFreeIPs = 0 // else PreScore skips: 154 free IPs are ample
	tp := newPlugin(t, args, []*corev1.Node{ipNode("n", 254, 100, sample)}, pods)
	ni := tp.Handle.SnapshotNodeInfo(t, "n")
	ctx := context.Background()
	state := framework.NewCycleState()
	in := pod("incoming")
	if _, s := tp.PreFilter(ctx, state, in, nil); !s.IsSuccess() {
		t.Fatal(s)
	}
	if s := tp.PreScore(ctx, state, in, []fwk.NodeInfo{ni}); !s.IsSuccess() {
		t.Fatal(s)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		_ = tp.Filter(ctx, state, in, ni)
		_, _ = tp.Score(ctx, state, in, ni)
	}); allocs != 0 {
		t.Fatalf("cached Filter + Score: %v allocations per run", allocs)
	}
	if e := tp.Estimate(ctx, ni); e.Err != nil || e.Used != 100+25 {
		t.Fatalf("estimate %+v, want estimated use 125 (25 pods bound since the sample)", e)
	}
}

// An invalid annotation is parsed once per Node object, not once per pod,
// and reported (log line, Warning Event on the Node) once per distinct
// problem.
func TestInvalidAnnotationParsedOncePerNodeObject(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	bad := figuretest.AnnotatedNode("n", ipstats.AnnotationCapacity, "13", ipstats.AnnotationUsed, "-1",
		ipstats.AnnotationSampledAt, now.Format(time.RFC3339))
	tp := newPlugin(t, defaultArgs(), []*corev1.Node{bad}, nil)
	ni := tp.Handle.SnapshotNodeInfo(t, "n").(*framework.NodeInfo)
	first := tp.Estimate(ctx, ni)
	ni.AddPod(plugintest.Assumed(pod("p"), "n"))
	second := tp.Estimate(ctx, ni)
	if first.Err == nil || second.Err != first.Err {
		t.Fatalf("a pod change should reuse the parse of the same Node object: %v / %v", first.Err, second.Err)
	}
	// The agent writes again with the same invalid value: no new Event.
	ni.SetNode(bad.DeepCopy())
	tp.Estimate(ctx, ni)
	// Another problem: a new Event.
	ni.SetNode(figuretest.AnnotatedNode("n", ipstats.AnnotationCapacity, "13"))
	tp.Estimate(ctx, ni)
	var events []string
	for len(tp.Handle.Recorder.Events) > 0 {
		events = append(events, <-tp.Handle.Recorder.Events)
	}
	if len(events) != 2 || !strings.Contains(events[0], "Warning "+EventReasonInvalidIPs+` annotation headroom.dev/ip-used="-1"`) ||
		!strings.Contains(events[1], "headroom.dev/ip-used") || !strings.Contains(events[1], "missing") {
		t.Fatalf("events %q, want one per distinct problem naming the annotation", events)
	}
}

// PreScore skips Score when every node keeps AmpleFreeIPs free after the
// pod, and scores when the limit is off (NodePIDs' tests cover the rule's
// cases: it is nodesample's).
func TestPreScoreSkipsWhenEveryNodeHasAmpleIPs(t *testing.T) {
	sample := now.Add(-time.Minute)
	nodes := []*corev1.Node{ipNode("a", 254, 20, sample), ipNode("b", 254, 143, sample)} // b: 111 free, 110 after the pod
	noLimit := defaultArgs()
	noLimit.AmpleFreeIPs = 0
	for _, tc := range []struct {
		args *config.NodeIPsArgs
		skip bool
	}{{defaultArgs(), true}, {noLimit, false}} {
		tp := newPlugin(t, tc.args, nodes, nil)
		infos := []fwk.NodeInfo{tp.Handle.SnapshotNodeInfo(t, "a"), tp.Handle.SnapshotNodeInfo(t, "b")}
		if s := tp.PreScore(context.Background(), framework.NewCycleState(), pod("x"), infos); s.IsSkip() != tc.skip {
			t.Errorf("ampleFreeIPs %d: PreScore = %v, want skip %v", tc.args.AmpleFreeIPs, s, tc.skip)
		}
	}
	// One IP fewer on b and it no longer has ample.
	tp := newPlugin(t, defaultArgs(), []*corev1.Node{nodes[0], ipNode("b", 254, 144, sample)}, nil)
	infos := []fwk.NodeInfo{tp.Handle.SnapshotNodeInfo(t, "a"), tp.Handle.SnapshotNodeInfo(t, "b")}
	if s := tp.PreScore(context.Background(), framework.NewCycleState(), pod("x"), infos); s.IsSkip() {
		t.Error("b keeps 109 IPs after the pod, yet PreScore skipped")
	}
}

// ipSource CalicoIPAM needs the scheduler's client: without one the plugin
// is not built, and the error names the source.
func TestCalicoIPAMSourceNeedsAClient(t *testing.T) {
	args := defaultArgs()
	args.IPSource = config.IPSourceCalicoIPAM
	if _, err := New(context.Background(), args, nil); err == nil || !strings.Contains(err.Error(), "ipSource CalicoIPAM") {
		t.Fatalf("New without a client: %v, want an error naming ipSource CalicoIPAM", err)
	}
}
