package relievenodepressure

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/api"
	"sigs.k8s.io/descheduler/pkg/framework/plugins/defaultevictor"
)

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

// Whatever keeps the kubelet's first victim from being evicted, the pods
// ranked after it are bystanders: nothing is evicted on the node, and the
// Warning names the pod and the reason.
func TestNoBystanderWhateverKeepsTheFirstVictim(t *testing.T) {
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "hog", Namespace: "default", UID: "pdb-uid"},
		Spec:       policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "hog"}}},
		Status:     policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0},
	}
	for _, c := range []struct {
		name    string
		hog     []podOption
		nodeFit bool
		pdb     bool
		why     string
	}{
		{name: "PodDisruptionBudget", hog: []podOption{withLabels("app", "hog")}, pdb: true,
			why: "PodDisruptionBudget default/hog allows no disruption"},
		{name: "required node affinity pins it", hog: []podOption{requireNode(true, "metadata.name", "n1")},
			why: "other nodes it may not go to: 1 outside its node selector or required node affinity"},
		{name: "required node affinity pins it, nodeFit", hog: []podOption{requireNode(true, "metadata.name", "n1")}, nodeFit: true,
			why: "other nodes it may not go to: 1 outside its node selector or required node affinity"},
		{name: "another scheduler", hog: []podOption{scheduledBy(v1.DefaultSchedulerName)},
			why: "placed by default-scheduler, not by one of schedulerNames"},
		{name: "the evictor's filter", hog: []podOption{noOwner},
			why: "the evictor's filter keeps it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			n1, pods := hotNode(c.hog...)
			nodes := []*v1.Node{n1, pidNode("n2", 10000, 1000)}
			objs := objects(nodes, pods)
			if c.pdb {
				objs = append(objs, pdb)
			}
			e := newEnv(t, setup{evictorArgs: defaultevictor.DefaultEvictorArgs{NodeFit: c.nodeFit}}, objs...)
			if got := e.run(t, nodes...); len(got) != 0 {
				t.Fatalf("evicted %v, want none", got)
			}
			w := e.warningEvents()
			if len(w) != 1 || !strings.Contains(w[0], "the pod the kubelet would evict next, default/hog, cannot be evicted (") ||
				!strings.Contains(w[0], c.why) {
				t.Errorf("Warning Events %q, want one naming the hog and %q", w, c.why)
			}
			p, evict, skip := planned(t, e, nodes, n1)
			if len(evict) != 0 || p.Relieves {
				t.Errorf("Plan evicts %v", evict)
			}
			for _, name := range []string{"a", "b"} {
				if want := "ranked after default/hog, which cannot be evicted: not the pressure's cause"; skip[name] != want {
					t.Errorf("Plan: %s: %q, want %q", name, skip[name], want)
				}
			}
		})
	}
}

// The kubelet never evicts a terminating or a critical pod: it is no
// victim, and the walk goes on past it.
func TestTerminatingOrCriticalFirstVictimEndsNoWalk(t *testing.T) {
	for _, c := range []struct {
		name string
		args RelieveNodePressureArgs
		hog  podOption
		used int64
	}{
		// What the terminating hog holds is already leaving: 9990 − 400
		// settles at 9590, still above the threshold.
		{"terminating", RelieveNodePressureArgs{}, func(p *v1.Pod) {
			p.DeletionTimestamp = &metav1.Time{Time: now.Add(-10 * 1e9)}
		}, 9990},
		// The evictor keeps a system-critical pod, which the kubelet never
		// evicts; ranked by PIDs alone it is first.
		{"critical", RelieveNodePressureArgs{LowerPriorityFirst: ptr.To(false)}, systemCritical, 9700},
	} {
		t.Run(c.name, func(t *testing.T) {
			hog := testPod("hog", "n1", ownedBy("hog"), c.hog)
			a := testPod("a", "n1", ownedBy("a"))
			b := testPod("b", "n1", ownedBy("b"))
			held := map[*v1.Pod]int64{hog: 400, a: 350, b: 300}
			if c.name == "critical" {
				held = map[*v1.Pod]int64{hog: 5000, a: 400, b: 350}
			}
			n1 := listed(pidNode("n1", 10000, c.used), held)
			nodes := []*v1.Node{n1, pidNode("n2", 10000, 1000)}
			e := newEnv(t, setup{args: c.args}, objects(nodes, []*v1.Pod{hog, a, b})...)
			if got, want := e.run(t, nodes...), []string{"a", "b"}; !equal(got, want) {
				t.Fatalf("evicted %v, want %v", got, want)
			}
		})
	}
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

// labelled sets the node's labels.
func labelled(node *v1.Node, kv ...string) *v1.Node {
	node.Labels = map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		node.Labels[kv[i]] = kv[i+1]
	}
	return node
}

// requireNode gives the pod a required node affinity on key: values.
func requireNode(field bool, key string, values ...string) podOption {
	return func(p *v1.Pod) {
		req := []v1.NodeSelectorRequirement{{Key: key, Operator: v1.NodeSelectorOpIn, Values: values}}
		term := v1.NodeSelectorTerm{MatchExpressions: req}
		if field {
			term = v1.NodeSelectorTerm{MatchFields: req}
		}
		p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{term}},
		}}
	}
}

// hotNode is n1 at 9700 of 10000 PIDs: hog, the kubelet's first victim,
// holds 5000, a and b, ranked after it, 400 and 350. hog alone relieves it;
// a and b together bring it to 8950, below the target of 9000.
func hotNode(hogOpts ...podOption) (*v1.Node, []*v1.Pod) {
	hog := testPod("hog", "n1", append([]podOption{ownedBy("hog")}, hogOpts...)...)
	a := testPod("a", "n1", ownedBy("a"))
	b := testPod("b", "n1", ownedBy("b"))
	return listed(pidNode("n1", 10000, 9700), map[*v1.Pod]int64{hog: 5000, a: 400, b: 350}), []*v1.Pod{hog, a, b}
}
