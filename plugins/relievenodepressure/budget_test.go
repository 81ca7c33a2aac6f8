package relievenodepressure

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgotesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
)

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

// The eviction budgets hold over the window across many one-second runs,
// as the Deployment runs the descheduler, and across a restart: ten nodes
// stay above the PID threshold in every run (the fake API server evicts
// nothing, and the sample lists the hog, so no wait for a newer sample holds
// a node back), so only the budget bounds the evictions. Each budget is
// reached in its first window, never exceeded in any window, and allows
// evictions again exactly when the window (20 s, plus its one-second
// bucket) has slid past the earlier ones: the totals over 70 runs are
// exactly the budget times the windows begun. Halfway, a new plugin
// instance reads the same ConfigMap, as after a restart or a change of
// leader, and the count goes on.
func TestEvictionBudgetHoldsOverTheWindow(t *testing.T) {
	const runs, restartAt = 70, 30
	window := 20 * time.Second
	for _, tc := range []struct {
		name   string
		budget EvictionBudget
		// limit and key: the budget that binds, and what it counts by.
		limit int
		key   func(node, namespace string) string
		// want is the evictions of the 70 runs: windows begin at 0, 21,
		// 42 and 63 s.
		want int
	}{
		{"total", EvictionBudget{Total: ptr.To[int32](7)}, 7,
			func(string, string) string { return "" }, 4 * 7},
		{"per node", EvictionBudget{Total: ptr.To[int32](50), PerNode: ptr.To[int32](2)}, 2,
			func(node, _ string) string { return node }, 4 * 2 * 10},
		{"per namespace", EvictionBudget{Total: ptr.To[int32](50), PerNamespace: ptr.To[int32](3)}, 3,
			func(_, ns string) string { return ns }, 4 * 3 * 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.budget
			b.Window = &metav1.Duration{Duration: window}
			args := RelieveNodePressureArgs{EvictionBudget: &b}
			nodes := []*v1.Node{spareNode("spare")}
			var pods []*v1.Pod
			where := map[string][2]string{} // pod → node, namespace
			for i := range 10 {
				node := fmt.Sprintf("n%d", i)
				ns := fmt.Sprintf("ns%d", i%3)
				hog := testPod("hog-"+node, node, inNamespace(ns), ownedBy("hog-"+node))
				pods = append(pods, hog)
				where[hog.Name] = [2]string{node, ns}
				nodes = append(nodes, listed(pidNode(node, 10000, 9700), map[*v1.Pod]int64{hog: 800}))
			}
			RegisterMetrics()
			before, err := testutil.GetCounterMetricValue(BudgetExhaustedTotal.WithLabelValues(map[string]string{"total": BudgetTotal, "per node": BudgetNode, "per namespace": BudgetNamespace}[tc.name]))
			if err != nil {
				t.Fatal(err)
			}

			e := newEnv(t, setup{args: args}, objects(nodes, pods)...)
			var at []time.Duration // when each eviction was requested
			var names []string
			seen := 0
			for i := range runs {
				if i == restartAt {
					// A new process: nothing in memory, the ConfigMap as the
					// old one left it.
					e = newEnv(t, setup{args: args}, append(objects(nodes, pods), e.stateOf(t)...)...)
					seen = 0
				}
				clock := now.Add(time.Duration(i) * time.Second)
				e.plugin.now = func() time.Time { return clock }
				got := e.run(t, nodes...)
				for _, name := range got[seen:] {
					at, names = append(at, time.Duration(i)*time.Second), append(names, name)
				}
				seen = len(got)
			}
			if len(at) != tc.want {
				t.Errorf("%d evictions in %d one-second runs, want %d: %d per window of %s", len(at), runs, tc.want, tc.limit, window)
			}
			// No window of 20 s holds more than the budget of any key, and
			// the first window holds exactly the budget of some key.
			maxSeen := 0
			for i := range at {
				counts := map[string]int{}
				for j := i; j < len(at) && at[j]-at[i] < window; j++ {
					w := where[names[j]]
					k := tc.key(w[0], w[1])
					if counts[k]++; counts[k] > tc.limit {
						t.Fatalf("%d evictions of %q within %s from %s, budget %d: %v", counts[k], k, window, at[i], tc.limit, strings.Join(names[i:j+1], ","))
					}
					maxSeen = max(maxSeen, counts[k])
				}
			}
			if maxSeen != tc.limit {
				t.Errorf("at most %d evictions of one key in a window, want the budget %d reached", maxSeen, tc.limit)
			}
			after, err := testutil.GetCounterMetricValue(BudgetExhaustedTotal.WithLabelValues(map[string]string{"total": BudgetTotal, "per node": BudgetNode, "per namespace": BudgetNamespace}[tc.name]))
			if err != nil {
				t.Fatal(err)
			}
			if after == before {
				t.Errorf("headroom_relieve_node_pressure_budget_exhausted_total did not count the reliefs the budget stopped")
			}
		})
	}
}

