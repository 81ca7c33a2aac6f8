package relievenodepressure

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"
)

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
