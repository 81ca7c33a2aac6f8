package relievenodepressure

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/descheduler/evictions"
	"sigs.k8s.io/descheduler/pkg/framework/plugins/defaultevictor"
	frameworktesting "sigs.k8s.io/descheduler/pkg/framework/testing"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// listed sets node's headroom.dev/pid-pods to the pods' measured PIDs.
func listed(node *v1.Node, usage map[*v1.Pod]int64) *v1.Node {
	var u []pidstats.PodUsage
	for pod, n := range usage {
		u = append(u, pidstats.PodUsage{UID: pod.UID, Value: n})
	}
	node.Annotations[pidstats.AnnotationPIDPods] = pidstats.NewPodList(u).String()
	return node
}

// holding is every pod of pods but those named, each holding n.
func holding(n int64, pods []*v1.Pod, except ...string) map[*v1.Pod]int64 {
	usage := map[*v1.Pod]int64{}
	for _, p := range pods {
		if !slices.Contains(except, p.Name) {
			usage[p] = n
		}
	}
	return usage
}

func ownedByDaemonSet(p *v1.Pod) {
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "ds-uid", Controller: ptr.To(true)}}
}

func scheduledBy(name string) podOption { return func(p *v1.Pod) { p.Spec.SchedulerName = name } }

func podPriority(v int32) podOption { return func(p *v1.Pod) { p.Spec.Priority = ptr.To(v) } }

func terminatingPod(p *v1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }

