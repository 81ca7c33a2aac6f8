package nodepids

import (
	"context"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/headroom-k8s/headroom/apis/config"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/figure"
	"github.com/headroom-k8s/headroom/plugins/figure/figuretest"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

func TestFilter(t *testing.T) {
	sample := now.Add(-time.Minute)
	// With the defaults a 32768-PID node keeps max(512, 5 % of 32768) = 1638
	// PIDs free, and an undeclared pod counts 100.
	const capacity = 32768
	n := func(used int64) *corev1.Node { return pidNode("n", capacity, 0, used, sample) }
	many := func(count int, mk func(i int) *corev1.Pod) []*corev1.Pod {
		pods := make([]*corev1.Pod, count)
		for i := range pods {
			pods[i] = mk(i)
		}
		return pods
	}
	assumedPods := func(count int, pids string) []*corev1.Pod {
		return many(count, func(i int) *corev1.Pod { return plugintest.Assumed(pod(fmt.Sprintf("p%d", i), pids), "n") })
	}
	noFloor := defaultArgs()
	noFloor.MinFreePIDs, noFloor.MinFreePercent = 0, 0
	noAgeLimit := defaultArgs()
	noAgeLimit.MaxSampleAge.Duration = 0

	tests := []struct {
		name   string
		args   *config.NodePIDsArgs
		node   *corev1.Node
		pods   []*corev1.Pod
		pod    *corev1.Pod
		reject bool
	}{
		{name: "no PID annotations: unknown, passes", node: st.MakeNode().Name("n").Obj(), pod: pod("x", "1000000")},
		{name: "plenty of room", node: n(10000), pod: pod("x", "")},
		{name: "starved node", node: n(31100), pod: pod("x", ""), reject: true},
		{name: "starved node rejects a pod declaring 0 PIDs too", node: n(32000), pod: pod("x", "0"), reject: true},
		{name: "exactly the percent floor left", node: n(capacity - 1638 - 100), pod: pod("x", "")},
		{name: "one PID under the percent floor", node: n(capacity - 1638 - 100 + 1), pod: pod("x", ""), reject: true},
		{name: "absolute floor on a small node: exactly left", node: pidNode("n", 4096, 0, 4096-512-100, sample), pod: pod("x", "")},
		{name: "absolute floor on a small node: one under", node: pidNode("n", 4096, 0, 4096-512-100+1, sample), pod: pod("x", ""), reject: true},
		{name: "reserved PIDs are not allocatable", node: pidNode("n", capacity, 2000, 29200, sample), pod: pod("x", ""), reject: true},
		{name: "same use without the reservation fits", node: pidNode("n", capacity, 0, 29200, sample), pod: pod("x", "")},
		{name: "declared PIDs too many", node: n(capacity - 3000), pod: pod("x", "2000"), reject: true},
		{name: "declared PIDs fit", node: n(capacity - 3000), pod: pod("x", "1000")},
		{name: "declared all a node can have", node: n(0), pod: pod("x", "4194304"), reject: true},
		{name: "declared above 2^22: counts as the most a pod can hold, fits nowhere", node: n(0), pod: pod("x", "4194305"), reject: true},
		{name: "declared MaxInt64: the same", node: n(0), pod: pod("x", "9223372036854775807"), reject: true},
		{name: "declared negative: malformed, the default fits", node: n(0), pod: pod("x", "-5")},
		{name: "capacity above 2^22: invalid, unknown, passes", node: pidNode("n", pidstats.MaxNodePIDs+1, 0, pidstats.MaxNodePIDs+1, sample), pod: pod("x", "")},
		{name: "no floor: the last PID can be taken", args: noFloor, node: n(capacity - 100), pod: pod("x", "")},
		{name: "no floor: one PID too many", args: noFloor, node: n(capacity - 99), pod: pod("x", ""), reject: true},
		{name: "stale sample: unknown, passes", node: pidNode("n", capacity, 0, 32700, now.Add(-11*time.Minute)), pod: pod("x", "")},
		{name: "no age limit: an old sample still counts", args: noAgeLimit, node: pidNode("n", capacity, 0, 32700, now.Add(-24*time.Hour)), pod: pod("x", ""), reject: true},
		{name: "invalid: used above capacity, passes", node: figuretest.AnnotatedNode("n", pidstats.AnnotationCapacity, "100", pidstats.AnnotationUsed, "200",
			pidstats.AnnotationSampledAt, sample.Format(time.RFC3339)), pod: pod("x", "")},
		{name: "invalid: malformed capacity, passes", node: figuretest.AnnotatedNode("n", pidstats.AnnotationCapacity, "32k", pidstats.AnnotationUsed, "32000",
			pidstats.AnnotationSampledAt, sample.Format(time.RFC3339)), pod: pod("x", "")},
		{name: "invalid: capacity alone, passes", node: figuretest.AnnotatedNode("n", pidstats.AnnotationCapacity, "100"), pod: pod("x", "")},
		{name: "invalid: sample from the future, passes", node: pidNode("n", capacity, 0, 32700, now.Add(time.Hour)), pod: pod("x", "")},
		// 28000 used leaves 4768 free.
		{name: "assumed pods count: 3 × 1000 leaves room", node: n(28000), pods: assumedPods(3, "1000"), pod: pod("x", "")},
		{name: "assumed pods count: 4 × 1000 fill it", node: n(28000), pods: assumedPods(4, "1000"), pod: pod("x", ""), reject: true},
		{name: "undeclared assumed pods count the default: 30 leave room", node: n(28000), pods: assumedPods(30, ""), pod: pod("x", "")},
		{name: "undeclared assumed pods count the default: 31 fill it", node: n(28000), pods: assumedPods(31, ""), pod: pod("x", ""), reject: true},
		{name: "pods bound after the sample count", node: n(28000), pod: pod("x", ""), reject: true,
			pods: many(4, func(i int) *corev1.Pod {
				return plugintest.BoundAt(pod(fmt.Sprintf("b%d", i), "1000"), "n", sample.Add(5*time.Second))
			})},
		{name: "pods bound before the sample are in it", node: n(28000), pod: pod("x", ""),
			pods: many(4, func(i int) *corev1.Pod {
				return plugintest.BoundAt(pod(fmt.Sprintf("b%d", i), "1000"), "n", sample.Add(-time.Minute))
			})},
		// A declaration stands in, for placement, for what a pod that has
		// not started will hold (RelieveNodePressure's trigger counts
		// nothing for it: pidstats.EstimateOn, sample.ForPressure).
		{name: "pods bound before the sample that never started count their declaration", node: n(28000), pod: pod("x", ""), reject: true,
			pods: many(4, func(i int) *corev1.Pod {
				p := plugintest.BoundAt(pod(fmt.Sprintf("s%d", i), "1000"), "n", sample.Add(-time.Minute))
				p.Status.Phase = corev1.PodPending
				return p
			})},
		{name: "terminal pods do not count", node: n(28000), pod: pod("x", ""),
			pods: many(4, func(i int) *corev1.Pod {
				p := plugintest.Assumed(pod(fmt.Sprintf("f%d", i), "1000"), "n")
				p.Status.Phase = corev1.PodFailed
				return p
			})},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if args == nil {
				args = defaultArgs()
			}
			tp := newPlugin(t, args, []*corev1.Node{tc.node}, nil)
			status := tp.RunFilter(t, tc.pod, plugintest.NodeInfo(tc.node, tc.pods...))
			if !tc.reject {
				if !status.IsSuccess() {
					t.Fatalf("Filter = %v, want success", status)
				}
				return
			}
			if status.Code() != fwk.Unschedulable || !reflect.DeepEqual(status.Reasons(), []string{ErrReasonTooFewPIDs}) {
				t.Fatalf("Filter = %v, want Unschedulable %q", status, ErrReasonTooFewPIDs)
			}
		})
	}
}

