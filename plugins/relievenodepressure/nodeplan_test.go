package relievenodepressure

import (
	"context"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/api"
)

// planned returns the pods Plan would evict, in order, with their reasons,
// and the skipped pods' reasons by name.
func planned(t *testing.T, e *env, nodes []*v1.Node, node *v1.Node) (*NodePlan, []string, map[string]string) {
	t.Helper()
	p, err := e.plugin.Plan(context.Background(), nodes, node)
	if err != nil {
		t.Fatalf("Plan: %v", err)
	}
	var evict []string
	skip := map[string]string{}
	for _, pp := range p.Pods {
		if pp.Evict {
			evict = append(evict, pp.Pod.Name)
		} else {
			skip[pp.Pod.Name] = pp.Reason
		}
	}
	return p, evict, skip
}

// Plan lists, in order, exactly what the next Deschedule evicts, with the
// reasons the evictions then carry, and says why every other pod stays.
func TestPlanIsWhatDescheduleEvicts(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	web := withLabels("app", "web")
	pods := []*v1.Pod{
		testPod("bare", "n1", pids(300), web, priority("10"), noOwner),
		testPod("no-pids", "n1", pids(0), web, priority("8")),
		testPod("excluded-namespace", "n1", pids(300), web, priority("7"), inNamespace("kube-system")),
		testPod("other-scheduler", "n1", pids(300), web, priority("6"), func(p *v1.Pod) { p.Spec.SchedulerName = "default-scheduler" }),
		testPod("a", "n1", pids(300), web, restarts(4)),
		testPod("b", "n1", pids(300), web, restarts(3)),
		testPod("c", "n1", pids(300), web, restarts(2)),
		testPod("d", "n1", pids(300), web, restarts(1)),
	}
	// The complete list names every pod but no-pids: it held no PIDs.
	n1 = listed(n1, holding(300, pods, "no-pids"))
	nodes := []*v1.Node{n1, n2}
	e := newEnv(t, setup{args: RelieveNodePressureArgs{Namespaces: &api.Namespaces{Exclude: []string{"kube-system"}}}},
		objects(nodes, pods)...)

	p, evict, skip := planned(t, e, nodes, n1)
	if !p.Triggered || !p.Relieves {
		t.Fatalf("plan: triggered %v, relieves %v; want both", p.Triggered, p.Relieves)
	}
	order := make([]string, len(p.Pods))
	for i, pp := range p.Pods {
		order[i] = pp.Pod.Name
	}
	// Across workloads the kubelet's PID ranking, the neutral order among
	// equals: the ReplicaSet's six pods on the node (doubled up) first,
	// then excluded-namespace's (another namespace: another owner), bare
	// (rank 0), and no-pids, which held nothing. The delete priorities
	// order the ReplicaSet's own pods only: bare's 10 does not put it
	// before another workload's pods.
	if want := []string{"no-pids", "other-scheduler", "a", "b", "c", "d", "excluded-namespace", "bare"}; !equal(order, want) {
		t.Errorf("order %v, want %v", order, want)
	}
	if want := []string{"a", "b", "c"}; !equal(evict, want) {
		t.Fatalf("plan evicts %v, want %v", evict, want)
	}
	wantSkip := map[string]string{
		"bare":               "not needed",
		"no-pids":            "frees 0 PIDs, below the floor of 100",
		"excluded-namespace": "not needed",
		"other-scheduler":    "placed by default-scheduler, not by one of schedulerNames [headroom-scheduler]",
		"d":                  "not needed",
	}
	for name, want := range wantSkip {
		if !strings.HasPrefix(skip[name], want) {
			t.Errorf("%s: skipped because %q, want %q…", name, skip[name], want)
		}
	}
	if got := fmtKV(p.Before); got != "PIDsUsed=9700/10000 (97.0%)" {
		t.Errorf("before %s", got)
	}
	if got := fmtKV(p.After); got != "PIDsUsed=8800/10000 (88.0%)" {
		t.Errorf("after %s", got)
	}

	// Planning evicted nothing.
	if len(e.evicted) != 0 {
		t.Fatalf("Plan evicted %v", e.evicted)
	}
	got := e.run(t, nodes...)
	if !equal(got, evict) {
		t.Fatalf("Deschedule evicted %v, Plan said %v", got, evict)
	}
	for _, pp := range p.Pods {
		// The evictor prefixes its "triggered by <profile>/<plugin>: ".
		if pp.Evict && !strings.HasSuffix(e.reasons[pp.Pod.Name], "/"+PluginName+": "+pp.Reason) {
			t.Errorf("%s: evicted with reason %q, Plan said %q", pp.Pod.Name, e.reasons[pp.Pod.Name], pp.Reason)
		}
	}
}

