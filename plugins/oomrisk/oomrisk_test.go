package oomrisk

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/defaultbinder"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/queuesort"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	"k8s.io/kubernetes/pkg/scheduler/metrics"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"github.com/headroom-k8s/headroom/apis/config"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/pkg/oomkill"
)

func TestNewRejectsWrongArgsType(t *testing.T) {
	for _, args := range []runtime.Object{&config.NodePIDsArgs{}, &schedconfig.NodeResourcesFitArgs{}} {
		_, err := New(context.Background(), args, nil)
		if err == nil || !strings.Contains(err.Error(), "OOMRiskArgs") {
			t.Errorf("New(%T) = %v, want an error asking for OOMRiskArgs", args, err)
		}
	}
}

// A profile without a pluginConfig entry for OOMRisk gets its defaults, as
// NodePIDs and NodeIPs do.
func TestNewWithoutArgsUsesTheDefaults(t *testing.T) {
	p, err := New(context.Background(), nil, nil)
	if err != nil {
		t.Fatalf("New(nil) = %v, want the defaults", err)
	}
	got := p.(*OOMRisk).strategy
	want := strategy{ownRiskWeight: configv1.DefaultOwnRiskWeight, collateralWeight: configv1.DefaultCollateralWeight}
	if got != want {
		t.Errorf("New(nil) strategy = %+v, want %+v", got, want)
	}
}

func TestNewValidatesArgs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*config.OOMRiskArgs)
		field  string // "" for valid args
	}{
		{"defaults", func(*config.OOMRiskArgs) {}, ""},
		{"own risk only", func(a *config.OOMRiskArgs) { a.CollateralWeight = 0 }, ""},
		{"own risk weight too large", func(a *config.OOMRiskArgs) { a.OwnRiskWeight = 1001 }, "OOMRiskArgs.ownRiskWeight"},
		{"negative collateral weight", func(a *config.OOMRiskArgs) { a.CollateralWeight = -1 }, "OOMRiskArgs.collateralWeight"},
		{"both weights 0", func(a *config.OOMRiskArgs) { a.OwnRiskWeight, a.CollateralWeight = 0, 0 }, "OOMRiskArgs.ownRiskWeight"},
		{"request percent below 100", func(a *config.OOMRiskArgs) { a.NoLimitRequestPercent = 99 }, "OOMRiskArgs.noLimitRequestPercent"},
		{"permille above 1000", func(a *config.OOMRiskArgs) { a.NoLimitAllocatablePermille = 1001 }, "OOMRiskArgs.noLimitAllocatablePermille"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := defaultArgs()
			tc.change(args)
			pl, err := New(context.Background(), args, nil)
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.field == "" && pl.Name() != Name:
				t.Errorf("Name() = %q", pl.Name())
			case tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field)):
				t.Errorf("New = %v, want an error naming %s", err, tc.field)
			}
		})
	}
}

func TestPreScoreSkipsOnlyGuaranteed(t *testing.T) {
	pods, nodes := crowdedAndLight()
	pl := newPlugin(t, defaultArgs(), cache.NewSnapshot(pods, nodes))
	for _, tc := range []struct {
		pod  *corev1.Pod
		want fwk.Code
	}{
		{guaranteedPod("g", "", "4Gi"), fwk.Skip},
		{pod("b", "", "256Mi", "12Gi"), fwk.Success},
		{pod("be", "", "", ""), fwk.Success},
	} {
		state := framework.NewCycleState()
		status := pl.PreScore(context.Background(), state, tc.pod, tf.BuildNodeInfos(nodes))
		if status.Code() != tc.want {
			t.Errorf("%s: PreScore = %v, want %v", tc.pod.Name, status, tc.want)
		}
		_, err := state.Read(preScoreStateKey)
		if wrote := err == nil; wrote != (tc.want == fwk.Success) {
			t.Errorf("%s: state written = %v, want %v", tc.pod.Name, wrote, tc.want == fwk.Success)
		}
	}
}