// Two replicas share the budget through the ConfigMap: while this run
// evicts from n1, another replica (a leader on its way out) counts an
// eviction of its own in the ledger. This run's next write is refused
// (409), it reads the ConfigMap again, and the budget of 2 is then spent:
// n2 waits. The ledger keeps both evictions, none lost.
func TestEvictionBudgetIsExactAcrossReplicas(t *testing.T) {
	hog1 := testPod("hog1", "n1", ownedBy("hog1"))
	hog2 := testPod("hog2", "n2", ownedBy("hog2"))
	nodes := []*v1.Node{listed(pidNode("n1", 10000, 9700), map[*v1.Pod]int64{hog1: 800}),
		listed(pidNode("n2", 10000, 9700), map[*v1.Pod]int64{hog2: 800}), spareNode("spare")}
	args := RelieveNodePressureArgs{EvictionBudget: &EvictionBudget{Total: ptr.To[int32](2)}}
	e := newEnv(t, setup{args: args}, objects(nodes, []*v1.Pod{hog1, hog2})...)
	ns, name, _ := parseStateConfigMap(DefaultStateConfigMap)
	gvr := v1.SchemeGroupVersion.WithResource("configmaps")
	var (
		mu      sync.Mutex
		edited  bool
		refused int
	)
	e.client.PrependReactor("create", "pods", func(action clientgotesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" || action.(clientgotesting.CreateAction).GetObject().(metav1.Object).GetName() != "hog1" {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		obj, err := e.client.Tracker().Get(gvr, ns, name)
		if err != nil {
			t.Errorf("the ledger was not written before the eviction: %v", err)
			return false, nil, nil
		}
		cm := obj.(*v1.ConfigMap).DeepCopy()
		var l budgetLedger
		if err := json.Unmarshal([]byte(cm.Data[budgetKey]), &l); err != nil || len(l.Entries) != 1 {
			t.Errorf("ledger %q (%v) before hog1's eviction, want hog1's count", cm.Data[budgetKey], err)
		}
		l.Entries = append(l.Entries, budgetEntry{At: now.Unix(), Node: "other", Namespace: "elsewhere", N: 1})
		raw, _ := json.Marshal(l)
		cm.Data[budgetKey] = string(raw)
		if err := e.client.Tracker().Update(gvr, cm, ns); err != nil {
			t.Error(err)
		}
		edited = true
		return false, nil, nil
	})
	e.client.PrependReactor("patch", "configmaps", func(clientgotesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if !edited {
			return false, nil, nil
		}
		edited = false
		refused++
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, name, fmt.Errorf("the object has been modified"))
	})
	if got, want := e.run(t, nodes...), []string{"hog1"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v: the other replica's eviction spent the rest of the budget", got, want)
	}
	if refused != 1 {
		t.Fatalf("%d writes refused, want the one after the other replica's", refused)
	}
	cm, err := e.client.CoreV1().ConfigMaps(ns).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var l budgetLedger
	if err := json.Unmarshal([]byte(cm.Data[budgetKey]), &l); err != nil {
		t.Fatal(err)
	}
	if got := l.count(e.plugin.args.EvictionBudget, now, anyEntry); got != 2 {
		t.Errorf("ledger %s counts %d evictions, want both replicas' 2", cm.Data[budgetKey], got)
	}
}