// A plan that cannot bring the node to its threshold evicts nothing, and
// says so for the pods it would have taken.
func TestPlanOfAnUnrelievableNode(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9900), spareNode("n2")
	pods := []*v1.Pod{
		// The kubelet ranks it last (lowerPriorityFirst), so a and b are
		// taken before the walk ends at it.
		testPod("bare", "n1", pids(3000), noOwner, specPriority(1000)),
		testPod("a", "n1", pids(100)),
		testPod("b", "n1", pids(100)),
	}
	nodes := []*v1.Node{n1, n2}
	e := newEnv(t, setup{}, objects(nodes, pods)...)
	p, evict, skip := planned(t, e, nodes, n1)
	if !p.Triggered || p.Relieves || len(evict) != 0 {
		t.Fatalf("plan: triggered %v, relieves %v, evicts %v; want triggered, nothing evicted", p.Triggered, p.Relieves, evict)
	}
	if !strings.HasPrefix(skip["a"], "evictable, but the plan does not bring the node to its threshold") {
		t.Errorf("a: %q", skip["a"])
	}
	if got := e.run(t, nodes...); len(got) != 0 {
		t.Fatalf("Deschedule evicted %v, Plan said nothing", got)
	}
}

// The per-node limit cuts the plan; the pods beyond it say so.
func TestPlanWithinThePerNodeLimit(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9600), spareNode("n2")
	pods := []*v1.Pod{
		testPod("a", "n1", pids(300), restarts(3)),
		testPod("b", "n1", pids(300), restarts(2)),
		testPod("c", "n1", pids(300), restarts(1)),
	}
	nodes := []*v1.Node{n1, n2}
	e := newEnv(t, setup{args: RelieveNodePressureArgs{MaxPodsToEvictPerNode: ptr.To[uint](1),
		PIDs: &PIDsTrigger{TargetPercent: ptr.To[int64](50)}}}, objects(nodes, pods)...)
	p, evict, skip := planned(t, e, nodes, n1)
	// 9600 − 300 = 9300 ≤ 9500: relieved to the threshold, not the target.
	if !p.Relieves || !equal(evict, []string{"a"}) {
		t.Fatalf("plan: relieves %v, evicts %v; want a", p.Relieves, evict)
	}
	if skip["b"] != "beyond maxPodsToEvictPerNode 1" {
		t.Errorf("b: %q", skip["b"])
	}
	if got := e.run(t, nodes...); !equal(got, evict) {
		t.Fatalf("Deschedule evicted %v, Plan said %v", got, evict)
	}
}

// A node within its thresholds, or without figures, gets no plan.
func TestPlanOfANodeWithoutPressure(t *testing.T) {
	n1, n2, n3 := pidNode("n1", 10000, 5000), spareNode("n2"), spareNode("n3")
	pods := []*v1.Pod{testPod("a", "n1", pids(300)), testPod("b", "n3", pids(300))}
	nodes := []*v1.Node{n1, n2, n3}
	e := newEnv(t, setup{}, objects(nodes, pods)...)
	p, _, _ := planned(t, e, nodes, n1)
	if p.Triggered || len(p.Pods) != 0 || fmtKV(p.Before) != "PIDsUsed=5000/10000 (50.0%)" {
		t.Fatalf("plan of n1: %+v", p)
	}
	p, _, _ = planned(t, e, nodes, n3)
	if p.Triggered || !strings.Contains(p.Unknown["PIDs"], "annotation") {
		t.Fatalf("plan of n3: triggered %v, unknown %q; want why its PIDs are unknown", p.Triggered, p.Unknown)
	}
	if got := e.run(t, nodes...); len(got) != 0 {
		t.Fatalf("Deschedule evicted %v", got)
	}
}

func fmtKV(kv []any) string {
	var b strings.Builder
	for i := 0; i+1 < len(kv); i += 2 {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(kv[i].(string) + "=" + kv[i+1].(string))
	}
	return b.String()
}