func nodeCount(t *testing.T, result string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(NodesTotal.WithLabelValues(result))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func evictionCount(t *testing.T, reason string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(EvictionsTotal.WithLabelValues(reason))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestGainIsWhatThePodHolds(t *testing.T) {
	// 9700 of 10000 used. The complete list says the hog holds 2000 and the
	// small pod 150; "idle" declares 5000 PIDs but is not listed, so it held
	// none at the sample: evicting it, first in delete order, frees nothing.
	// The small pod, next in the order, is planned and then pruned: the
	// hog alone takes the node to 7700, under the target of 9000.
	idle := testPod("idle", "n1", pids(5000), priority("9"))
	small := testPod("small", "n1", priority("5"))
	hog := testPod("hog", "n1")
	n1 := listed(pidNode("n1", 10000, 9700), map[*v1.Pod]int64{hog: 2000, small: 150})
	RegisterMetrics()
	before, pidEvictionsBefore := nodeCount(t, ResultRelieved), evictionCount(t, keyPIDs)
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{idle, small, hog})...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"hog"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if got := nodeCount(t, ResultRelieved) - before; got != 1 {
		t.Errorf("counted %v relieved nodes, want 1", got)
	}
	if got := evictionCount(t, keyPIDs) - pidEvictionsBefore; got != 1 {
		t.Errorf("counted %v evictions for PIDs, want 1", got)
	}
}

func TestUnlistedPodsOfAFullListHoldLessThanTheSmallestListed(t *testing.T) {
	// 32 listed pods of 200 PIDs fill the list; an unlisted pod declaring
	// 5000 held at most 200 at the sample.
	var pods []*v1.Pod
	usage := map[*v1.Pod]int64{}
	for i := range pidstats.MaxListedPods {
		p := testPod("listed-"+string(rune('a'+i%26))+string(rune('a'+i/26)), "n1", restarts(int32(i)))
		pods = append(pods, p)
		usage[p] = 200
	}
	unlisted := testPod("unlisted", "n1", pids(5000), priority("9"))
	pods = append(pods, unlisted)

	full := listed(pidNode("n1", 10000, 9700), usage)
	e := newEnv(t, setup{}, objects([]*v1.Node{full, spareNode("n2")}, pods)...)
	// 9700 − 200 (unlisted, at most) − 3 × 200 = 8900 ≤ 9000.
	got := e.run(t, full, spareNode("n2"))
	if len(got) != 4 || got[0] != "unlisted" {
		t.Fatalf("evicted %v, want unlisted and three listed pods", got)
	}

	// A workload of its own, without annotations, it ranks across workloads
	// by that bound, 200, but after the listed pods of 200: the list says it
	// held less than each of them, and the kubelet, which has its stats,
	// ranks it there. Not Ready, it leads the neutral order that breaks
	// other ties.
	alone := withOpts(unlisted, ownedBy("other"), notReady, func(p *v1.Pod) { delete(p.Annotations, "controller.alpha.kubernetes.io/delete-priority") })
	e = newEnv(t, setup{}, objects([]*v1.Node{full, spareNode("n2")}, append(slices.Clone(pods[:len(pods)-1]), alone))...)
	if got := e.run(t, full, spareNode("n2")); len(got) != 4 || slices.Contains(got, "unlisted") {
		t.Fatalf("evicted %v, want four listed pods", got)
	}

	// Without a list its declared PIDs count: it alone relieves the node.
	bare := pidNode("n1", 10000, 9700)
	e = newEnv(t, setup{}, objects([]*v1.Node{bare, spareNode("n2")}, pods)...)
	if got, want := e.run(t, bare, spareNode("n2")), []string{"unlisted"}; !equal(got, want) {
		t.Fatalf("without a list evicted %v, want %v", got, want)
	}
}

func TestPodsBelowTheFloorAreNeverEvictedForPIDs(t *testing.T) {
	// 1 % of 10000 is 100: ten listed pods of 99 PIDs would relieve the
	// node together, but none is worth a restart.
	var pods []*v1.Pod
	usage := map[*v1.Pod]int64{}
	for i := range 10 {
		p := testPod("tiny-"+string(rune('a'+i)), "n1")
		pods = append(pods, p)
		usage[p] = 99
	}
	n1 := listed(pidNode("n1", 10000, 9700), usage)
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	if got := e.run(t, n1, spareNode("n2")); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
	if w := e.warningEvents(); len(w) != 1 || !strings.Contains(w[0], "frees 99 PIDs, below the floor of 100") {
		t.Fatalf("Warning Events %q, want one saying the pods are below the floor", w)
	}
}

func withOpts(p *v1.Pod, opts ...podOption) *v1.Pod {
	p = p.DeepCopy()
	for _, o := range opts {
		o(p)
	}
	return p
}

// The PID trigger walks the kubelet's PID ranking (lower priority, then the
// most PIDs), not the delete order, in which three small replicas of one
// ReplicaSet rank before the one replica of another: the large pod goes
// first and, where it relieves the node on its own, alone.
func TestPIDPlanTakesTheKubeletsVictimFirst(t *testing.T) {
	var pods []*v1.Pod
	usage := map[*v1.Pod]int64{}
	for i := range 3 {
		p := testPod("web-"+string(rune('a'+i)), "n1", ownedBy("web"))
		pods = append(pods, p)
		usage[p] = 150
	}
	hog := testPod("hog", "n1", ownedBy("hog"))
	pods = append(pods, hog)
	usage[hog] = 1000
	n1 := listed(pidNode("n1", 10000, 9700), usage)
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"hog"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v: the web pods free 450 together, the hog 1000 alone", got, want)
	}
	// Where the hog alone is not enough (9700 − 600 = 9100 > 9000), one
	// web pod follows it.
	usage[hog] = 600
	n1 = listed(pidNode("n1", 10000, 9700), usage)
	e = newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	if got := e.run(t, n1, spareNode("n2")); len(got) != 2 || got[0] != "hog" || !strings.HasPrefix(got[1], "web-") {
		t.Fatalf("evicted %v, want the hog, then one web pod", got)
	}
	// A lower priority ranks first, whatever it holds: the kubelet evicts
	// the web pods (priority 0) before a hog at priority 1000.
	hog = withOpts(hog, podPriority(1000))
	pods[3] = hog
	usage = map[*v1.Pod]int64{hog: 600, pods[0]: 150, pods[1]: 150, pods[2]: 150}
	n1 = listed(pidNode("n1", 10000, 9700), usage)
	e = newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	if got := e.run(t, n1, spareNode("n2")); len(got) != 4 || got[3] != "hog" {
		t.Fatalf("evicted %v, want the three web pods, then the hog", got)
	}
}

