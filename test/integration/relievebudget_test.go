package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// The eviction budget tests: a bad sample on budgetNodes kwok nodes at
// once, each reporting 9900 of 10000 PIDs used with six listed pods of 100
// PIDs (each node's plan: maxPodsToEvictPerNode 5 of them, to 9400), so
// that the cluster asks for 60 evictions at once where the shipped budget
// allows 20 per window, 5 per node and per namespace (each node's pods
// have a namespace of their own).
const (
	budgetNodes    = 12
	budgetPods     = 6
	budgetTotal    = 20
	budgetPerNode  = 5
	budgetWindow   = 10 * time.Second
	budgetEviction = 100 // PIDs each pod holds, as listed
)

// budgetPolicy is the shipped policy with one change: the budget's window
// is budgetWindow, not 4m, so that a test measures several windows in
// seconds. Its interval, limits, budget counts and everything else are the
// shipped ones.
func budgetPolicy(t *testing.T) []byte {
	t.Helper()
	policy := repoFile(t, "manifests/descheduler/policy.yaml")
	shipped := []byte("        window: 4m\n")
	if bytes.Count(policy, shipped) != 1 {
		t.Fatalf("the shipped policy has no evictionBudget window of 4m")
	}
	return bytes.Replace(policy, shipped, []byte("        window: "+budgetWindow.String()+"\n"), 1)
}

// setUpBudgetPressure makes the bad sample on budgetNodes nodes, with the
// pressure already seen in an earlier sample (the shipped debounce, two
// samples, is met), and gives "spare" room for the replacements. No
// scheduler runs: the ReplicaSets' replacements stay Pending.
func setUpBudgetPressure(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	c := cp.Client
	if _, err := c.CoreV1().Nodes().Patch(ctx, "spare", types.MergePatchType, spareRoom(), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cp.ApplyShippedIdentities(ctx); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	for i := range budgetNodes {
		name := fmt.Sprintf("budget-%02d", i)
		if _, err := cp.CreateNode(ctx, name, resources("8", "32Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		web := rnpWorkload("web", budgetPods, "", relievenodepressure.DefaultSchedulerName, nil)
		web.Namespace = name
		// Created once the namespace's default ServiceAccount exists.
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := c.CoreV1().ServiceAccounts(name).Get(ctx, "default", metav1.GetOptions{})
			return err == nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.AppsV1().Deployments(name).Create(ctx, web, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range budgetNodes {
		name := fmt.Sprintf("budget-%02d", i)
		var pods []corev1.Pod
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			list, err := c.CoreV1().Pods(name).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
			pods = nil
			if err == nil {
				pods = list.Items
			}
			return len(pods) == budgetPods, nil
		}); err != nil {
			t.Fatalf("namespace %s: %d of %d pods", name, len(pods), budgetPods)
		}
		measured := map[types.UID]int64{}
		for j := range pods {
			binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pods[j].Name, Namespace: name},
				Target: corev1.ObjectReference{Kind: "Node", Name: name}}
			if err := c.CoreV1().Pods(name).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			rnpApplyRole(ctx, t, c, &pods[j], rnpRole{name: pods[j].Name, phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour})
			measured[pods[j].UID] = budgetEviction
		}
		rnpSample(ctx, t, c, name, 9900, measured)
		raw, _ := json.Marshal(map[string]any{"seen": []time.Time{time.Now().Add(-time.Minute).UTC().Truncate(time.Second)}})
		seen[name] = string(raw)
	}
	patch, _ := json.Marshal(map[string]any{"data": seen})
	if _, err := c.CoreV1().ConfigMaps(controlplane.Namespace).Patch(ctx, controlplane.DeschedulerStateConfigMap, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// budgetEvictionTimes returns, from the API server's audit log, when each
// successful eviction was received and of which namespace (one per node).
func budgetEvictionTimes(t *testing.T, cp *controlplane.ControlPlane) (at []time.Time, namespaces []string) {
	t.Helper()
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		if e.ObjectRef == nil || e.ObjectRef.Subresource != "eviction" || e.ResponseStatus == nil || e.ResponseStatus.Code != http.StatusCreated {
			continue
		}
		if !strings.HasPrefix(e.ObjectRef.Namespace, "budget-") {
			continue
		}
		at, namespaces = append(at, e.RequestReceivedTimestamp.Time), append(namespaces, e.ObjectRef.Namespace)
	}
	return at, namespaces
}

// checkBudgetHeld checks the evictions against the budget: every window of
// budgetWindow holds at most budgetTotal in all and budgetPerNode of one
// node (its namespace); the total budget is reached in a window; and the
// evictions span at least three windows, the cluster's 60 evictions done.
func checkBudgetHeld(t *testing.T, at []time.Time, namespaces []string) {
	t.Helper()
	idx := make([]int, len(at))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return at[a].Compare(at[b]) })
	most := 0
	for i, a := range idx {
		total, byNS := 0, map[string]int{}
		for _, b := range idx[i:] {
			if at[b].Sub(at[a]) >= budgetWindow {
				break
			}
			total++
			byNS[namespaces[b]]++
			if byNS[namespaces[b]] > budgetPerNode {
				t.Errorf("%d evictions from node %s within %s of %s, budget %d", byNS[namespaces[b]], namespaces[b], budgetWindow, at[a].Format(time.RFC3339Nano), budgetPerNode)
			}
		}
		if total > budgetTotal {
			t.Errorf("%d evictions within %s of %s, budget %d", total, budgetWindow, at[a].Format(time.RFC3339Nano), budgetTotal)
		}
		most = max(most, total)
	}
	if len(idx) == 0 {
		t.Fatal("no eviction")
	}
	span := at[idx[len(idx)-1]].Sub(at[idx[0]])
	t.Logf("%d evictions over %s, at most %d within any %s", len(idx), span.Round(time.Millisecond), most, budgetWindow)
	if most != budgetTotal {
		t.Errorf("at most %d evictions within a window, want the budget %d reached", most, budgetTotal)
	}
	if want := budgetNodes * budgetPerNode; len(idx) != want {
		t.Errorf("%d evictions, want %d: every node's plan, as the windows slide", len(idx), want)
	}
	if span < 2*budgetWindow {
		t.Errorf("evictions span %s, want at least three windows of %s", span, budgetWindow)
	}
}