// TestFilterBurstWithinOneSample assumes pods onto one node the way the
// scheduler does within one reporting interval: the node fills up to its
// floor and no further, although its reported use never changes.
func TestFilterBurstWithinOneSample(t *testing.T) {
	node := pidNode("n", 32768, 0, 20000, now.Add(-time.Minute))
	tp := newPlugin(t, defaultArgs(), []*corev1.Node{node}, nil)
	ni := framework.NewNodeInfo()
	ni.SetNode(node)
	placed := 0
	for i := 0; i < 1000; i++ {
		p := pod(fmt.Sprintf("burst-%d", i), "250")
		if !tp.RunFilter(t, p, ni).IsSuccess() {
			break
		}
		ni.AddPod(plugintest.Assumed(p, "n"))
		placed++
	}
	// (32768 − 20000 − 1638) / 250 = 44.5: 44 pods fit above the floor.
	if placed != 44 {
		t.Fatalf("placed %d pods of 250 PIDs, want 44", placed)
	}
}

func TestScore(t *testing.T) {
	sample := now.Add(-time.Minute)
	a := pidNode("a", 32768, 0, 12768, sample) // 20000 free
	b := pidNode("b", 32768, 0, 22768, sample) // 10000 free
	c := pidNode("c", 32768, 0, 27768, sample) // 5000 free
	unknown := st.MakeNode().Name("unknown").Obj()
	stale := pidNode("stale", 32768, 0, 0, now.Add(-time.Hour))
	invalid := figuretest.AnnotatedNode("invalid", pidstats.AnnotationCapacity, "x")

	t.Run("more free PIDs score higher, unknown nodes neutral", func(t *testing.T) {
		tp := newPlugin(t, defaultArgs(), nil, nil)
		got := tp.Scores(t, pod("x", ""), plugintest.NodeInfo(a), plugintest.NodeInfo(b), plugintest.NodeInfo(c), plugintest.NodeInfo(unknown), plugintest.NodeInfo(stale), plugintest.NodeInfo(invalid))
		// Free after placement 19900, 9900, 4900: ⌊100·free/19900⌋; unknown
		// nodes get the known nodes' mean, ⌊(100+49+24)/3⌋.
		want := map[string]int64{"a": 100, "b": 49, "c": 24, "unknown": 57, "stale": 57, "invalid": 57}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scores = %v, want %v", got, want)
		}
	})
	t.Run("the pod's own PIDs count", func(t *testing.T) {
		tp := newPlugin(t, defaultArgs(), nil, nil)
		got := tp.Scores(t, pod("x", "4000"), plugintest.NodeInfo(a), plugintest.NodeInfo(b), plugintest.NodeInfo(c))
		// 16000, 6000, 1000 after placement.
		want := map[string]int64{"a": 100, "b": 37, "c": 6}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scores = %v, want %v", got, want)
		}
	})
	t.Run("assumed pods lower a node's score", func(t *testing.T) {
		tp := newPlugin(t, defaultArgs(), nil, nil)
		var pods []*corev1.Pod
		for _, name := range []string{"p1", "p2", "p3"} {
			pods = append(pods, plugintest.Assumed(pod(name, "4000"), "a"))
		}
		// a: 20000 − 12000 = 8000 free, b: 10000.
		got := tp.Scores(t, pod("x", ""), plugintest.NodeInfo(a, pods...), plugintest.NodeInfo(b))
		if got["b"] != 100 || got["a"] >= got["b"] {
			t.Fatalf("scores = %v, want b on top", got)
		}
	})
	t.Run("configured unknown score", func(t *testing.T) {
		for _, want := range []int64{0, 100} {
			args := defaultArgs()
			args.UnknownNodeScore = want
			tp := newPlugin(t, args, nil, nil)
			if got := tp.Scores(t, pod("x", ""), plugintest.NodeInfo(a), plugintest.NodeInfo(unknown)); got["unknown"] != want {
				t.Errorf("UnknownNodeScore %d: scores = %v", want, got)
			}
		}
	})
	t.Run("no node with known headroom: scoring skipped", func(t *testing.T) {
		tp := newPlugin(t, defaultArgs(), nil, nil)
		if got := tp.Scores(t, pod("x", ""), plugintest.NodeInfo(unknown), plugintest.NodeInfo(stale), plugintest.NodeInfo(invalid)); got != nil {
			t.Fatalf("scores = %v, want PreScore to skip", got)
		}
	})
	t.Run("nodes without room score 0", func(t *testing.T) {
		// Reached only when Filter is not enabled.
		tp := newPlugin(t, defaultArgs(), nil, nil)
		full := pidNode("full", 1000, 0, 1000, sample)
		got := tp.Scores(t, pod("x", ""), plugintest.NodeInfo(full), plugintest.NodeInfo(c))
		if got["full"] != 0 || got["c"] != 100 {
			t.Fatalf("scores = %v", got)
		}
		if got := tp.Scores(t, pod("x", ""), plugintest.NodeInfo(full)); got["full"] != 0 {
			t.Fatalf("only node full: scores = %v", got)
		}
	})
	t.Run("largest figures stay in range", func(t *testing.T) {
		args := defaultArgs()
		args.AmpleFreePIDs = 0 // no limit: the raw scores are the free PIDs
		tp := newPlugin(t, args, nil, nil)
		const most = pidstats.MaxNodePIDs
		huge := pidNode("huge", most, 0, 0, sample)
		half := pidNode("half", most, 0, most/2, sample)
		tiny := pidNode("tiny", most, 0, most-200, sample)
		got := tp.Scores(t, pod("x", "100"), plugintest.NodeInfo(huge), plugintest.NodeInfo(half), plugintest.NodeInfo(tiny))
		if got["huge"] != 100 || got["half"] != 49 || got["tiny"] != 0 {
			t.Fatalf("scores = %v, want huge 100, half 49, tiny 0", got)
		}
	})
	t.Run("ample free PIDs score as well as any", func(t *testing.T) {
		const most = pidstats.MaxNodePIDs
		huge := pidNode("huge", most, 0, 0, sample)
		ample := pidNode("ample", 65536, 0, 32668, sample) // 32868 free, 32768 after the pod
		// a: 19900 after, under the default AmpleFreePIDs of 32768.
		got := newPlugin(t, defaultArgs(), nil, nil).Scores(t, pod("x", "100"), plugintest.NodeInfo(huge), plugintest.NodeInfo(ample), plugintest.NodeInfo(a))
		want := map[string]int64{"huge": 100, "ample": 100, "a": 19900 * 100 / 32768}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scores = %v, want %v", got, want)
		}
	})
}