func TestUnrelievableNodeEvictsNothingAndSaysWhy(t *testing.T) {
	RegisterMetrics()
	// The DaemonSet pod holds the PIDs and is the kubelet's first victim,
	// which the evictor keeps: the walk ends there (three small pods could
	// not make up for it anyway).
	hog := testPod("hog", "n1", ownedByDaemonSet)
	var pods = []*v1.Pod{hog}
	usage := map[*v1.Pod]int64{hog: 3000}
	for i := range 3 {
		p := testPod("small-"+string(rune('a'+i)), "n1")
		pods = append(pods, p)
		usage[p] = 100
	}
	n1 := listed(pidNode("n1", 10000, 9900), usage)
	before := nodeCount(t, ResultUnrelievable)
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	for run := range 3 {
		if got := e.run(t, n1, spareNode("n2")); len(got) != 0 {
			t.Fatalf("run %d evicted %v, want none", run+1, got)
		}
	}
	w := e.warningEvents()
	if len(w) != 3 {
		t.Fatalf("Warning Events %q, want one per run", w)
	}
	for _, want := range []string{"Warning " + ReasonNodePressureUnrelievable + " ",
		"the pod the kubelet would evict next, default/hog, cannot be evicted (the evictor's filter keeps it",
		"(PIDs 9900/10000 used (99.0%) > threshold 95%); nothing evicted.",
		"default/hog (3000 PIDs): the evictor's filter keeps it",
		"default/small-a (100 PIDs): ranked after default/hog, which cannot be evicted: not the pressure's cause"} {
		if !strings.Contains(w[0], want) {
			t.Errorf("Warning Event %q does not contain %q", w[0], want)
		}
	}
	if got := nodeCount(t, ResultUnrelievable) - before; got != 3 {
		t.Errorf("%s counted %v unrelievable nodes, want 3", "headroom_relieve_node_pressure_nodes_total", got)
	}
}

func TestOnlyPodsOfTheConfiguredSchedulersAreEvicted(t *testing.T) {
	// The default scheduler's pod is the kubelet's first victim; its
	// replacement could land right back on n1, so it is not evicted, and
	// the headroom-scheduler pod behind it is not the cause: nothing goes,
	// and the Warning names the pod and why.
	first := testPod("default-scheduled", "n1", pids(1000), priority("9"), scheduledBy(v1.DefaultSchedulerName))
	second := testPod("headroom-scheduled", "n1", pids(1000))
	n1 := pidNode("n1", 10000, 9700)
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{first, second})...)
	if got := e.run(t, n1, spareNode("n2")); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
	if w := e.warningEvents(); len(w) != 1 || !strings.Contains(w[0], "the pod the kubelet would evict next, default/default-scheduled, cannot be evicted (placed by default-scheduler, not by one of schedulerNames") {
		t.Errorf("Warning Events %q, want one naming default-scheduled and its scheduler", w)
	}
	e = newEnv(t, setup{args: RelieveNodePressureArgs{SchedulerNames: []string{"default-scheduler", "headroom-scheduler"}}},
		objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{first, second})...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"default-scheduled"}; !equal(got, want) {
		t.Fatalf("with both schedulers evicted %v, want %v", got, want)
	}
}

func cordoned(n *v1.Node) *v1.Node { n.Spec.Unschedulable = true; return n }

func tainted(n *v1.Node, key string) *v1.Node {
	n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: key, Effect: v1.TaintEffectNoSchedule})
	return n
}

func TestEvictsOnlyWhereAnotherNodeHasRoomUnderNodePIDsFloor(t *testing.T) {
	pods := []*v1.Pod{testPod("a", "n1", pids(1000), func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: "tolerated", Operator: v1.TolerationOpExists}}
	})}
	n1 := pidNode("n1", 10000, 9700)
	for _, tc := range []struct {
		name  string
		other *v1.Node
		want  []string
	}{
		// 1600 free − 1000 = 600, above the floor max(512, 5 % of 10000).
		{"room above the floor", pidNode("n2", 10000, 8400), []string{"a"}},
		// 1500 free − 1000 = 500 < 512: NodePIDs would not place it there.
		{"room only below the floor", pidNode("n2", 10000, 8500), nil},
		{"unknown headroom: NodePIDs lets it through", spareNode("n2"), []string{"a"}},
		// The scheduler places nothing on a cordoned node, nor where a
		// NoSchedule taint is not tolerated (nodeFit is off here).
		{"room only on a cordoned node", cordoned(pidNode("n2", 10000, 8400)), nil},
		{"unknown headroom on a cordoned node", cordoned(spareNode("n2")), nil},
		{"room only behind an untolerated taint", tainted(pidNode("n2", 10000, 8400), "dedicated"), nil},
		{"room behind a tolerated taint", tainted(pidNode("n2", 10000, 8400), "tolerated"), []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, setup{}, objects([]*v1.Node{n1, tc.other}, pods)...)
			if got := e.run(t, n1, tc.other); !equal(got, tc.want) {
				t.Fatalf("evicted %v, want %v", got, tc.want)
			}
			if tc.want == nil {
				if w := e.warningEvents(); len(w) != 1 || !strings.Contains(w[0], "no other node has room for its replacement's 1000 PIDs within NodePIDs' floor and this plugin's thresholds") {
					t.Fatalf("Warning Events %q, want one naming the missing room", w)
				}
			}
		})
	}
}