// TestScore checks hand-computed scores on two 16Gi nodes: "crowded" with
// four pods of request 1Gi and limit 8Gi (adj 1000 − ⌊1000/16⌋ = 938),
// "light" with two pods of 512Mi request and 1Gi limit.
func TestScore(t *testing.T) {
	pods, nodes := crowdedAndLight()
	snapshot := cache.NewSnapshot(pods, nodes)
	for _, tc := range []struct {
		name    string
		args    func(*config.OOMRiskArgs)
		pod     *corev1.Pod
		crowded int64
		light   int64
	}{{
		// adj 985 and 12Gi put it first on crowded: shortfall 28Gi after,
		// the killer needs all of it (risk 1e6) and nobody new (collateral
		// 0): cost (3·1e6 + 0)/4. On light 14Gi fit in 16Gi.
		name: "big limit", pod: pod("big", "", "256Mi", "12Gi"), crowded: 25, light: 100,
	}, {
		name: "big limit, collateral only", args: func(a *config.OOMRiskArgs) { a.OwnRiskWeight = 0 },
		pod: pod("big", "", "256Mi", "12Gi"), crowded: 100, light: 100,
	}, {
		// 1Gi at adj 938 goes last among the Burstable pods: itself safe,
		// but the shortfall grows from 16Gi to 17Gi and a third 8Gi pod
		// falls at risk: collateral 8Gi ≥ its 1Gi, cost (0 + 1·1e6)/4.
		name: "small limit", pod: pod("small", "", "1Gi", "1Gi"), crowded: 75, light: 100,
	}, {
		name: "small limit, own risk only", args: func(a *config.OOMRiskArgs) { a.CollateralWeight = 0 },
		pod: pod("small", "", "1Gi", "1Gi"), crowded: 100, light: 100,
	}, {
		// No limit: worst case max(2 × 0, 10 % of 16Gi) = 1.6Gi; at adj
		// 1000 its badness (17.6Gi) is still below the 8Gi pods' (23Gi),
		// so it goes last and is safe, but covering 17.6Gi takes a third
		// 8Gi pod: collateral 8Gi ≥ 1.6Gi, cost (0 + 1·1e6)/4.
		name: "best effort", pod: pod("be", "", "", ""), crowded: 75, light: 100,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			args := defaultArgs()
			if tc.args != nil {
				tc.args(args)
			}
			pl := newPlugin(t, args, snapshot)
			state := framework.NewCycleState()
			if s := pl.PreScore(context.Background(), state, tc.pod, tf.BuildNodeInfos(nodes)); !s.IsSuccess() {
				t.Fatalf("PreScore: %v", s)
			}
			for name, want := range map[string]int64{"crowded": tc.crowded, "light": tc.light} {
				got, s := pl.Score(context.Background(), state, tc.pod, nodeInfo(t, snapshot, name))
				if !s.IsSuccess() || got != want {
					t.Errorf("Score(%s) = %d, %v; want %d", name, got, s, want)
				}
			}
		})
	}
}

// TestFramework runs the plugin inside the scheduler framework, configured as
// a profile would: a Burstable pod with a large limit scores lower on the
// crowded node, and a Guaranteed pod is not scored by OOMRisk at all.
func TestFramework(t *testing.T) {
	metrics.Register() // the framework instruments its plugins
	ctx, cancel := context.WithCancel(context.Background())
	pods, nodes := crowdedAndLight()
	snapshot := cache.NewSnapshot(pods, nodes)

	registry := frameworkruntime.Registry{}
	profile := &schedconfig.KubeSchedulerProfile{
		SchedulerName: "headroom-oomrisk",
		Plugins:       &schedconfig.Plugins{},
	}
	// The helper adds OOMRisk's default args, decoded through the
	// kube-scheduler's scheme.
	for _, register := range []tf.RegisterPluginFunc{
		tf.RegisterQueueSortPlugin(queuesort.Name, queuesort.New),
		tf.RegisterBindPlugin(defaultbinder.Name, defaultbinder.New),
		tf.RegisterPluginAsExtensionsWithWeight(Name, 2, New, "PreScore", "Score"),
	} {
		register(&registry, profile)
	}
	fh, err := frameworkruntime.NewFramework(ctx, registry, profile, frameworkruntime.WithSnapshotSharedLister(snapshot))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		waitForShutdown(fh)
	}()
	infos, err := snapshot.NodeInfos().List()
	if err != nil {
		t.Fatal(err)
	}

	scores := func(p *corev1.Pod) map[string]int64 {
		t.Helper()
		state := framework.NewCycleState()
		if s := fh.RunPreScorePlugins(ctx, state, p, infos); !s.IsSuccess() {
			t.Fatalf("%s: PreScore: %v", p.Name, s)
		}
		result, s := fh.RunScorePlugins(ctx, state, p, infos)
		if !s.IsSuccess() {
			t.Fatalf("%s: Score: %v", p.Name, s)
		}
		out := map[string]int64{}
		for _, r := range result {
			for _, ps := range r.Scores {
				if ps.Name == Name {
					out[r.Name] = ps.Score
				}
			}
		}
		return out
	}
	// Weighted by 2: 25 and 100.
	if got := scores(pod("big", "", "256Mi", "12Gi")); got["crowded"] != 50 || got["light"] != 200 {
		t.Errorf("Burstable pod: OOMRisk scores %v, want crowded 50, light 200", got)
	}
	if got := scores(guaranteedPod("g", "", "4Gi")); len(got) != 0 {
		t.Errorf("Guaranteed pod: OOMRisk scores %v, want none", got)
	}
}

