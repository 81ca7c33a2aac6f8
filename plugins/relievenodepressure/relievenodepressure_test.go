package relievenodepressure

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/api"
	"sigs.k8s.io/descheduler/pkg/descheduler/evictions"
	"sigs.k8s.io/descheduler/pkg/framework/plugins/defaultevictor"
	"sigs.k8s.io/descheduler/test"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// On n1 (capacity 10000, 9700 used: 97 % > 95 %) every pod frees 300 PIDs
// unless it says otherwise; reaching the default target of 90 % takes three.

func TestEvictsInDeleteOrderUntilTarget(t *testing.T) {
	// 9700 measured. The pending pod, bound before the sample but never
	// started, held nothing the sample saw: it frees nothing and is passed
	// over, though the ReplicaSet controller's order puts it second.
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	pods := []*v1.Pod{
		testPod("ready-long", "n1", pids(300)),
		testPod("ready-briefly", "n1", pids(300), readyFor(2*time.Minute)),
		testPod("not-ready", "n1", pids(300), notReady),
		testPod("pending", "n1", pids(300), pending),
		testPod("restarting", "n1", pids(300), restarts(5)),
		// The highest deletion cost, but delete priority ranks first.
		testPod("prioritised", "n1", pids(300), deletionCost("100"), priority("3")),
		testPod("cheap", "n1", pids(300), deletionCost("-5")),
	}
	order := []string{"prioritised", "not-ready", "cheap", "ready-briefly", "restarting", "ready-long"}

	e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, pods)...)
	// 9700 − 3×300 = 8800 ≤ 9000: the first three suffice.
	if got, want := e.run(t, n1, n2), order[:3]; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}

	// With a target of 0 every pod goes, showing the whole order.
	e = newEnv(t, setup{args: RelieveNodePressureArgs{PIDs: &PIDsTrigger{TargetPercent: ptr.To[int64](0)}}},
		objects([]*v1.Node{n1, n2}, pods)...)
	if got := e.run(t, n1, n2); !equal(got, order) {
		t.Fatalf("evicted %v, want the whole order %v", got, order)
	}
}

func TestRanksComeFromControllerOwners(t *testing.T) {
	// 9600 − 2×300 = 9000: two evictions. The three pods of "big" on one node
	// are doubled up and go before the lone pod of "small", all else equal.
	n1, n2 := pidNode("n1", 10000, 9600), spareNode("n2")
	pods := []*v1.Pod{
		testPod("a-small", "n1", pids(300), ownedBy("small")),
		testPod("big-1", "n1", pids(300), ownedBy("big")),
		testPod("big-2", "n1", pids(300), ownedBy("big")),
		testPod("big-3", "n1", pids(300), ownedBy("big")),
	}
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, pods)...)
	got := e.run(t, n1, n2)
	if len(got) != 2 || !strings.HasPrefix(got[0], "big-") || !strings.HasPrefix(got[1], "big-") {
		t.Fatalf("evicted %v, want two pods of ReplicaSet big", got)
	}
}