func TestLowerPriorityFirst(t *testing.T) {
	// A tenant's pod at high priority asks to go first; the batch pod at
	// priority 0 goes first anyway, as the kubelet would rank them.
	tenant := testPod("tenant", "n1", pids(1000), podPriority(1000), priority("100"), deletionCost("-100"))
	batch := testPod("batch", "n1", pids(1000), podPriority(0))
	n1 := pidNode("n1", 10000, 9700)
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{tenant, batch})...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"batch"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	e = newEnv(t, setup{args: RelieveNodePressureArgs{LowerPriorityFirst: ptr.To(false)}},
		objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{tenant, batch})...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"tenant"}; !equal(got, want) {
		t.Fatalf("with lowerPriorityFirst false evicted %v, want %v", got, want)
	}
}

func TestPlanStaysWithinThePerNodeLimit(t *testing.T) {
	// 200 PIDs each: three pods are needed to reach 95 % from 99.9 %; the
	// plan may take two.
	n1 := pidNode("n1", 10000, 9990)
	var pods []*v1.Pod
	for i, name := range []string{"n1-a", "n1-b", "n1-c", "n1-d"} {
		pods = append(pods, testPod(name, "n1", pids(200), restarts(int32(4-i))))
	}
	e := newEnv(t, setup{args: RelieveNodePressureArgs{MaxPodsToEvictPerNode: ptr.To[uint](2)}},
		objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	if got := e.run(t, n1, spareNode("n2")); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
	if w := e.warningEvents(); len(w) != 1 || !strings.Contains(w[0], "default/n1-c (200 PIDs): beyond maxPodsToEvictPerNode 2") {
		t.Fatalf("Warning Events %q, want one naming the limit", w)
	}
	// Within the limit the plan reaches the threshold, not the target: it
	// is carried out (9700 − 400 = 9300 ≤ 9500).
	n1 = pidNode("n1", 10000, 9700)
	e = newEnv(t, setup{args: RelieveNodePressureArgs{MaxPodsToEvictPerNode: ptr.To[uint](2)}},
		objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"n1-a", "n1-b"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func TestPlansCountPodDisruptionBudgets(t *testing.T) {
	web := withLabels("app", "web")
	pods := []*v1.Pod{
		testPod("a", "n1", pids(300), web, restarts(4)),
		testPod("b", "n1", pids(300), web, restarts(3)),
		testPod("c", "n1", pids(300), web, restarts(2)),
		testPod("d", "n1", pids(300), restarts(1)),
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "pdb-uid"},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: ptr.To(intstr.FromInt32(2)),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1},
	}
	n1 := pidNode("n1", 10000, 9700)
	objs := append(objects([]*v1.Node{n1, spareNode("n2")}, pods), pdb)
	e := newEnv(t, setup{}, objs...)
	// The budget allows one web pod: a. b, the kubelet's next victim, may
	// not go, and d, ranked after it, is not the cause. 9700 − 300 = 9400
	// ≤ 9500.
	if got, want := e.run(t, n1, spareNode("n2")), []string{"a"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func TestRefusalOutsideThePlanStopsWhenTheRestCannotRelieve(t *testing.T) {
	// Two pods of 1000 PIDs: either alone relieves 97 % to 87 %. The first,
	// the kubelet's first victim, is refused (a budget that appeared after
	// the plan): b, ranked after it, is not the cause and stays.
	pods := []*v1.Pod{testPod("a", "n1", pids(1000), restarts(2)), testPod("b", "n1", pids(1000), restarts(1))}
	n1 := pidNode("n1", 10000, 9700)
	e := newEnv(t, setup{refuse: []string{"a"}}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	if got := e.run(t, n1, spareNode("n2")); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
	// One pod of 1000 and small ones that cannot make up for it: once the
	// big one is refused nothing else goes.
	pods = []*v1.Pod{testPod("big", "n1", pids(1000), restarts(2)), testPod("small", "n1", pids(100), restarts(1))}
	e = newEnv(t, setup{refuse: []string{"big"}}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	if got := e.run(t, n1, spareNode("n2")); len(got) != 0 {
		t.Fatalf("evicted %v after the refusal, want none", got)
	}
}

func TestEvictorLimitsAndPlan(t *testing.T) {
	// The evictor's per-node limit is below the plan: the plan stops there.
	n1 := pidNode("n1", 10000, 9700)
	e := newEnv(t, setup{evictions: evictions.NewOptions().WithMaxPodsToEvictPerNode(ptr.To[uint](1))},
		objects([]*v1.Node{n1, spareNode("n2")}, hotNodePods("n1", 4))...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"n1-a"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

// TestEventsAreWrittenAtExit builds the plugin as the descheduler does
// (New, with its recorder) and reads the Node's Warning Event from the API
// after FlushEvents, as the command calls it before a one-shot run exits.
func TestEventsAreWrittenAtExit(t *testing.T) {
	hog := testPod("hog", "n1", ownedByDaemonSet)
	n1 := listed(pidNode("n1", 10000, 9900), map[*v1.Pod]int64{hog: 3000})
	client := fake.NewClientset(objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{hog})...)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	handle, _, err := frameworktesting.InitFrameworkHandle(ctx, client, evictions.NewOptions(), defaultevictor.DefaultEvictorArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := New(ctx, &RelieveNodePressureArgs{PressureSamples: ptr.To[int32](1)}, handle)
	if err != nil {
		t.Fatal(err)
	}
	handle.SharedInformerFactory().Start(ctx.Done())
	handle.SharedInformerFactory().WaitForCacheSync(ctx.Done())
	p := pl.(*RelieveNodePressure)
	p.now = func() time.Time { return now }
	if st := p.Deschedule(ctx, []*v1.Node{n1, spareNode("n2")}); st != nil && st.Err != nil {
		t.Fatal(st.Err)
	}
	// A one-shot run's context ends with its run; the command then flushes.
	cancel()
	logger, _ := ktesting.NewTestContext(t)
	FlushEvents(logger, 10*time.Second)
	list, err := client.CoreV1().Events(metav1.NamespaceDefault).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d Events written at exit, want 1", len(list.Items))
	}
	ev := list.Items[0]
	if ev.Reason != ReasonNodePressureUnrelievable || ev.Type != v1.EventTypeWarning || ev.InvolvedObject.Kind != "Node" || ev.InvolvedObject.Name != "n1" ||
		ev.ReportingController != EventReportingController || !strings.Contains(ev.Message, "default/hog (3000 PIDs)") {
		t.Fatalf("Event %+v, want a Warning %s on Node n1 naming default/hog", ev, ReasonNodePressureUnrelievable)
	}
}

func TestMalformedPodListFallsBackToDeclaredPIDs(t *testing.T) {
	n1 := pidNode("n1", 10000, 9700)
	n1.Annotations[pidstats.AnnotationPIDPods] = "not a list"
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{testPod("a", "n1", pids(1000))})...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"a"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if w := e.warningEvents(); len(w) != 1 || !strings.HasPrefix(w[0], "Warning "+ReasonMalformedPIDPods+" ") || !strings.Contains(w[0], pidstats.AnnotationPIDPods) {
		t.Fatalf("Warning Events %q, want one %s naming the annotation", w, ReasonMalformedPIDPods)
	}
}

func TestABudgetSpentOnOneNodeIsSpentOnTheNext(t *testing.T) {
	// One PodDisruptionBudget over the web pods of two nodes allows one
	// disruption: n1's plan spends it, so n2's plan may not take its web
	// pod even though the budget's status has not changed yet; that pod is
	// the kubelet's first victim there, so n2-other, ranked after it, stays.
	web := withLabels("app", "web")
	pods := []*v1.Pod{
		testPod("n1-web", "n1", pids(1000), web),
		testPod("n2-web", "n2", pids(1000), web, restarts(1)),
		testPod("n2-other", "n2", pids(1000)),
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: "pdb-uid"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 1},
	}
	n1, n2 := pidNode("n1", 10000, 9700), pidNode("n2", 10000, 9700)
	e := newEnv(t, setup{}, append(objects([]*v1.Node{n1, n2, spareNode("n3")}, pods), pdb)...)
	if got, want := e.run(t, n1, n2, spareNode("n3")), []string{"n1-web"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

// failingPDBLister fails every lookup, as a broken cache would.
type failingPDBLister struct {
	policylisters.PodDisruptionBudgetLister
}

func (failingPDBLister) GetPodPodDisruptionBudgets(*v1.Pod) ([]*policyv1.PodDisruptionBudget, error) {
	return nil, errors.New("cache broken")
}

func TestPDBListErrorsKeepThePod(t *testing.T) {
	n1 := pidNode("n1", 10000, 9700)
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, hotNodePods("n1", 4))...)
	e.plugin.pdbs = failingPDBLister{e.plugin.pdbs}
	if got := e.run(t, n1, spareNode("n2")); len(got) != 0 {
		t.Fatalf("evicted %v although no pod's PodDisruptionBudgets could be listed", got)
	}
}

// TestIsNoPDB pins the text by which the lister says that no budget matches.
func TestIsNoPDB(t *testing.T) {
	lister := policylisters.NewPodDisruptionBudgetLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}))
	_, err := lister.GetPodPodDisruptionBudgets(testPod("a", "n1"))
	if err == nil || !isNoPDB(err) {
		t.Fatalf("GetPodPodDisruptionBudgets without budgets: %v, which isNoPDB does not recognise", err)
	}
	if isNoPDB(errors.New("cache broken")) {
		t.Error("isNoPDB takes any error for none")
	}
}

// TestUnknownEvictionOutcomeEndsTheNodesRelief: the API server evicts n1-b
// but the plugin never gets its answer (the API server restarts, the
// connection drops, the request times out). 9990 of 10000 PIDs are used and
// each pod held 200 at the sample: one uninterrupted run evicts a to e
// (8990 ≤ 9000). Were n1-b's error taken for a refusal, the plan made again
// without it would evict c to f: six pods where the plan has five. The
// plugin leaves the node for the next cycle instead, which sees a and b
// terminating, their listed PIDs freed (9590 > 9500), and evicts c to e:
// the plan, each pod once.
func TestUnknownEvictionOutcomeEndsTheNodesRelief(t *testing.T) {
	pods := hotNodePods("n1", 7)
	usage := map[*v1.Pod]int64{}
	for _, p := range pods {
		usage[p] = 200
	}
	node := func() *v1.Node { return listed(pidNode("n1", 10000, 9990), usage) }
	plan := newEnv(t, setup{}, objects([]*v1.Node{node(), spareNode("n2")}, pods)...).run(t, node(), spareNode("n2"))
	if want := []string{"n1-a", "n1-b", "n1-c", "n1-d", "n1-e"}; !equal(plan, want) {
		t.Fatalf("uninterrupted run evicted %v, want %v", plan, want)
	}
	for name, err := range map[string]error{
		"connection refused": &url.Error{Op: "Post", URL: "https://127.0.0.1:6443/api/v1/namespaces/default/pods/n1-b/eviction",
			Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}},
		"API server's timeout":          apierrors.NewTimeoutError("request did not complete within the allowed duration", 0),
		"API server shutting down":      apierrors.NewServiceUnavailable("apiserver is shutting down"),
		"client deadline":               context.DeadlineExceeded,
		"webhook failed (server error)": apierrors.NewInternalError(errors.New("failed calling webhook")),
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, setup{unanswered: map[string]error{"n1-b": err}}, objects([]*v1.Node{node(), spareNode("n2")}, pods)...)
			first := e.run(t, node(), spareNode("n2"))
			if want := []string{"n1-a", "n1-b"}; !equal(first, want) {
				t.Fatalf("evictions requested %v, want %v and none after the unknown outcome", first, want)
			}
			// The next cycle: a and b are terminating.
			var after []*v1.Pod
			for _, p := range pods {
				p = p.DeepCopy()
				if slices.Contains(first, p.Name) {
					terminatingPod(p)
				}
				after = append(after, p)
			}
			e = newEnv(t, setup{}, objects([]*v1.Node{node(), spareNode("n2")}, after)...)
			second := e.run(t, node(), spareNode("n2"))
			if all := append(slices.Clone(first), second...); !equal(all, plan) {
				t.Errorf("evicted %v, then %v: want the plan %v, each pod once", first, second, plan)
			}
		})
	}
}