func TestFloor(t *testing.T) {
	exact := func(alloc, pct int64) int64 {
		q := new(big.Int).Mul(big.NewInt(alloc), big.NewInt(pct))
		return q.Quo(q, big.NewInt(100)).Int64()
	}
	for _, pct := range []int64{0, 1, 5, 33, 99, 100} {
		for _, alloc := range []int64{0, 1, 99, 100, 101, 32768, 4194304, math.MaxInt64 - 1, math.MaxInt64} {
			s := pidstats.Floor{MinFreePIDs: 512, MinFreePercent: pct}
			if got, want := s.Of(alloc), max(512, exact(alloc, pct)); got != want {
				t.Errorf("floor(%d) at %d %% = %d, want %d", alloc, pct, got, want)
			}
		}
	}
	if got := (pidstats.Floor{MinFreePIDs: 10, MinFreePercent: 5}).Of(-100); got != 10 {
		t.Errorf("floor of a negative allocatable = %d, want the absolute floor", got)
	}
}

func TestMalformedPodAnnotation(t *testing.T) {
	// Room for the default 100 PIDs above the 1638 floor, not for 101.
	node := pidNode("n", 32768, 0, 32768-1638-100, now.Add(-time.Minute))
	bad := pod("bad", "lots%d")
	_, ctx := ktesting.NewTestContext(t)

	tp := newPlugin(t, defaultArgs(), []*corev1.Node{node}, nil)
	state := framework.NewCycleState()
	if _, s := tp.PreFilter(ctx, state, bad, nil); !s.IsSuccess() {
		t.Fatalf("PreFilter: %v", s)
	}
	if s := tp.Filter(ctx, state, bad, plugintest.NodeInfo(node)); !s.IsSuccess() {
		t.Fatalf("Filter = %v: a malformed annotation should count as the default", s)
	}
	if s := tp.PreScore(ctx, state, bad, []fwk.NodeInfo{plugintest.NodeInfo(node)}); !s.IsSuccess() {
		t.Fatalf("PreScore: %v", s)
	}
	wantEvent := `Warning InvalidPIDsAnnotation pod ns/bad: annotation headroom.dev/pids="lots%d" is not a base-10 integer in [0, 4194304]; using the default of 100 PIDs`
	select {
	case got := <-tp.Handle.Recorder.Events:
		if got != wantEvent {
			t.Errorf("event %q, want %q", got, wantEvent)
		}
	default:
		t.Fatal("no Warning Event for the malformed annotation")
	}
	select {
	case got := <-tp.Handle.Recorder.Events:
		t.Errorf("a second event in one cycle: %q", got)
	default:
	}

	// A profile that scores with NodePIDs but does not filter with it still
	// warns, once, in PreScore.
	if s := tp.PreScore(ctx, framework.NewCycleState(), bad, []fwk.NodeInfo{plugintest.NodeInfo(node)}); !s.IsSuccess() {
		t.Fatalf("PreScore: %v", s)
	}
	if len(tp.Handle.Recorder.Events) != 1 {
		t.Errorf("PreScore without PreFilter: %d events, want 1", len(tp.Handle.Recorder.Events))
	}

	frags, s := tp.SignPod(ctx, bad)
	if !s.IsSuccess() || len(frags) != 1 || frags[0].Value != int64(100) {
		t.Errorf("SignPod = %v, %v; want the default 100", frags, s)
	}
}