func TestUnknownMemoryScoresNeutral(t *testing.T) {
	noMemory := st.MakeNode().Name("no-memory").Capacity(map[corev1.ResourceName]string{corev1.ResourceCPU: "8"}).Obj()
	snapshot := cache.NewSnapshot(nil, []*corev1.Node{noMemory})
	pl := newPlugin(t, defaultArgs(), snapshot)
	p := pod("big", "", "256Mi", "12Gi")
	state := framework.NewCycleState()
	pl.PreScore(context.Background(), state, p, nil)
	got, s := pl.Score(context.Background(), state, p, nodeInfo(t, snapshot, "no-memory"))
	if !s.IsSuccess() || got != neutralScore {
		t.Errorf("Score = %d, %v; want %d", got, s, neutralScore)
	}
}

func TestScoreWithoutPreScore(t *testing.T) {
	pods, nodes := crowdedAndLight()
	snapshot := cache.NewSnapshot(pods, nodes)
	pl := newPlugin(t, defaultArgs(), snapshot)
	got, s := pl.Score(context.Background(), framework.NewCycleState(), pod("big", "", "256Mi", "12Gi"), nodeInfo(t, snapshot, "crowded"))
	if !s.IsSuccess() || got != 25 {
		t.Errorf("Score = %d, %v; want 25", got, s)
	}
}

// cached returns the model the plugin holds for node name.
func cached(pl *OOMRisk, name string) *oomkill.Node {
	if e := pl.cache.Stored(name); e != nil {
		return e.node
	}
	return nil
}

func TestCacheFollowsGeneration(t *testing.T) {
	ctx := context.Background()
	pl, snapshot, p, state := bigPodCycle(t)
	score := func(ni fwk.NodeInfo) int64 {
		t.Helper()
		s, status := pl.Score(ctx, state, p, ni)
		if !status.IsSuccess() {
			t.Fatal(status)
		}
		return s
	}

	crowded := nodeInfo(t, snapshot, "crowded")
	score(crowded)
	first := cached(pl, "crowded")
	if first == nil || len(first.KillOrder()) != 4 {
		t.Fatalf("cached model %v, want one of 4 containers", first)
	}
	score(crowded)
	if cached(pl, "crowded") != first {
		t.Error("same generation: model rebuilt")
	}
	// The scheduler's snapshot copies a NodeInfo with its generation.
	clone := crowded.Snapshot()
	score(clone)
	if cached(pl, "crowded") != first {
		t.Error("copy of the same generation: model rebuilt")
	}

	// Removing two 8Gi pods bumps the generation: 16Gi of limits on 16Gi
	// leaves 12Gi of shortfall with the pod, all of it its own: cost
	// (3·12/12·1e6 + 0)/4 as before, so check the model, not the score.
	// On a temporary copy (a preemption dry run) the model is built for the
	// copy but not cached.
	pods, _ := crowdedAndLight()
	for _, name := range []string{"c1", "c2"} {
		if err := clone.RemovePod(klog.Background(), pods[indexOf(pods, name)]); err != nil {
			t.Fatal(err)
		}
	}
	score(clone)
	if cached(pl, "crowded") != first {
		t.Error("a temporary copy replaced the snapshot's entry")
	}
	// The snapshot's own NodeInfo changes in place (UpdateSnapshot).
	for _, name := range []string{"c1", "c2"} {
		if err := crowded.RemovePod(klog.Background(), pods[indexOf(pods, name)]); err != nil {
			t.Fatal(err)
		}
	}
	score(crowded)
	second := cached(pl, "crowded")
	if second == first || len(second.KillOrder()) != 2 {
		t.Errorf("after removing pods: model %p (was %p) with %d containers, want a new one of 2", second, first, len(second.KillOrder()))
	}

	// A changed pod is a new generation too: with the other two pods'
	// limits cut to 2Gi, 12Gi fit next to them.
	crowded.RemovePod(klog.Background(), pods[indexOf(pods, "c3")])
	crowded.AddPodInfo(podInfo(t, pod("c3", "crowded", "1Gi", "2Gi")))
	crowded.RemovePod(klog.Background(), pods[indexOf(pods, "c4")])
	crowded.AddPodInfo(podInfo(t, pod("c4", "crowded", "1Gi", "2Gi")))
	if got := score(crowded); got != 100 {
		t.Errorf("after shrinking limits: score %d, want 100", got)
	}
	if cached(pl, "crowded") == second {
		t.Error("changed pods: model not rebuilt")
	}
}

