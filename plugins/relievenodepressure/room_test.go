package relievenodepressure

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/framework/plugins/defaultevictor"
	"sigs.k8s.io/descheduler/test"
)

// A destination counts only where the scheduler could place the
// replacement: the hog's node selector (or required node affinity) allows
// only n2, with room for 1,400 PIDs below the threshold; n3, which it may
// not use, has plenty. Nothing is evicted, and the Warning says why. With
// room on n2 the hog goes.
func TestRoomOnlyWhereTheReplacementMayGo(t *testing.T) {
	for _, c := range []struct {
		name string
		opt  podOption
	}{
		{"nodeSelector", func(p *v1.Pod) { p.Spec.NodeSelector = map[string]string{"pool": "small"} }},
		{"required node affinity", requireNode(false, "pool", "small")},
	} {
		t.Run(c.name, func(t *testing.T) {
			n1, pods := hotNode(c.opt)
			n3 := labelled(pidNode("n3", 10000, 1000), "pool", "big")
			for used, want := range map[int64][]string{8100: nil, 1000: {"hog"}} {
				n2 := labelled(pidNode("n2", 10000, used), "pool", "small")
				nodes := []*v1.Node{n1, n2, n3}
				e := newEnv(t, setup{}, objects(nodes, pods)...)
				if got := e.run(t, nodes...); !equal(got, want) {
					t.Fatalf("n2 at %d of 10000 PIDs: evicted %v, want %v", used, got, want)
				}
				if want != nil {
					continue
				}
				w := e.warningEvents()
				if len(w) != 1 || !strings.Contains(w[0], "the pod the kubelet would evict next, default/hog, cannot be evicted (no other node has room for its replacement's 5000 PIDs") ||
					!strings.Contains(w[0], "other nodes it may not go to: 1 outside its node selector or required node affinity") {
					t.Errorf("Warning Events %q, want one saying the hog's only node has no room and n3 is outside its selector", w)
				}
			}
		})
	}
}

// The room check follows the scheduler's NodeUnschedulable filter: a
// cordoned node takes a pod that tolerates the unschedulable taint.
func TestCordonedNodeTakesAPodThatToleratesIt(t *testing.T) {
	tolerates := func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeUnschedulable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	}
	for _, c := range []struct {
		opts []podOption
		want []string
	}{{nil, nil}, {[]podOption{tolerates}, []string{"hog"}}} {
		n1, pods := hotNode(c.opts...)
		n2 := pidNode("n2", 10000, 1000)
		n2.Spec.Unschedulable = true
		e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, pods)...)
		if got := e.run(t, n1, n2); !equal(got, c.want) {
			t.Errorf("tolerating %v: evicted %v, want %v", c.opts != nil, got, c.want)
		}
	}
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