// TestOutcomeUnknownOfTheEvictorsErrors classifies the errors the real
// PodEvictor returns for the API server's answers (it rewraps a 429 and a
// 404 in errors of its own) and for no answer: only the latter, and 5xx,
// leave open whether the pod was evicted.
func TestOutcomeUnknownOfTheEvictorsErrors(t *testing.T) {
	gr := v1.Resource("pods")
	for _, c := range []struct {
		name    string
		err     error
		unknown bool
	}{
		{"PodDisruptionBudget (429)", apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0), false},
		{"pod gone (404)", apierrors.NewNotFound(gr, "a"), false},
		{"forbidden (403)", apierrors.NewForbidden(gr, "a", errors.New("no RBAC")), false},
		{"conflict (409)", apierrors.NewConflict(gr, "a", errors.New("changed")), false},
		{"connection refused", &url.Error{Op: "Post", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, true},
		{"API server's timeout (504)", apierrors.NewTimeoutError("request did not complete within the allowed duration", 0), true},
		{"API server shutting down (503)", apierrors.NewServiceUnavailable("apiserver is shutting down"), true},
		{"internal error (500)", apierrors.NewInternalError(errors.New("failed calling webhook")), true},
		{"request's context ended", context.Canceled, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := testPod("a", "n1")
			e := newEnv(t, setup{unanswered: map[string]error{"a": c.err}}, objects([]*v1.Node{pidNode("n1", 10000, 9990)}, []*v1.Pod{pod})...)
			err := e.evictor.EvictPod(context.Background(), pod, evictions.EvictOptions{StrategyName: PluginName})
			if err == nil {
				t.Fatal("the evictor reported no error")
			}
			if got := outcomeUnknown(err); got != c.unknown {
				t.Errorf("outcomeUnknown(%v) = %v, want %v", err, got, c.unknown)
			}
		})
	}
	for _, err := range []error{evictions.NewEvictionNodeLimitError("n1"), evictions.NewEvictionNamespaceLimitError("default"), evictions.NewEvictionTotalLimitError()} {
		if outcomeUnknown(err) {
			t.Errorf("outcomeUnknown(%v): the evictor's own limit is a refusal", err)
		}
	}
}