func podInfo(t *testing.T, p *corev1.Pod) fwk.PodInfo {
	t.Helper()
	pi, err := framework.NewPodInfo(p)
	if err != nil {
		t.Fatal(err)
	}
	return pi
}

func indexOf(pods []*corev1.Pod, name string) int {
	for i, p := range pods {
		if p.Name == name {
			return i
		}
	}
	panic(name)
}

func TestCachePrunedToSnapshot(t *testing.T) {
	ctx := context.Background()
	pods, nodes := crowdedAndLight()
	current := cache.NewSnapshot(pods, nodes)
	pl := newPlugin(t, defaultArgs(), current)
	p := pod("big", "", "256Mi", "12Gi")

	// Nodes scored in an earlier cycle, since removed from the cluster.
	earlier := cache.NewSnapshot(nil, append([]*corev1.Node{node("gone-1", "8Gi"), node("gone-2", "8Gi")}, nodes...))
	state := framework.NewCycleState()
	pl.PreScore(ctx, state, p, nil)
	for _, name := range []string{"gone-1", "gone-2"} {
		pl.Score(ctx, state, p, nodeInfo(t, earlier, name))
	}
	for _, name := range []string{"crowded", "light"} {
		pl.Score(ctx, state, p, nodeInfo(t, current, name))
	}
	if got := pl.cache.Len(); got != 4 {
		t.Fatalf("%d cached nodes, want 4", got)
	}
	pl.PreScore(ctx, framework.NewCycleState(), p, nil)
	if got := pl.cache.Len(); got != 2 || cached(pl, "crowded") == nil || cached(pl, "light") == nil {
		t.Errorf("after PreScore on a 2-node snapshot: %d cached nodes, want crowded and light", got)
	}
}

func TestScoreCacheHitAllocationFree(t *testing.T) {
	ctx := context.Background()
	pl, snapshot, p, state := bigPodCycle(t)
	ni := nodeInfo(t, snapshot, "crowded")
	pl.Score(ctx, state, p, ni)
	if allocs := testing.AllocsPerRun(100, func() { pl.Score(ctx, state, p, ni) }); allocs != 0 {
		t.Errorf("Score on a cache hit allocates %v times", allocs)
	}
}

func TestSignPod(t *testing.T) {
	sign := func(p *corev1.Pod) string {
		t.Helper()
		fragments, s := (&OOMRisk{}).SignPod(context.Background(), p)
		if !s.IsSuccess() {
			t.Fatal(s)
		}
		data, err := json.Marshal(fragments)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	base := pod("a", "", "1Gi", "8Gi")
	if sign(base) != sign(pod("other-name", "", "1Gi", "8Gi")) {
		t.Error("pods differing only in name sign differently")
	}
	sidecar := pod("s", "", "1Gi", "8Gi")
	sidecar.Spec.InitContainers = []corev1.Container{st.MakeContainer().Name("proxy").RestartPolicy(corev1.ContainerRestartPolicyAlways).Obj()}
	plainInit := pod("s", "", "1Gi", "8Gi")
	plainInit.Spec.InitContainers = []corev1.Container{st.MakeContainer().Name("proxy").Obj()}
	critical := pod("c", "", "1Gi", "8Gi")
	critical.Spec.PriorityClassName = "system-node-critical"
	critical.Spec.Priority = new(int32(2000001000))
	for name, p := range map[string]*corev1.Pod{
		"other limit":   pod("a", "", "1Gi", "4Gi"),
		"other request": pod("a", "", "2Gi", "8Gi"),
		"no limit":      pod("a", "", "1Gi", ""),
		"guaranteed":    guaranteedPod("a", "", "8Gi"),
		"sidecar":       sidecar,
		"node-critical": critical,
		"plain init":    plainInit,
		"pod-level limit": func() *corev1.Pod {
			q := pod("a", "", "1Gi", "8Gi")
			q.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("2Gi")}}
			return q
		}(),
	} {
		if sign(p) == sign(base) {
			t.Errorf("%s: signs like the base pod", name)
		}
	}
	if sign(sidecar) == sign(plainInit) {
		t.Error("a sidecar signs like a plain init container")
	}
}

