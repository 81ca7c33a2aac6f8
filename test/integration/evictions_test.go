package integration

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// planRow is one pod of `kubectl headroom evictions`.
type planRow struct {
	pod      string
	evict    bool
	decision string // the eviction's reason, or why the pod stays
}

var planLine = regexp.MustCompile(`^\d+\s+(\S+)\s+-?\d+\s+\d+\s+(EVICT \d+|skip): (.*)$`)

func parsePlan(t *testing.T, out string) []planRow {
	t.Helper()
	var rows []planRow
	for _, line := range strings.Split(out, "\n") {
		if m := planLine.FindStringSubmatch(line); m != nil {
			rows = append(rows, planRow{pod: m[1], evict: m[2] != "skip", decision: m[3]})
		}
	}
	if len(rows) == 0 {
		t.Fatalf("no plan in\n%s", out)
	}
	return rows
}

// TestKubectlHeadroomEvictionsIsTheNextRun lists, with `kubectl headroom
// evictions`, what RelieveNodePressure would evict from a node short of
// PIDs (9900 of 10000, the shipped policy relieves above 95 % down to 90 %,
// each pod declaring 400), then runs the built headroom-descheduler once
// with the shipped policy: the pods it evicts, their order and their
// reasons, and the pods it passes over with why, must be the ones listed.
// On the node, in the plugin's order:
//
//	bare      no owner, delete-priority 10  DefaultEvictor: no ownerRefs
//	legacy-*  placed by default-scheduler, delete-priority 9 (2 pods)
//	prio      delete-priority 5             evicted 1st
//	pending   Pending, declares 0 PIDs      below the floor
//	notready  Running, not Ready            evicted 2nd
//	guarded   its PDB allows no disruption
//	fresh     Ready for 2 minutes           evicted 3rd: 8700 ≤ 9000
//	restarts  not needed
func TestKubectlHeadroomEvictionsIsTheNextRun(t *testing.T) {
	cp, ctx := rnpStart(t)
	c := cp.Client
	ns := metav1.NamespaceDefault
	roles := []rnpRole{
		{name: "prio", phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour, annotations: map[string]string{rnpDeletePriority: "5"}},
		{name: "pending", phase: corev1.PodPending, annotations: map[string]string{pidstats.AnnotationPodPIDs: "0"}},
		{name: "notready", phase: corev1.PodRunning, restarts: 2},
		{name: "guarded", phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour,
			annotations: map[string]string{rnpDeletionCost: "-100"}, labels: map[string]string{"guarded": "true"}},
		{name: "fresh", phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Minute},
		{name: "restarts", phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour, restarts: 7},
	}
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "guarded", Namespace: ns},
		Spec: policyv1.PodDisruptionBudgetSpec{
			MinAvailable: ptr.To(intstr.FromInt32(1)),
			Selector:     &metav1.LabelSelector{MatchLabels: map[string]string{"guarded": "true"}},
		},
	}
	if _, err := c.PolicyV1().PodDisruptionBudgets(ns).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, rnpDeployment(int32(len(roles))), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := rnpWaitPods(ctx, t, c, len(roles))
	role := map[string]string{} // "ns/pod" → role
	for i, r := range roles {
		rnpApplyRole(ctx, t, c, &pods[i], r)
		role[ns+"/"+pods[i].Name] = r.name
	}
	bare := rnpBarePod()
	if _, err := c.CoreV1().Pods(ns).Create(ctx, bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rnpApplyRole(ctx, t, c, bare, rnpRole{name: "bare", phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour})
	role[ns+"/bare"] = "bare"
	legacy := rnpWorkload("legacy", 2, rnpNode, "", map[string]string{rnpDeletePriority: "9"})
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, legacy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	legacyPods := rnpPodsOf(ctx, t, c, "legacy", 2)
	rnpRunning(ctx, t, c, legacyPods)
	for _, p := range legacyPods {
		role[ns+"/"+p.Name] = "legacy"
	}
	rnpWaitPDBBlocks(ctx, t, c, ns, pdb.Name)

	stats := pidstats.NodeStats{Capacity: 10000, Used: 9900, SampledAt: time.Now()}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": stats.Annotations()}})
	if _, err := c.CoreV1().Nodes().Patch(ctx, rnpNode, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	rnpFirstSample(ctx, t, cp, rnpNode)
	out := kubectlHeadroom(ctx, t, cp, "evictions", rnpNode)
	t.Logf("kubectl headroom evictions %s:\n%s", rnpNode, out)
	plan := parsePlan(t, out)
	var order, planned []string
	why := map[string]string{}
	for _, r := range plan {
		order = append(order, role[r.pod])
		if r.evict {
			planned = append(planned, r.pod)
		}
		why[r.pod] = r.decision
	}
	// The effective order: web, the most doubled up, first across
	// workloads, its pods in its own order; legacy's and bare's delete
	// priorities (9, 10) order only their own pods.
	wantOrder := []string{"prio", "pending", "notready", "guarded", "fresh", "restarts", "legacy", "legacy", "bare"}
	if !slices.Equal(order, wantOrder) {
		t.Errorf("listed order %v, want %v", order, wantOrder)
	}
	wantWhy := map[string]string{
		"bare":     "not needed",
		"legacy":   "not needed",
		"pending":  "frees 0 PIDs, below the floor of 100",
		"guarded":  "PodDisruptionBudget default/guarded allows no disruption",
		"restarts": "its workload's delete-priority and pod-deletion-cost put other pods of it first",
	}
	for _, r := range plan {
		if w, ok := wantWhy[role[r.pod]]; ok && (r.evict || !strings.HasPrefix(r.decision, w)) {
			t.Errorf("%s (%s): %q, want skip: %q…", role[r.pod], r.pod, r.decision, w)
		}
	}

	// The run.
	log := rnpRun(t, cp)
	evicted := rnpEvicted(log)
	if !slices.Equal(evicted, planned) {
		t.Fatalf("headroom-descheduler evicted %v, kubectl headroom evictions listed %v\n%s", evicted, planned, rnpPluginLines(log))
	}
	var roleOf []string
	for _, p := range evicted {
		roleOf = append(roleOf, role[p])
	}
	if want := []string{"prio", "notready", "fresh"}; !slices.Equal(roleOf, want) {
		t.Errorf("evicted %v, want %v", roleOf, want)
	}
	for _, p := range evicted {
		m := regexp.MustCompile(`"Evicted pod" pod="` + regexp.QuoteMeta(p) + `" reason="([^"]*)"`).FindStringSubmatch(log)
		if m == nil || m[1] != why[p] {
			t.Errorf("%s evicted with reason %q, listed %q", p, m, why[p])
		}
	}
	// Every pod the run passed over (in either pass) is listed as skipped
	// for that reason (the evictor's filter with the checks it failed), and
	// every pod listed as skipped for a reason of its own was passed over.
	passed := map[string]bool{}
	for _, m := range rnpDecisions.FindAllStringSubmatch(log, -1) {
		if m[1] != "Passing over pod" {
			continue
		}
		passed[m[2]] = true
		got, logged := why[m[2]], m[3]
		if strings.HasPrefix(logged, "the evictor's filter keeps it") {
			logged = "the evictor's filter keeps it"
		}
		if !strings.HasPrefix(got, logged) {
			t.Errorf("the run passed over %s (%s) because %q; listed %q", m[2], role[m[2]], m[3], got)
		}
	}
	for _, r := range plan {
		ownReason := !r.evict && !strings.HasPrefix(r.decision, "not needed") && !strings.HasPrefix(r.decision, "its workload's")
		if ownReason != passed[r.pod] {
			t.Errorf("%s (%s): listed %q, passed over by the run: %v", r.pod, role[r.pod], r.decision, passed[r.pod])
		}
	}
}