// waitBudgetEvictions waits until the cluster's 60 evictions are made, or
// the deadline passes, calling run (if not nil) in between.
func waitBudgetEvictions(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, timeout time.Duration, run func()) {
	t.Helper()
	_ = wait.PollUntilContextTimeout(ctx, time.Second, timeout, true, func(context.Context) (bool, error) {
		if run != nil {
			run()
		}
		at, _ := budgetEvictionTimes(t, cp)
		return len(at) >= budgetNodes*budgetPerNode, nil
	})
}

// TestRelieveNodePressureBudgetDeployment runs headroom-descheduler as the
// shipped Deployment does (its args: --descheduling-interval=1s, leader
// election; its identity and RBAC; the shipped policy with its window
// shortened to budgetWindow, see budgetPolicy) against a bad sample on
// twelve nodes at once: the API server's audit log shows at most the
// budget's 20 evictions (and 5 per node) in any window, over three
// windows, where the descheduler's own limits (20 per run) alone let it
// evict all 60 in the first three seconds.
func TestRelieveNodePressureBudgetDeployment(t *testing.T) {
	cp, ctx := rnpStart(t)
	setUpBudgetPressure(ctx, t, cp)
	proc := startDeploymentDescheduler(ctx, t, cp, "headroom-descheduler-budget", budgetPolicy(t))
	waitBudgetEvictions(ctx, t, cp, 4*budgetWindow, nil)
	// A window more: nothing beyond the 60.
	time.Sleep(budgetWindow)
	proc.Stop(5 * time.Second)
	at, namespaces := budgetEvictionTimes(t, cp)
	checkBudgetHeld(t, at, namespaces)
	if t.Failed() {
		t.Log(rnpPluginLines(proc.Log(64 << 10)))
	}
}

// TestRelieveNodePressureBudgetCronJob is the same in the CronJob's mode:
// headroom-descheduler run once per invocation (--descheduling-interval=0)
// with the shipped identity and the same policy, invoked again and again:
// each run starts with fresh evictor counters, and only the budget, read
// from the state ConfigMap, bounds the evictions across them.
func TestRelieveNodePressureBudgetCronJob(t *testing.T) {
	cp, ctx := rnpStart(t)
	setUpBudgetPressure(ctx, t, cp)
	policy := budgetPolicy(t)
	runs := 0
	waitBudgetEvictions(ctx, t, cp, 4*budgetWindow, func() {
		rnpRunPolicy(t, cp, policy)
		runs++
	})
	at, namespaces := budgetEvictionTimes(t, cp)
	t.Logf("%d runs", runs)
	checkBudgetHeld(t, at, namespaces)
}