// TestScoreConcurrent scores nodes in parallel, as the framework does, while
// the cache fills and generations change; run with -race.
func TestScoreConcurrent(t *testing.T) {
	ctx := context.Background()
	pl, snapshot, p, state := bigPodCycle(t)
	want := map[string]int64{"crowded": 25, "light": 100}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := range 8 {
		for name, score := range want {
			wg.Go(func() {
				ni := nodeInfo(t, snapshot, name)
				if i%2 == 1 {
					ni = ni.Snapshot()
					// A new generation with the same pods.
					last := ni.GetPods()[0].GetPod()
					if err := ni.RemovePod(klog.Background(), last); err != nil {
						errs <- err.Error()
						return
					}
					ni.AddPodInfo(podInfo(t, last))
				}
				for range 50 {
					if got, _ := pl.Score(ctx, state, p, ni); got != score {
						errs <- fmt.Sprintf("%s: score %d, want %d", name, got, score)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// Score skips the assessment when the pod's worst case fits into the node's
// slack; that shortcut must give the score the assessment gives. Logging at
// V(4) takes the full path.
func TestScoreShortcutMatchesAssessment(t *testing.T) {
	pods, nodes := crowdedAndLight()
	// A node of another shape: an unlimited pod's worst case differs there.
	nodes = append(nodes, node("big", "64Gi"))
	snapshot := cache.NewSnapshot(pods, nodes)
	pl := newPlugin(t, defaultArgs(), snapshot)
	quiet := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0))))
	verbose := klog.NewContext(context.Background(), ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4))))
	for _, limit := range []string{"", "1Mi", "512Mi", "1Gi", "2Gi", "4Gi", "6Gi", "8Gi", "12Gi", "64Gi"} {
		p := pod("incoming", "", "256Mi", limit)
		// One cycle over nodes of different shapes, twice: the pod's worst
		// case per shape is remembered across Score calls.
		state := framework.NewCycleState()
		pl.PreScore(quiet, state, p, nil)
		for _, name := range []string{"crowded", "big", "light", "big", "crowded"} {
			ni := nodeInfo(t, snapshot, name)
			fast, s1 := pl.Score(quiet, state, p, ni)
			full, s2 := pl.Score(verbose, state, p, ni)
			if !s1.IsSuccess() || !s2.IsSuccess() || fast != full {
				t.Errorf("limit %q on %s: score %d (%v) without the assessment, %d (%v) with it", limit, name, fast, s1, full, s2)
			}
		}
	}
}

// PreScore skips Score when every node would score MaxNodeScore: every
// node's memory is known and the pod's worst case, on the node with the
// most allocatable memory, fits the least slack. It scores otherwise, also
// when a node that changed since the last walk has lost its slack.
func TestPreScoreSkipsWhenNothingIsAtRisk(t *testing.T) {
	lightPods := []*corev1.Pod{pod("l1", "light", "512Mi", "1Gi"), pod("l2", "roomy", "512Mi", "1Gi")}
	roomy := []*corev1.Node{node("light", "16Gi"), node("roomy", "16Gi")}
	noMemory := st.MakeNode().Name("no-memory").Capacity(map[corev1.ResourceName]string{corev1.ResourceCPU: "8"}).Obj()
	crowdedPods, crowdedNodes := crowdedAndLight()
	for _, tc := range []struct {
		name  string
		nodes []*corev1.Node
		pods  []*corev1.Pod
		pod   *corev1.Pod
		want  fwk.Code
	}{
		{"room on every node", roomy, lightPods, pod("p", "", "256Mi", "1Gi"), fwk.Skip},
		{"worst case just fits the least slack", roomy, lightPods, pod("p", "", "256Mi", "15Gi"), fwk.Skip},
		{"worst case beyond one node's slack", roomy, lightPods, pod("p", "", "256Mi", "16106127361"), fwk.Success}, // 15Gi and a byte
		{"a node already short", crowdedNodes, crowdedPods, pod("p", "", "256Mi", "1Gi"), fwk.Success},
		{"a node of unknown memory scores neutral", append(roomy, noMemory), lightPods, pod("p", "", "256Mi", "1Gi"), fwk.Success},
	} {
		t.Run(tc.name, func(t *testing.T) {
			snapshot := cache.NewSnapshot(tc.pods, tc.nodes)
			pl := newPlugin(t, defaultArgs(), snapshot)
			infos, err := snapshot.NodeInfos().List()
			if err != nil {
				t.Fatal(err)
			}
			state := framework.NewCycleState()
			if s := pl.PreScore(context.Background(), state, tc.pod, infos); s.Code() != tc.want {
				t.Fatalf("PreScore = %v, want %v", s, tc.want)
			}
			if tc.want != fwk.Skip {
				return
			}
			// What Score would have given, in a cycle without PreScore.
			for _, ni := range infos {
				if got, s := pl.Score(context.Background(), framework.NewCycleState(), tc.pod, ni); !s.IsSuccess() || got != fwk.MaxNodeScore {
					t.Errorf("skipped, but Score gives %s %d (%v)", ni.Node().Name, got, s)
				}
			}
			// A pod placed since the last walk over the snapshot takes
			// the light node's slack: it is judged by its own figures.
			light, err := snapshot.NodeInfos().Get("light")
			if err != nil {
				t.Fatal(err)
			}
			light.(*framework.NodeInfo).AddPod(pod("heavy", "light", "1Gi", "15Gi"))
			if s := pl.PreScore(context.Background(), framework.NewCycleState(), tc.pod, infos); s.Code() != fwk.Success {
				t.Fatalf("after a pod took the light node's slack: PreScore = %v, want Success", s)
			}
		})
	}
}