// A replacement must leave its destination at or below this plugin's own
// thresholds, not only above NodePIDs' floor, or relieving one node would
// push another over and be relieved in turn; a policy that relieves memory
// only gets the same check by the OOM model.
func TestRoomKeepsDestinationsUnderTheThresholds(t *testing.T) {
	t.Run("PIDs", func(t *testing.T) {
		args := RelieveNodePressureArgs{PIDs: &PIDsTrigger{ThresholdPercent: ptr.To[int64](90)}}
		pods := []*v1.Pod{testPod("a", "n1", pids(1000))}
		n1 := pidNode("n1", 10000, 9700)
		// 8000 + 1000 = 90 %: at the threshold. 8100 + 1000 = 91 %, above
		// it, though 900 stay free, above NodePIDs' floor of 512.
		for used, want := range map[int64][]string{8000: {"a"}, 8100: nil} {
			n2 := pidNode("n2", 10000, used)
			e := newEnv(t, setup{args: args}, objects([]*v1.Node{n1, n2}, pods)...)
			if got := e.run(t, n1, n2); !equal(got, want) {
				t.Errorf("destination at %d: evicted %v, want %v", used, got, want)
			}
		}
	})
	t.Run("memory", func(t *testing.T) {
		args := RelieveNodePressureArgs{OOM: &OOMTrigger{}}
		var pods []*v1.Pod
		for i := range 5 {
			pods = append(pods, testPod(fmt.Sprintf("m%d", i), "n1", memoryLimit(3<<30), restarts(int32(5-i))))
		}
		// n1: 15Gi worst case on 10Gi, 50 %. n2 has 10Gi. With three 3Gi
		// pods there, one 3Gi replacement makes a shortfall of 20 %, the
		// threshold, and a second 50 %: one eviction only, which takes n1
		// to 20 %, its threshold. With four pods there, none.
		for held, want := range map[int][]string{3: {"m0"}, 4: nil} {
			nodes := []*v1.Node{memoryNode("n1"), memoryNode("n2")}
			all := slices.Clone(pods)
			for i := range held {
				all = append(all, testPod(fmt.Sprintf("n2-%d", i), "n2", memoryLimit(3<<30)))
			}
			e := newEnv(t, setup{args: args}, objects(nodes, all)...)
			got := e.run(t, nodes...)
			if !equal(got, want) {
				t.Errorf("destination holding %d pods: evicted %v, want %v", held, got, want)
			}
		}
	})
}