// A ledger edited in the state ConfigMap never frees budget: a negative
// count counts nothing, and counts that would overflow int32 together
// count as spent budgets.
func TestEditedLedgerNeverFreesBudget(t *testing.T) {
	b := &EvictionBudget{Window: &metav1.Duration{Duration: 4 * time.Minute}, Total: ptr.To[int32](20)}
	at := now.Unix()
	raw := fmt.Sprintf(`{"evictions":[{"t":%d,"node":"n1","ns":"a","n":2147483647},{"t":%d,"node":"n2","ns":"a","n":2147483647},{"t":%d,"node":"n3","ns":"b","n":-1000}]}`, at, at, at)
	l := parseLedger(ktesting.NewLogger(t, ktesting.DefaultConfig), raw, true)
	if got := l.count(b, now, anyEntry); got < *b.Total {
		t.Errorf("counted %d evictions in the window, want at least the total budget %d", got, *b.Total)
	}
	if budget, why := l.spent(b, now, "n4", "c"); budget != BudgetTotal {
		t.Errorf("spent = %q (%s), want %q", budget, why, BudgetTotal)
	}
}

// FuzzParseLedger: whatever the ConfigMap holds, the ledger parses or is
// dropped, and no count within it is negative.
func FuzzParseLedger(f *testing.F) {
	f.Add(fmt.Sprintf(`{"evictions":[{"t":%d,"node":"n1","ns":"a","n":3}]}`, now.Unix()))
	f.Add(`{"evictions":[{"t":0,"n":-5},{"t":9223372036854775807,"n":2147483647}]}`)
	f.Fuzz(func(t *testing.T, raw string) {
		b := &EvictionBudget{Window: &metav1.Duration{Duration: 4 * time.Minute}, Total: ptr.To[int32](20)}
		l := parseLedger(klog.Background(), raw, true)
		if n := l.count(b, now, anyEntry); n < 0 {
			t.Fatalf("ledger %q counts %d evictions", raw, n)
		}
	})
}

// A budget cuts a plan where it runs out, as maxPodsToEvictPerNode does:
// the evictions it leaves are made if they bring the node to or below its
// threshold, though not to its target; if they do not, nothing is
// evicted. n1 (9700 of 10000, threshold 95 %, target 90 %) needs one
// eviction of 300 PIDs to reach its threshold and three to reach its
// target; n2 (9950) needs two to reach its threshold. A per-node budget of
// one relieves n1 by one pod and leaves n2 alone.
func TestABudgetCutsAPlanAtTheThresholdNotTheTarget(t *testing.T) {
	var pods []*v1.Pod
	for _, node := range []string{"n1", "n2"} {
		for _, name := range []string{"a", "b", "c"} {
			pods = append(pods, testPod(node+"-"+name, node, pids(300)))
		}
	}
	nodes := []*v1.Node{pidNode("n1", 10000, 9700), pidNode("n2", 10000, 9950), spareNode("n3")}
	args := RelieveNodePressureArgs{EvictionBudget: &EvictionBudget{Window: &metav1.Duration{Duration: time.Minute}, Total: ptr.To[int32](20), PerNode: ptr.To[int32](1)}}
	e := newEnv(t, setup{args: args}, objects(nodes, pods)...)
	if got := e.run(t, nodes...); len(got) != 1 || !strings.HasPrefix(got[0], "n1-") {
		t.Fatalf("evicted %v, want one pod of n1 and none of n2", got)
	}
}