// The score a node keeps for the last pod shape scored on it answers only
// for that shape and that generation of the node: another shape, or the
// node with one more pod, is assessed again.
func TestKeptScoreFollowsShapeAndNode(t *testing.T) {
	pods, nodes := crowdedAndLight()
	snapshot := cache.NewSnapshot(pods, nodes)
	pl := newPlugin(t, defaultArgs(), snapshot)
	ctx := context.Background()
	verbose := klog.NewContext(ctx, ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(4))))
	score := func(p *corev1.Pod, ni fwk.NodeInfo) (kept, assessed int64) {
		t.Helper()
		state := framework.NewCycleState()
		if s := pl.PreScore(ctx, state, p, nil); !s.IsSuccess() {
			t.Fatalf("PreScore: %v", s)
		}
		kept, _ = pl.Score(ctx, state, p, ni)
		kept, _ = pl.Score(ctx, state, p, ni) // from the node's note
		assessed, _ = pl.Score(verbose, state, p, ni)
		return kept, assessed
	}
	ni := nodeInfo(t, snapshot, "light")
	small, big := pod("small", "", "64Mi", "15Gi"), pod("big", "", "12Gi", "20Gi")
	k1, a1 := score(small, ni)
	k2, a2 := score(big, ni)
	if k1 != a1 || k2 != a2 {
		t.Fatalf("kept scores %d, %d; assessed %d, %d", k1, k2, a1, a2)
	}
	if a1 == a2 {
		t.Fatalf("both shapes score %d on light: the test needs shapes that differ", a1)
	}
	if k, _ := score(small, ni); k != a1 {
		t.Errorf("small again after big: kept %d, want %d", k, a1)
	}
	ni.AddPodInfo(podInfo(t, pod("newcomer", "light", "256Mi", "8Gi")))
	if k, a := score(small, ni); k != a {
		t.Errorf("after a pod joined the node: kept %d, assessed %d", k, a)
	}
}

// Shape numbers are never reused, though the table that gives them is
// bounded; once they are spent, shapes get none (0: no kept scores).
func TestShapeIDs(t *testing.T) {
	var ids shapeIDs
	first := ids.id("a")
	if first == 0 || ids.id("a") != first || ids.id("") != 0 {
		t.Fatalf("id(a) = %d then %d, id(\"\") = %d", first, ids.id("a"), ids.id(""))
	}
	seen := map[uint32]bool{first: true}
	for i := range maxShapesKept + 10 {
		id := ids.id(fmt.Sprint("shape-", i))
		if seen[id] {
			t.Fatalf("shape %d got number %d again", i, id)
		}
		seen[id] = true
	}
	if len(ids.ids) > maxShapesKept {
		t.Errorf("the table holds %d shapes, more than %d", len(ids.ids), maxShapesKept)
	}
	if again := ids.id("a"); again == first || seen[again] {
		t.Errorf("a shape seen again after the table started afresh got %d, a number given before", again)
	}
	ids.last = maxShapeID
	if id := ids.id("new"); id != 0 {
		t.Errorf("with every number spent, a new shape got %d", id)
	}
}