func TestSkipsPodsTheFiltersRejectOrThatDoNotHelp(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	web := withLabels("app", "web")
	pods := []*v1.Pod{
		// Each of these comes first in delete order and is passed over.
		testPod("bare", "n1", pids(300), web, priority("10"), noOwner),
		testPod("critical", "n1", pids(300), web, priority("9"), systemCritical),
		testPod("no-pids", "n1", pids(0), web, priority("8")),
		testPod("excluded-namespace", "n1", pids(300), web, priority("7"), inNamespace("kube-system")),
		testPod("unselected", "n1", pids(300), withLabels("app", "db"), priority("6")),
		testPod("a", "n1", pids(300), web, restarts(4)),
		testPod("b", "n1", pids(300), web, restarts(3)),
		testPod("c", "n1", pids(300), web, restarts(2)),
		testPod("d", "n1", pids(300), web, restarts(1)),
	}
	// The complete list names every pod but no-pids: it held no PIDs.
	n1 = listed(n1, holding(300, pods, "no-pids"))
	e := newEnv(t, setup{args: RelieveNodePressureArgs{
		Namespaces:    &api.Namespaces{Exclude: []string{"kube-system"}},
		LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
	}}, objects([]*v1.Node{n1, n2}, pods)...)
	got := e.run(t, n1, n2)
	if want := []string{"a", "b", "c"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func TestNamespaceInclude(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	// "other" holds as much and restarts more: the kubelet would evict it
	// first. Outside the included namespaces it cannot go, and "mine",
	// ranked after it, is not the cause: nothing goes.
	pods := []*v1.Pod{
		testPod("other", "n1", pids(900), restarts(9), inNamespace("other")),
		testPod("mine", "n1", pids(900), inNamespace("mine")),
	}
	args := RelieveNodePressureArgs{Namespaces: &api.Namespaces{Include: []string{"mine"}}}
	e := newEnv(t, setup{args: args}, objects([]*v1.Node{n1, n2}, pods)...)
	if got := e.run(t, n1, n2); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
	// "mine" holding more is first: it goes.
	pods[1] = testPod("mine", "n1", pids(1000), inNamespace("mine"))
	e = newEnv(t, setup{args: args}, objects([]*v1.Node{n1, n2}, pods)...)
	if got, want := e.run(t, n1, n2), []string{"mine"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func hotNodePods(node string, n int) []*v1.Pod {
	var pods []*v1.Pod
	for i := range n {
		pods = append(pods, testPod(node+"-"+string(rune('a'+i)), node, pids(300), restarts(int32(n-i))))
	}
	return pods
}

func TestPerNodeLimitMovesOnToTheNextNode(t *testing.T) {
	n1, n2, n3 := pidNode("n1", 10000, 9700), pidNode("n2", 10000, 9700), spareNode("n3")
	pods := append(hotNodePods("n1", 4), hotNodePods("n2", 4)...)
	e := newEnv(t, setup{evictions: evictions.NewOptions().WithMaxPodsToEvictPerNode(ptr.To[uint](1))},
		objects([]*v1.Node{n1, n2, n3}, pods)...)
	if got, want := e.run(t, n1, n2, n3), []string{"n1-a", "n2-a"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func TestTotalLimitStopsEverything(t *testing.T) {
	n1, n2, n3 := pidNode("n1", 10000, 9700), pidNode("n2", 10000, 9700), spareNode("n3")
	pods := append(hotNodePods("n1", 4), hotNodePods("n2", 4)...)
	e := newEnv(t, setup{evictions: evictions.NewOptions().WithMaxPodsToEvictTotal(ptr.To[uint](2))},
		objects([]*v1.Node{n1, n2, n3}, pods)...)
	if got, want := e.run(t, n1, n2, n3), []string{"n1-a", "n1-b"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if e.evictor.TotalEvicted() != 2 {
		t.Fatalf("evictor counted %d evictions, want 2", e.evictor.TotalEvicted())
	}
}

func TestPerNamespaceLimitSkipsThatNamespace(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	pods := []*v1.Pod{
		testPod("a1", "n1", pids(300), restarts(5), inNamespace("a")),
		testPod("a2", "n1", pids(300), restarts(4), inNamespace("a")),
		testPod("b1", "n1", pids(300), restarts(3), inNamespace("b")),
		testPod("b2", "n1", pids(300), restarts(2), inNamespace("b")),
		testPod("c1", "n1", pids(300), restarts(1), inNamespace("c")),
	}
	e := newEnv(t, setup{evictions: evictions.NewOptions().WithMaxPodsToEvictPerNamespace(ptr.To[uint](1))},
		objects([]*v1.Node{n1, n2}, pods)...)
	if got, want := e.run(t, n1, n2), []string{"a1", "b1", "c1"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func TestRefusedEvictionEndsTheWalk(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	pods := hotNodePods("n1", 5)
	e := newEnv(t, setup{refuse: []string{"n1-b"}}, objects([]*v1.Node{n1, n2}, pods)...)
	// n1-b, the kubelet's next victim after n1-a, cannot go: the pods
	// ranked after it are not the cause. 9700 − 300 = 9400 ≤ 9500.
	if got, want := e.run(t, n1, n2), []string{"n1-a"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func TestMalformedDeletePriorityCountsAsZero(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	pods := []*v1.Pod{
		testPod("not-a-number", "n1", pids(300), priority("high")),
		testPod("out-of-range", "n1", pids(300), priority("99999999999")),
		testPod("prioritised", "n1", pids(300), priority("1")),
		testPod("x", "n1", pids(300), restarts(5)),
		testPod("y", "n1", pids(300), restarts(4)),
	}
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, pods)...)
	// As 0, the malformed pods come after x and y (no restarts): not needed.
	if got, want := e.run(t, n1, n2), []string{"prioritised", "x", "y"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	warnings := e.warningEvents()
	if len(warnings) != 2 {
		t.Fatalf("Warning Events %q, want one for each malformed pod", warnings)
	}
	for i, pod := range []string{"not-a-number", "out-of-range"} {
		found := false
		for _, w := range warnings {
			found = found || strings.Contains(w, "default/"+pod+":") && strings.HasPrefix(w, "Warning "+ReasonMalformedDeletePriority+" ")
		}
		if !found {
			t.Errorf("no %s Warning Event names pod %s (#%d): %q", ReasonMalformedDeletePriority, pod, i, warnings)
		}
	}
}

func TestMalformedPodPIDsCountsAsDefault(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	pods := []*v1.Pod{
		testPod("garbled", "n1", annotate(pidstats.AnnotationPodPIDs, "lots"), restarts(2)),
		testPod("plain", "n1", pids(300), restarts(1)),
	}
	// defaultPodPIDs 600: garbled frees 600 (9100, 91 %), plain 300 more.
	e := newEnv(t, setup{args: RelieveNodePressureArgs{PIDs: &PIDsTrigger{DefaultPodPIDs: ptr.To[int64](600)}}},
		objects([]*v1.Node{n1, n2}, pods)...)
	if got, want := e.run(t, n1, n2), []string{"garbled", "plain"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if w := e.warningEvents(); len(w) != 1 || !strings.HasPrefix(w[0], "Warning "+ReasonMalformedPodPIDs+" ") {
		t.Fatalf("Warning Events %q, want one %s", w, ReasonMalformedPodPIDs)
	}
}

func TestLeavesNodesAtOrBelowThresholdAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *v1.Node
	}{
		{"exactly at threshold", pidNode("n1", 10000, 9500)},
		{"between target and threshold", pidNode("n1", 10000, 9200)},
		{"no PID annotations", spareNode("n1")},
		{"stale sample", test.BuildTestNode("n1", 64000, 64<<30, 110, func(n *v1.Node) {
			n.Annotations = pidstats.NodeStats{Capacity: 10000, Used: 9900, SampledAt: now.Add(-time.Hour)}.Annotations()
		})},
		{"malformed annotation", test.BuildTestNode("n1", 64000, 64<<30, 110, func(n *v1.Node) {
			n.Annotations = map[string]string{pidstats.AnnotationCapacity: "many", pidstats.AnnotationUsed: "9900",
				pidstats.AnnotationSampledAt: now.Format(time.RFC3339)}
		})},
		{"nothing allocatable", test.BuildTestNode("n1", 64000, 64<<30, 110, func(n *v1.Node) {
			n.Annotations = pidstats.NodeStats{Capacity: 10000, Reserved: 10000, Used: 9900, SampledAt: now}.Annotations()
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n2 := spareNode("n2")
			e := newEnv(t, setup{}, objects([]*v1.Node{tc.node, n2}, hotNodePods("n1", 4))...)
			if got := e.run(t, tc.node, n2); len(got) != 0 {
				t.Fatalf("evicted %v, want none", got)
			}
		})
	}
}

func TestPodsPlacedAfterTheSampleRaiseNoPressure(t *testing.T) {
	// 9400 reported (94 %) plus a pod bound after the sample that declares
	// 200: NodePIDs counts 96 % for placement, but the pod held nothing the
	// sample saw, and a declaration raises no pressure: below 95 %.
	n1, n2 := pidNode("n1", 10000, 9400), spareNode("n2")
	late := testPod("late", "n1", pids(200))
	late.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now)
	pods := []*v1.Pod{late, testPod("early", "n1", pids(700), restarts(3))}
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, pods)...)
	if got := e.run(t, n1, n2); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
}

// memoryNode has 10Gi of memory, all allocatable, and PID use of 50 %.
func memoryNode(name string) *v1.Node {
	return test.BuildTestNode(name, 64000, 10<<30, 110, func(n *v1.Node) {
		n.Annotations = pidstats.NodeStats{Capacity: 10000, Used: 5000, SampledAt: now.Add(-time.Minute)}.Annotations()
	})
}

func TestOOMTriggerEvictsUntilShortfallIsUnderTarget(t *testing.T) {
	// Five pods limited to 3Gi: 15Gi worst case on 10Gi, a shortfall of 50 %.
	// The default target of 15 % takes two evictions (12Gi: 20 %; 9Gi: 0).
	// The pods declare no PIDs: they are evicted for memory alone.
	n1, n2 := memoryNode("n1"), spareNode("n2")
	var pods []*v1.Pod
	for i, name := range []string{"m1", "m2", "m3", "m4", "m5"} {
		pods = append(pods, testPod(name, "n1", pids(0), memoryLimit(3<<30), restarts(int32(5-i))))
	}
	// By default only the PID trigger runs: this node, at 50 % PIDs, stays.
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, pods)...)
	if got := e.run(t, n1, n2); len(got) != 0 {
		t.Fatalf("without oom in the args, evicted %v for memory", got)
	}
	e = newEnv(t, setup{args: RelieveNodePressureArgs{OOM: &OOMTrigger{}}}, objects([]*v1.Node{n1, n2}, pods)...)
	if got, want := e.run(t, n1, n2), []string{"m1", "m2"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if r := e.reasons["m1"]; !strings.Contains(r, "RelieveNodePressure: node n1 OOM shortfall 50.0% of memory > threshold 20%") {
		t.Fatalf("eviction reason %q does not name the OOM trigger", r)
	}
}

func TestDisabledTriggerIsIgnored(t *testing.T) {
	// PID pressure only, and only the OOM trigger configured.
	n1, n2 := pidNode("n1", 10000, 9900), spareNode("n2")
	e := newEnv(t, setup{args: RelieveNodePressureArgs{OOM: &OOMTrigger{}}}, objects([]*v1.Node{n1, n2}, hotNodePods("n1", 4))...)
	if got := e.run(t, n1, n2); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
}

func TestEvictionReasonNamesTheTrigger(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, hotNodePods("n1", 4))...)
	e.run(t, n1, n2)
	r := e.reasons["n1-a"]
	if !strings.Contains(r, "RelieveNodePressure: node n1 PIDs 97.0% used > threshold 95%") {
		t.Fatalf("eviction reason %q does not name the PID trigger", r)
	}
}

func TestNodeFitKeepsPodsWithNowhereToGo(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spare func(*v1.Node)
		want  []string
	}{
		{"another node has room", nil, []string{"n1-a", "n1-b", "n1-c"}},
		{"the only other node is cordoned", test.SetNodeUnschedulable, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n1 := pidNode("n1", 10000, 9700)
			n2 := test.BuildTestNode("n2", 64000, 64<<30, 110, tc.spare)
			e := newEnv(t, setup{evictorArgs: defaultevictor.DefaultEvictorArgs{NodeFit: true}},
				objects([]*v1.Node{n1, n2}, hotNodePods("n1", 4))...)
			if got := e.run(t, n1, n2); !equal(got, tc.want) {
				t.Fatalf("evicted %v, want %v", got, tc.want)
			}
		})
	}
}

func TestExceeds(t *testing.T) {
	for _, tc := range []struct {
		part, whole, pct int64
		want             bool
	}{
		{96, 100, 95, true},
		{95, 100, 95, false},
		{0, 100, 0, false},
		{1, 100, 0, true},
		{9223372036854775807, 9223372036854775807, 99, true},
		{9223372036854775807, 9223372036854775807, 100, false},
		{-5, 100, 0, false},
	} {
		if got := exceeds(tc.part, tc.whole, tc.pct); got != tc.want {
			t.Errorf("exceeds(%d, %d, %d) = %v, want %v", tc.part, tc.whole, tc.pct, got, tc.want)
		}
	}
}

func TestEventReasonFitsTheAPILimit(t *testing.T) {
	long := strings.Repeat("ü", 100)
	if r := eventReason(long); len(r) > maxEventReason || !strings.HasPrefix(long, r) {
		t.Fatalf("eventReason kept %d bytes: %q", len(r), r)
	}
}

// TestOOMTriggerCountsWhatPodsHold: four BestEffort pods are estimated at
// 10 % of the node's 10Gi each (4Gi in all: no shortfall), but the node's
// memory sample finds each holding 3.5Gi. The model is OOMRisk's: a
// container's worst case is at least what it holds, 14Gi in all, a 40 %
// shortfall over the 20 % threshold; one eviction brings it to 5 %, under
// the 15 % target. Without the sample nothing is evicted.
func TestOOMTriggerCountsWhatPodsHold(t *testing.T) {
	var pods []*v1.Pod
	var held []sample.PodFigure
	for i, name := range []string{"b1", "b2", "b3", "b4"} {
		p := testPod(name, "n1", pids(0), restarts(int32(4-i)))
		p.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
		pods = append(pods, p)
		held = append(held, sample.PodFigure{UID: p.UID, Value: 3584 << 20})
	}
	args := RelieveNodePressureArgs{OOM: &OOMTrigger{}}
	n1, n2 := memoryNode("n1"), spareNode("n2")
	e := newEnv(t, setup{args: args}, objects([]*v1.Node{n1, n2}, pods)...)
	if got := e.run(t, n1, n2); len(got) != 0 {
		t.Fatalf("without a memory sample, evicted %v", got)
	}
	measured := memoryNode("n1")
	maps.Copy(measured.Annotations, memstats.NodeStats{Used: 14 << 30, SampledAt: now.Add(-time.Minute), Pods: memstats.PodListFormat.New(held)}.Annotations())
	e = newEnv(t, setup{args: args}, objects([]*v1.Node{measured, n2}, pods)...)
	if got, want := e.run(t, measured, n2), []string{"b1"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}