// A replacement holds what the pod held: a pod listed at 5,000 PIDs that
// declares nothing (the default, 100) is not moved to a node that can take
// 1,488 (2,000 free, less NodePIDs' floor of 512), though its declaration
// would fit there.
func TestRoomCountsWhatThePodHeld(t *testing.T) {
	hog := testPod("hog", "n1")
	n1 := listed(pidNode("n1", 10000, 9700), map[*v1.Pod]int64{hog: 5000})
	for used, want := range map[int64][]string{8000: nil, 4000: {"hog"}} {
		n2 := pidNode("n2", 10000, used)
		e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, []*v1.Pod{hog})...)
		if got := e.run(t, n1, n2); !equal(got, want) {
			t.Errorf("destination at %d of 10000 PIDs: evicted %v, want %v", used, got, want)
		}
		if want == nil {
			if w := e.warningEvents(); len(w) != 1 || !strings.Contains(w[0], "default/hog (5000 PIDs): no other node has room for its replacement's 5000 PIDs") {
				t.Errorf("Warning Events %q, want one saying the replacement's 5000 PIDs find no room", w)
			}
		}
	}
}

// When the pod the kubelet would evict next has nowhere to go, the pods
// after it in the kubelet's ranking are bystanders: evicting them would
// leave the cause on the node. Nothing is evicted, and the Warning says
// why; with room for the cause, the cause alone goes.
func TestNoBystanderWhenTheCauseCannotMove(t *testing.T) {
	hog := testPod("hog", "n1", ownedBy("hog"))
	a := testPod("a", "n1", ownedBy("a"))
	b := testPod("b", "n1", ownedBy("b"))
	n1 := listed(pidNode("n1", 10000, 9700), map[*v1.Pod]int64{hog: 3000, a: 400, b: 350})
	// At 7,000 of 10,000 PIDs n2 takes a's and b's replacements, not
	// hog's 3,000 (threshold 95 %); at 5,000 it takes hog's.
	for used, want := range map[int64][]string{7000: nil, 5000: {"hog"}} {
		n2 := pidNode("n2", 10000, used)
		e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, []*v1.Pod{hog, a, b})...)
		if got := e.run(t, n1, n2); !equal(got, want) {
			t.Errorf("destination at %d of 10000 PIDs: evicted %v, want %v", used, got, want)
		}
		if want == nil {
			w := e.warningEvents()
			if len(w) != 1 || !strings.Contains(w[0], "the pod the kubelet would evict next, default/hog, cannot be evicted (no other node has room") || !strings.Contains(w[0], "default/hog (3000 PIDs): no other node has room") ||
				!strings.Contains(w[0], "default/a (400 PIDs): ranked after default/hog, which cannot be evicted: not the pressure's cause") {
				t.Errorf("Warning Events %q, want one naming hog's missing room and a ranked after it", w)
			}
			// kubectl headroom shows the same.
			p, err := e.plugin.Plan(context.Background(), []*v1.Node{n1, n2}, n1)
			if err != nil {
				t.Fatal(err)
			}
			for _, pp := range p.Pods {
				if pp.Evict || pp.Pod.Name != "hog" && pp.Reason != "ranked after default/hog, which cannot be evicted: not the pressure's cause" {
					t.Errorf("Plan: %s evict=%v, reason %q", pp.Pod.Name, pp.Evict, pp.Reason)
				}
			}
		}
	}
}