func TestSignPodDistinguishesPIDs(t *testing.T) {
	tp := newPlugin(t, defaultArgs(), nil, nil)
	ctx := context.Background()
	sign := func(p *corev1.Pod) any {
		frags, s := tp.SignPod(ctx, p)
		if !s.IsSuccess() || len(frags) != 1 || frags[0].Key != podPIDsSignerName {
			t.Fatalf("SignPod = %v, %v", frags, s)
		}
		return frags[0].Value
	}
	if sign(pod("a", "")) != sign(pod("b", "100")) {
		t.Error("an undeclared pod and one declaring the default should sign alike")
	}
	if sign(pod("a", "100")) == sign(pod("b", "101")) {
		t.Error("pods declaring different PIDs sign alike")
	}
}

func TestNew(t *testing.T) {
	ctx := context.Background()
	t.Run("invalid args name the field", func(t *testing.T) {
		args := defaultArgs()
		args.MinFreePercent = 101
		_, err := New(ctx, args, nil)
		if err == nil || !strings.Contains(err.Error(), "NodePIDsArgs.minFreePercent") {
			t.Fatalf("New = %v, want an error naming NodePIDsArgs.minFreePercent", err)
		}
		args = defaultArgs()
		args.UnknownNodeScore = -2
		if _, err := New(ctx, args, nil); err == nil || !strings.Contains(err.Error(), "NodePIDsArgs.unknownNodeScore") {
			t.Fatalf("New = %v, want an error naming NodePIDsArgs.unknownNodeScore", err)
		}
	})
	t.Run("wrong args type", func(t *testing.T) {
		_, err := New(ctx, &config.OOMRiskArgs{}, nil)
		if err == nil || !strings.Contains(err.Error(), "NodePIDsArgs") || !strings.Contains(err.Error(), "OOMRiskArgs") {
			t.Fatalf("New = %v, want an error naming both types", err)
		}
	})
	t.Run("no args: the v1 defaults", func(t *testing.T) {
		for _, obj := range []runtime.Object{nil, (*config.NodePIDsArgs)(nil)} {
			p, err := New(ctx, obj, nil)
			if err != nil {
				t.Fatalf("New(%#v): %v", obj, err)
			}
			pl := p.(*NodePIDs)
			if s := pl.Settings(); s.MaxSampleAge != configv1.DefaultMaxSampleAge || s.UnknownScore != configv1.DefaultUnknownNodeScore ||
				s.Ample != configv1.DefaultAmpleFreePIDs {
				t.Errorf("New(%#v) did not default: %+v", obj, s)
			}
			a, err := Definition.Args(obj)
			if err != nil {
				t.Fatal(err)
			}
			if a.DefaultPodPIDs != configv1.DefaultPodPIDs || a.MinFreePIDs != configv1.DefaultMinFreePIDs ||
				a.MinFreePercent != configv1.DefaultMinFreePercent {
				t.Errorf("Args(%#v) did not default: %+v", obj, a)
			}
		}
	})
	t.Run("args are used", func(t *testing.T) {
		args := &config.NodePIDsArgs{DefaultPodPIDs: 7, MinFreePIDs: 8, MinFreePercent: 9,
			MaxSampleAge: metav1.Duration{Duration: time.Second}, UnknownNodeScore: 10}
		p, err := New(ctx, args, nil)
		if err != nil {
			t.Fatal(err)
		}
		pl := p.(*NodePIDs)
		if s := pl.Settings(); s != (figure.Settings{MaxSampleAge: time.Second, UnknownScore: 10}) {
			t.Errorf("args not applied: %+v", s)
		}
		if f, _ := pl.SignPod(ctx, pod("p", "")); f[0].Value != int64(7) {
			t.Errorf("a pod without the annotation needs %v PIDs, want DefaultPodPIDs 7", f[0].Value)
		}
	})
}
