package relievenodepressure

import (
	"fmt"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/framework/plugins/defaultevictor"
)

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

// A bare pod that cannot start (its Secret is missing), bound before the
// sample and declaring many PIDs, holds nothing: on a node at 80 % it
// raises no pressure, and another tenant's running pods stay. NodePIDs and
// the room check still count its declaration for placement.
func TestADeclarationRaisesNoPressure(t *testing.T) {
	bare := testPod("bare", "n1", noOwner, pids(4000), inNamespace("tenant-a"), waitingForSandbox)
	pods := []*v1.Pod{bare}
	held := map[*v1.Pod]int64{}
	for i := range 5 {
		p := testPod(fmt.Sprintf("web-%d", i), "n1", inNamespace("tenant-b"))
		pods = append(pods, p)
		held[p] = 1000
	}
	n1 := listed(pidNode("n1", 10000, 8000), held)
	nodes := []*v1.Node{n1, pidNode("n2", 10000, 1000)}
	e := newEnv(t, setup{}, objects(nodes, pods)...)
	if got := e.run(t, nodes...); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
	p, _, _ := planned(t, e, nodes, n1)
	if p.Triggered {
		t.Errorf("Plan: triggered at %v, want the 8000 measured PIDs, below the threshold", p.Before)
	}
	if got, want := fmt.Sprint(p.Before), "[PIDsUsed 8000/10000 (80.0%)]"; got != want {
		t.Errorf("Plan: figures %s, want %s", got, want)
	}

	// As a destination n1 counts the declaration: 8000 + 4000 leaves no
	// room for hog's replacement of 1000; without the bare pod it does.
	hog := testPod("hog", "n3", ownedBy("hog"))
	n3 := listed(pidNode("n3", 10000, 9700), map[*v1.Pod]int64{hog: 1000})
	nodes = []*v1.Node{n3, n1}
	for _, c := range []struct {
		pods []*v1.Pod
		want []string
	}{{append(pods, hog), nil}, {append(pods[1:], hog), []string{"hog"}}} {
		e = newEnv(t, setup{}, objects(nodes, c.pods)...)
		if got := e.run(t, nodes...); !equal(got, c.want) {
			t.Errorf("with %d pods on n1: evicted %v, want %v", len(c.pods)-1, got, c.want)
		}
	}
}