// A pod of another namespace whose ownerReference claims a ReplicaSet's UID
// is not one of its pods: it does not take the ReplicaSet's turns. Here the
// intruder holds the most PIDs, so the kubelet's ranking takes it, and its
// delete-priority puts it last in the group it claims to belong to; were it
// one of web's pods, web's own order would evict web-1 in its place.
func TestAnOwnerIsItsNamespaceAndUID(t *testing.T) {
	web1 := testPod("web-1", "n1", ownedBy("web"), inNamespace("team-a"))
	web2 := testPod("web-2", "n1", ownedBy("web"), inNamespace("team-a"))
	intruder := testPod("intruder", "n1", ownedBy("web"), inNamespace("team-b"), priority("-2147483648"))
	pods := []*v1.Pod{web1, web2, intruder}
	n1 := listed(pidNode("n1", 10000, 9700), map[*v1.Pod]int64{intruder: 800, web1: 750, web2: 100})
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"intruder"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

// headroom.dev/pids: "0" does not make a pod look as if evicting it frees
// nothing: on a node without a per-pod list, where gains are declarations, a
// declaration counts at least defaultPodPIDs. Otherwise team A's six pods,
// first in the kubelet's ranking (lower priority), would be passed over and
// team B's six evicted in their place.
func TestADeclarationOfNoPIDsSteersNothing(t *testing.T) {
	var pods []*v1.Pod
	for i := range 6 {
		pods = append(pods,
			testPod(fmt.Sprintf("a-%d", i), "n1", ownedBy("a"), inNamespace("team-a"), pids(0)),
			testPod(fmt.Sprintf("b-%d", i), "n1", ownedBy("b"), inNamespace("team-b"), podPriority(100)))
	}
	// 9550 − 6 × 100 = 8950 ≤ 9000.
	n1 := pidNode("n1", 10000, 9550)
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	got := e.run(t, n1, spareNode("n2"))
	if len(got) != 6 || slices.ContainsFunc(got, func(name string) bool { return !strings.HasPrefix(name, "a-") }) {
		t.Fatalf("evicted %v, want team A's six pods", got)
	}
}
