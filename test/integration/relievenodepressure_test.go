package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// rnpRole is what the test makes of one of the Deployment's pods: its status
// and annotations, and whether the run is expected to evict it.
type rnpRole struct {
	name        string
	phase       corev1.PodPhase
	ready       bool
	readyFor    time.Duration
	restarts    int32
	annotations map[string]string
	labels      map[string]string
}

const (
	rnpNode           = "pid-node"
	rnpDeletePriority = "controller.alpha.kubernetes.io/delete-priority"
	rnpDeletionCost   = "controller.kubernetes.io/pod-deletion-cost"
)

// TestRelieveNodePressureEvictsInDeleteOrder runs the built
// headroom-descheduler once, as its CronJob does, with the shipped policy,
// against a Deployment's pods on a kwok node short of PIDs: 9900 of 10000
// used (99 % > the policy's threshold of 95 %), each pod declaring 400 (the
// node has no headroom.dev/pid-pods list, so declarations count). Reaching
// the target of 90 % takes three evictions; the plan is made first. The
// Deployment's pods, in the order the ReplicaSet controller would delete
// them, with delete priority first (annotations order a workload's own pods
// only: the bare pod, a workload of its own, goes last whatever its delete
// priority, and is never reached):
//
//	prio       delete-priority 5             evicted 1st (9500)
//	pending    Pending, declares 0 PIDs      passed over: below the floor
//	notready   Running, not Ready            evicted 2nd (9100)
//	guarded    Ready, deletion cost -100     passed over: its PDB allows no disruption
//	fresh      Ready for 2 minutes           evicted 3rd (8700 ≤ 9000: done)
//	restarts   Ready for 2h, 7 restarts      kept
//	malformed  Ready for 2h, priority "urgent" (counts as 0)  kept, Warning Event
//	bare       no owner, delete-priority 10  kept
func TestRelieveNodePressureEvictsInDeleteOrder(t *testing.T) {
	// The spare node leaves room elsewhere, so the evictor's nodeFit passes.
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
		{name: "malformed", phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour, annotations: map[string]string{rnpDeletePriority: "urgent"}},
	}
	wantEvicted := []string{"prio", "notready", "fresh"}

	// The PodDisruptionBudget is in place before the pods, so the disruption
	// controller has counted the guarded pod healthy when the run starts.
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

	deploy := rnpDeployment(int32(len(roles)))
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := rnpWaitPods(ctx, t, c, len(roles))
	byRole := map[string]string{} // role → pod name
	for i, role := range roles {
		pod := pods[i]
		byRole[role.name] = pod.Name
		rnpApplyRole(ctx, t, c, &pod, role)
	}
	bare := rnpBarePod()
	if _, err := c.CoreV1().Pods(ns).Create(ctx, bare, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rnpApplyRole(ctx, t, c, bare, rnpRole{name: "bare", phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour})
	byRole["bare"] = bare.Name
	roleOf := map[string]string{}
	for role, pod := range byRole {
		roleOf[ns+"/"+pod] = role
	}

	rnpWaitPDBBlocks(ctx, t, c, ns, pdb.Name)

	// The PID sample is taken after every pod was bound: none of them counts
	// as placed after it.
	stats := pidstats.NodeStats{Capacity: 10000, Used: 9900, SampledAt: time.Now()}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": stats.Annotations()}})
	if _, err := c.CoreV1().Nodes().Patch(ctx, rnpNode, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	rnpFirstSample(ctx, t, cp, rnpNode)
	log := rnpRun(t, cp)

	// The plugin's plan, from its log (V(2) evictions, V(4) pods passed
	// over with why): every decision up to the target.
	type step struct {
		role     string
		decision string
	}
	var walk []step
	var evicted []string
	for _, m := range rnpDecisions.FindAllStringSubmatch(log, -1) {
		s := step{role: roleOf[m[2]], decision: m[1]}
		if m[3] != "" {
			s.decision = m[3]
		}
		walk = append(walk, s)
		t.Logf("%s (%s): %s", s.role, m[2], s.decision)
		if s.decision == "Evicted pod to relieve node" {
			evicted = append(evicted, s.role)
		}
	}
	// The whole plan is made before the first eviction: the pods its two
	// passes pass over come first in the log, then the evictions. The
	// kubelet's PID ranking (no annotation counts; without a per-pod list
	// every pod counts at its declaration, the default, but pending, which
	// never started and declares 0: it ranks last) plans three web pods;
	// web's own order then picks which three, passing over pending and
	// guarded (its deletion cost puts it early there).
	wantWalk := []step{
		{"pending", "frees 0 PIDs, below the floor of 100 (minPodPIDsPercent 1% of 10000)"},
		{"guarded", "PodDisruptionBudget default/guarded allows no disruption"},
		{"prio", "Evicted pod to relieve node"},
		{"notready", "Evicted pod to relieve node"},
		{"fresh", "Evicted pod to relieve node"},
	}
	if !slices.Equal(evicted, wantEvicted) {
		t.Fatalf("evicted %v, want %v\n%s", evicted, wantEvicted, rnpPluginLines(log))
	}
	if !slices.Equal(walk, wantWalk) {
		t.Errorf("walk %+v, want %+v\n%s", walk, wantWalk, rnpPluginLines(log))
	}
	if !strings.Contains(log, `"Node relieved"`) {
		t.Errorf("the node was not reported relieved\n%s", rnpPluginLines(log))
	}

	// The API server agrees: exactly the expected pods are gone.
	for _, role := range append(slices.Clone(roles), rnpRole{name: "bare"}) {
		pod, err := c.CoreV1().Pods(ns).Get(ctx, byRole[role.name], metav1.GetOptions{})
		gone := apierrors.IsNotFound(err) || err == nil && pod.DeletionTimestamp != nil
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if want := slices.Contains(wantEvicted, role.name); gone != want {
			t.Errorf("pod %s (%s): gone = %v, want %v", role.name, byRole[role.name], gone, want)
		}
	}

	// Each eviction's reason names the trigger: the evictor logs it and
	// makes it the reason of the pod's Event.
	for _, role := range wantEvicted {
		line := regexp.MustCompile(`"Evicted pod" pod="` + ns + "/" + byRole[role] + `" reason="([^"]*)"`).FindStringSubmatch(log)
		if want := "RelieveNodePressure: node " + rnpNode + " PIDs 99.0% used > threshold 95%"; line == nil || line[1] != want {
			t.Errorf("eviction of %s: reason %q, want %q", role, line, want)
		}
	}
	// The malformed annotation is reported on the pod, before any eviction.
	rnpWaitWarning(ctx, t, c, ns, byRole["malformed"], relievenodepressure.ReasonMalformedDeletePriority)

	// The ReplicaSet replaces what was evicted.
	rnpWaitReplaced(ctx, t, c, len(roles), byRole, wantEvicted)
}

func rnpDeployment(replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": "web"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: labels,
					Annotations: map[string]string{
						// The test sets phase, readiness and restarts itself.
						controlplane.KwokCustomStatusAnnotation: "custom",
						pidstats.AnnotationPodPIDs:              "400",
					},
				},
				Spec: rnpPodSpec(),
			},
		},
	}
}

// rnpDecisions matches the plugin's log lines about a pod of the plan: the
// message, the pod and, for a pod passed over, why.
var rnpDecisions = regexp.MustCompile(`"(Evicted pod to relieve node|Passing over pod)" .*?pod="([^"]+)"(?: why="([^"]*)")?`)

// rnpPodSpec binds to the PID-starved node directly (the harness runs no
// default scheduler). With no kubelet to confirm a graceful deletion of a
// pod whose status kwok leaves alone, a zero grace period makes an eviction
// delete the pod at once.
func rnpPodSpec() corev1.PodSpec {
	return corev1.PodSpec{
		NodeName: rnpNode,
		// As if headroom-scheduler had placed them: the shipped policy
		// evicts only its pods.
		SchedulerName:                 relievenodepressure.DefaultSchedulerName,
		TerminationGracePeriodSeconds: ptr.To[int64](0),
		Containers: []corev1.Container{{
			Name:  "app",
			Image: "registry.k8s.io/pause:3.10",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("10m"),
				corev1.ResourceMemory: resource.MustParse("16Mi"),
			}},
		}},
	}
}

func rnpBarePod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "bare", Namespace: metav1.NamespaceDefault,
			Annotations: map[string]string{
				controlplane.KwokCustomStatusAnnotation: "custom",
				pidstats.AnnotationPodPIDs:              "400",
				rnpDeletePriority:                       "10",
			},
		},
		Spec: rnpPodSpec(),
	}
}

// rnpWaitPods waits for the Deployment's n pods and returns them by name.
func rnpWaitPods(ctx context.Context, t *testing.T, c kubernetes.Interface, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		pods = list.Items
		return len(pods) == n, nil
	})
	if err != nil {
		t.Fatalf("the Deployment's %d pods: have %d: %v", n, len(pods), err)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods
}

// rnpApplyRole sets the pod's annotations, labels and status.
// rnpStart starts a control plane with the controller manager and kwok,
// and the two nodes of the RelieveNodePressure tests: rnpNode, and "spare"
// for the replacements. Its context ends with the test.
func rnpStart(t *testing.T) (*controlplane.ControlPlane, context.Context) {
	t.Helper()
	cp := controlplane.StartForTest(t, controlplane.Options{ControllerManager: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	for _, name := range []string{rnpNode, "spare"} {
		if _, err := cp.CreateNode(ctx, name, resources("8", "32Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}
	return cp, ctx
}

// rnpRolesEpoch is the time every role's readiness counts back from: one
// for the process, so that two pods of one readyFor are ready since the
// same second, however the seconds fall while a test applies them.
var rnpRolesEpoch = time.Now().Truncate(time.Second)

func rnpApplyRole(ctx context.Context, t *testing.T, c kubernetes.Interface, pod *corev1.Pod, role rnpRole) {
	t.Helper()
	pods := c.CoreV1().Pods(pod.Namespace)
	if len(role.annotations) > 0 || len(role.labels) > 0 {
		// A null in a merge patch deletes: name only what is set.
		meta := map[string]any{}
		if len(role.annotations) > 0 {
			meta["annotations"] = role.annotations
		}
		if len(role.labels) > 0 {
			meta["labels"] = role.labels
		}
		patch, _ := json.Marshal(map[string]any{"metadata": meta})
		if _, err := pods.Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	now := rnpRolesEpoch
	status := func(cond bool) corev1.ConditionStatus {
		if cond {
			return corev1.ConditionTrue
		}
		return corev1.ConditionFalse
	}
	readySince := metav1.NewTime(now.Add(-role.readyFor))
	if !role.ready {
		readySince = metav1.NewTime(now.Add(-time.Minute))
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		cur.Status.Phase = role.phase
		// Started long before the shipped policy's minPodAge.
		cur.Status.StartTime = &metav1.Time{Time: now.Add(-3 * time.Hour)}
		cur.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-10 * time.Minute))},
			{Type: corev1.ContainersReady, Status: status(role.ready), LastTransitionTime: readySince},
			{Type: corev1.PodReady, Status: status(role.ready), LastTransitionTime: readySince},
		}
		if role.phase == corev1.PodRunning {
			cur.Status.ContainerStatuses = []corev1.ContainerStatus{{
				Name: "app", Image: "registry.k8s.io/pause:3.10", Ready: role.ready, RestartCount: role.restarts,
				State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(now.Add(-3 * time.Hour))}},
			}}
		}
		if _, err := pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("status of %s (%s): %v", role.name, pod.Name, err)
	}
}

// rnpWaitPDBBlocks waits until the disruption controller has processed the
// budget and allows no disruption: the eviction API then refuses with 429.
func rnpWaitPDBBlocks(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string) {
	t.Helper()
	var last *policyv1.PodDisruptionBudget
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		pdb, err := c.PolicyV1().PodDisruptionBudgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = pdb
		return pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.CurrentHealthy == 1 && pdb.Status.DisruptionsAllowed == 0, nil
	})
	if err != nil {
		t.Fatalf("PodDisruptionBudget %s not in force: %+v: %v", name, last.Status, err)
	}
}

// rnpWaitWarning waits for a Warning Event with reason on the pod; Events are
// written asynchronously.
func rnpWaitWarning(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, pod, reason string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
			return e.Regarding.Name == pod && e.Type == corev1.EventTypeWarning && e.Reason == reason &&
				e.ReportingController == relievenodepressure.EventReportingController
		}), nil
	})
	if err != nil {
		t.Errorf("no Warning Event %s on pod %s: %v", reason, pod, err)
	}
}

// rnpWaitReplaced waits until the ReplicaSet runs n pods again: the kept
// ones and new ones in place of the evicted.
func rnpWaitReplaced(ctx context.Context, t *testing.T, c kubernetes.Interface, n int, byRole map[string]string, evicted []string) {
	t.Helper()
	var names []string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
		if err != nil {
			return false, err
		}
		names = names[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				names = append(names, p.Name)
			}
		}
		return len(names) == n, nil
	})
	if err != nil {
		t.Fatalf("the ReplicaSet did not replace the evicted pods: running %v: %v", names, err)
	}
	for _, role := range evicted {
		if slices.Contains(names, byRole[role]) {
			t.Errorf("evicted pod %s (%s) still runs", role, byRole[role])
		}
	}
}

// rnpPluginLines picks the plugin's and the evictor's lines out of the log.
func rnpPluginLines(log string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, relievenodepressure.PluginName) || strings.Contains(line, "evict") {
			out = append(out, line)
		}
	}
	return fmt.Sprintf("--- plugin log ---\n%s", strings.Join(out, "\n"))
}

// rnpRuns numbers the runs, so that each has a log of its own.
var rnpRuns int

// rnpRun runs the built headroom-descheduler once with the shipped policy,
// as the CronJob does, and returns its log.
func rnpRun(t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	return rnpRunPolicy(t, cp, repoFile(t, "manifests/descheduler/policy.yaml"))
}

// rnpFirstSample runs the shipped descheduler once, as the CronJob does,
// checks that it sees the node above its threshold in one sample only and
// waits (the shipped pressureSamples: 2), then gives the node its next
// sample of the same figures (rnpResample): the next run acts.
func rnpFirstSample(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, node string) {
	t.Helper()
	rnpWaits(t, rnpRun(t, cp))
	rnpResample(ctx, t, cp.Client, node)
}

// rnpWaits checks that a run's log shows it waiting for a second sample,
// and that it evicted nothing.
func rnpWaits(t *testing.T, log string) {
	t.Helper()
	if evicted := rnpEvicted(log); len(evicted) != 0 {
		t.Fatalf("the first run evicted %v: want it to wait for a second sample\n%s", evicted, rnpPluginLines(log))
	}
	if !strings.Contains(log, `"Node above threshold; waiting for the pressure to last"`) || !strings.Contains(log, `seen="1 of 2 consecutive samples"`) {
		t.Fatalf("the first run does not say it waits for a second sample:\n%s", rnpPluginLines(log))
	}
}

// rnpResample stamps node's PID sample with a new time, a second later at
// least: the node agent's next sample of the same figures.
func rnpResample(ctx context.Context, t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		pidstats.AnnotationSampledAt: time.Now().UTC().Format(time.RFC3339)}}})
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rnpRunPolicy is rnpRun with the DeschedulerPolicy policy (YAML).
func rnpRunPolicy(t *testing.T, cp *controlplane.ControlPlane, policyYAML []byte) string {
	t.Helper()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, policyYAML, 0o644); err != nil {
		t.Fatal(err)
	}
	rnpRuns++
	p, err := cp.StartProcessAs(fmt.Sprintf("headroom-descheduler-run-%d", rnpRuns), "headroom-descheduler",
		"--policy-config-file", policy,
		"--kubeconfig", shippedIdentity(t.Context(), t, cp, "headroom-descheduler"),
		"--descheduling-interval", "0",
		"--secure-port", "0",
		"--v", "4",
	)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(2 * time.Minute); err != nil {
		t.Fatalf("headroom-descheduler: %v\n%s", err, p.Log(8<<10))
	}
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// rnpEvicted returns the pods a run's log says the plugin evicted.
func rnpEvicted(log string) []string {
	var out []string
	for _, m := range rnpDecisions.FindAllStringSubmatch(log, -1) {
		if m[1] == "Evicted pod to relieve node" {
			out = append(out, m[2])
		}
	}
	return out
}

// rnpSample writes a PID sample, taken now, on node: used of 10000 PIDs,
// with the pods' measured figures as headroom.dev/pid-pods.
func rnpSample(ctx context.Context, t *testing.T, c kubernetes.Interface, node string, used int64, pods map[types.UID]int64) {
	t.Helper()
	ann := pidstats.NodeStats{Capacity: 10000, Used: used, SampledAt: time.Now()}.Annotations()
	var usage []pidstats.PodUsage
	for uid, n := range pods {
		usage = append(usage, pidstats.PodUsage{UID: uid, Value: n})
	}
	ann[pidstats.AnnotationPIDPods] = pidstats.NewPodList(usage).String()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rnpWorkload is a Deployment of n pods declaring 400 PIDs each, whose
// status the test sets. nodeName "" leaves placement to schedulerName.
func rnpWorkload(name string, n int32, nodeName, schedulerName string, annotations map[string]string) *appsv1.Deployment {
	d := rnpDeployment(n)
	d.Name = name
	labels := map[string]string{"app": name}
	d.Spec.Selector.MatchLabels = labels
	d.Spec.Template.Labels = labels
	d.Spec.Template.Spec.NodeName = nodeName
	d.Spec.Template.Spec.SchedulerName = schedulerName
	for k, v := range annotations {
		d.Spec.Template.Annotations[k] = v
	}
	return d
}

// rnpPodsOf waits until the Deployment app has n pods that are not being
// deleted and are bound, and returns them by name.
func rnpPodsOf(ctx context.Context, t *testing.T, c kubernetes.Interface, app string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=" + app})
		if err != nil {
			return false, err
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil {
				pods = append(pods, p)
			}
		}
		if len(pods) != n {
			return false, nil
		}
		for _, p := range pods {
			if p.Spec.NodeName == "" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("Deployment %s: want %d bound pods, have %d: %v", app, n, len(pods), err)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods
}

func rnpRunning(ctx context.Context, t *testing.T, c kubernetes.Interface, pods []corev1.Pod) {
	t.Helper()
	for i := range pods {
		rnpApplyRole(ctx, t, c, &pods[i], rnpRole{name: pods[i].Name, phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour})
	}
}

// TestRelieveNodePressureOnceAndOffTheNode runs the shipped policy twice on
// a node short of PIDs, before the node agent samples again:
//
//   - web (4 pods placed by headroom-scheduler, 600 PIDs each) lead the
//     kubelet's PID ranking: two go, 9800 → 8600 ≤ 9000;
//   - legacy (5 pods, default-scheduler, delete-priority 10, 300 PIDs
//     each) rank after them and are not reached: they stay (a legacy pod
//     ranked first would end the walk: TestOnlyPodsOfTheConfiguredSchedulersAreEvicted);
//   - the ReplicaSet's replacements are placed by headroom-scheduler on the
//     nodes with room, not on the relieved node, and none is lost;
//   - the second run sees the listed PIDs of the evicted pods gone and
//     evicts nothing.
func TestRelieveNodePressureOnceAndOffTheNode(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{ControllerManager: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := cp.Client
	ns := metav1.NamespaceDefault

	if _, err := cp.StartScheduler(ctx, repoFile(t, "manifests/scheduler/scheduler-config.yaml")); err != nil {
		t.Fatal(err)
	}
	room := pidstats.NodeStats{Capacity: 10000, Used: 1000, SampledAt: time.Now()}.Annotations()
	if _, err := cp.CreateNode(ctx, rnpNode, resources("8", "32Gi", "110"), room); err != nil {
		t.Fatal(err)
	}
	// headroom-scheduler places web on the only node there is.
	web := rnpWorkload("web", 4, "", relievenodepressure.DefaultSchedulerName, nil)
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	webPods := rnpPodsOf(ctx, t, c, "web", 4)
	for _, p := range webPods {
		if p.Spec.NodeName != rnpNode || p.Spec.SchedulerName != relievenodepressure.DefaultSchedulerName {
			t.Fatalf("web pod %s on %q by %q", p.Name, p.Spec.NodeName, p.Spec.SchedulerName)
		}
	}
	legacy := rnpWorkload("legacy", 5, rnpNode, "", map[string]string{rnpDeletePriority: "10"})
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, legacy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	legacyPods := rnpPodsOf(ctx, t, c, "legacy", 5)
	rnpRunning(ctx, t, c, webPods)
	rnpRunning(ctx, t, c, legacyPods)
	for _, name := range []string{"spare-1", "spare-2"} {
		if _, err := cp.CreateNode(ctx, name, resources("8", "32Gi", "110"), room); err != nil {
			t.Fatal(err)
		}
	}

	// The sample after all of them ran: 9800 used, the list complete.
	measured := map[types.UID]int64{}
	for _, p := range legacyPods {
		measured[p.UID] = 300
	}
	for _, p := range webPods {
		measured[p.UID] = 600
	}
	rnpSample(ctx, t, c, rnpNode, 9800, measured)

	rnpFirstSample(ctx, t, cp, rnpNode)
	log := rnpRun(t, cp)
	evicted := rnpEvicted(log)
	if len(evicted) != 2 || !strings.HasPrefix(evicted[0], ns+"/web-") || !strings.HasPrefix(evicted[1], ns+"/web-") {
		t.Fatalf("first run evicted %v, want two web pods\n%s", evicted, rnpPluginLines(log))
	}
	for _, p := range legacyPods {
		if cur, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); err != nil || cur.DeletionTimestamp != nil {
			t.Errorf("legacy pod %s was removed: %v", p.Name, err)
		}
	}

	// The replacements: placed by headroom-scheduler, off the relieved node.
	after := rnpPodsOf(ctx, t, c, "web", 4)
	onNode := 0
	for _, p := range after {
		if _, old := measured[p.UID]; old {
			if p.Spec.NodeName != rnpNode {
				t.Errorf("kept web pod %s moved to %s", p.Name, p.Spec.NodeName)
			}
			onNode++
			continue
		}
		if p.Spec.SchedulerName != relievenodepressure.DefaultSchedulerName || p.Spec.NodeName == rnpNode {
			t.Errorf("replacement %s placed on %s by %s, want off %s by headroom-scheduler", p.Name, p.Spec.NodeName, p.Spec.SchedulerName, rnpNode)
		}
	}
	if onNode != 2 {
		t.Errorf("%d of the original web pods remain, want 2", onNode)
	}

	// The second run, before the node agent samples again.
	log = rnpRun(t, cp)
	if evicted := rnpEvicted(log); len(evicted) != 0 {
		t.Fatalf("second run evicted %v, want none\n%s", evicted, rnpPluginLines(log))
	}
	if !regexp.MustCompile(`"Node within thresholds" .*node="` + rnpNode + `" PIDsUsed="8600/10000 \(86.0%\)"`).MatchString(log) {
		t.Errorf("second run did not see %s at 8600 PIDs\n%s", rnpNode, rnpPluginLines(log))
	}
}

// rnpUnrelievableNode makes rnpNode unrelievable: a sample of 9900 PIDs,
// 3000 of them held by a bare pod the evictor keeps ("culprit", the
// kubelet's first victim) and 100 by each of two web pods; the first web
// pod also gets webAnnotations. It returns the web pods.
func rnpUnrelievableNode(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, webAnnotations map[string]string) []corev1.Pod {
	t.Helper()
	c := cp.Client
	ns := metav1.NamespaceDefault
	web := rnpWorkload("web", 2, rnpNode, relievenodepressure.DefaultSchedulerName, nil)
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	webPods := rnpPodsOf(ctx, t, c, "web", 2)
	rnpRunning(ctx, t, c, webPods)
	if webAnnotations != nil {
		rnpApplyRole(ctx, t, c, &webPods[0], rnpRole{name: webPods[0].Name, phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour,
			annotations: webAnnotations})
	}
	culprit := rnpBarePod()
	culprit.Name = "culprit"
	if _, err := c.CoreV1().Pods(ns).Create(ctx, culprit, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rnpApplyRole(ctx, t, c, culprit, rnpRole{name: "culprit", phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour})
	cur, err := c.CoreV1().Pods(ns).Get(ctx, culprit.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rnpSample(ctx, t, c, rnpNode, 9900, map[types.UID]int64{cur.UID: 3000, webPods[0].UID: 100, webPods[1].UID: 100})
	return webPods
}

// TestRelieveNodePressureLeavesAnUnrelievableNode: the PIDs are held by a
// bare pod the evictor keeps (3000), the kubelet's first victim, so the
// two web pods (100 each) ranked after it are not the cause (nor could they
// bring 9900 to 95 %). Three runs evict nothing, and each leaves a Warning
// Event on the Node, written before the one-shot process exited, naming
// the culprit and why it stays.
func TestRelieveNodePressureLeavesAnUnrelievableNode(t *testing.T) {
	cp, ctx := rnpStart(t)
	c := cp.Client
	ns := metav1.NamespaceDefault
	webPods := rnpUnrelievableNode(ctx, t, cp, nil)

	// Seen in two samples, the pressure stays seen in the runs after, on
	// the same sample: each of them finds the node unrelievable.
	rnpFirstSample(ctx, t, cp, rnpNode)
	for run := 1; run <= 3; run++ {
		log := rnpRun(t, cp)
		if evicted := rnpEvicted(log); len(evicted) != 0 {
			t.Fatalf("run %d evicted %v, want none\n%s", run, evicted, rnpPluginLines(log))
		}
		// Read right after the process exited: the Event must be written.
		notes := rnpUnrelievableNotes(ctx, t, c, ns, rnpNode)
		if len(notes) != run {
			t.Fatalf("after run %d: %d %s Events on Node %s, want %d", run, len(notes), relievenodepressure.ReasonNodePressureUnrelievable, rnpNode, run)
		}
		for _, want := range []string{"the pod the kubelet would evict next, " + ns + "/culprit, cannot be evicted (the evictor's filter keeps it",
			ns + "/culprit (3000 PIDs): the evictor's filter keeps it",
			ns + "/" + webPods[0].Name + " (100 PIDs): ranked after " + ns + "/culprit, which cannot be evicted: not the pressure's cause"} {
			if !strings.Contains(notes[0], want) {
				t.Errorf("Event note %q does not contain %q", notes[0], want)
			}
		}
	}
	for _, p := range append(webPods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "culprit"}}) {
		if got, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
			t.Errorf("pod %s was removed: %v", p.Name, err)
		}
	}
}

// TestRelieveNodePressureDeploymentMode runs headroom-descheduler with the
// container args of the shipped Deployment (manifests/descheduler-deployment):
// it takes its own Lease, runs the shipped policy at once and serves the
// plugin's counter on its metrics port.
func TestRelieveNodePressureDeploymentMode(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cp.Client
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "headroom-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Above the threshold with nothing to evict: unrelievable.
	full := pidstats.NodeStats{Capacity: 10000, Used: 9900, SampledAt: time.Now()}.Annotations()
	if _, err := cp.CreateNode(ctx, rnpNode, resources("8", "32Gi", "110"), full); err != nil {
		t.Fatal(err)
	}
	// The descheduler does nothing in a cluster of one node.
	if _, err := cp.CreateNode(ctx, "spare", resources("8", "32Gi", "110"), nil); err != nil {
		t.Fatal(err)
	}

	// The overlay applies to a real API server, and holds the Deployment in
	// place of the CronJob.
	kubectl := filepath.Join(cp.BinDir, "kubectl")
	out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.KubeconfigPath, "apply", "--dry-run=server", "-k",
		repoPath(t, "manifests/descheduler-deployment")).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl apply -k manifests/descheduler-deployment: %v\n%s", err, out)
	}
	for _, want := range []string{"deployment.apps/headroom-descheduler", "role.rbac.authorization.k8s.io/headroom-descheduler-leader-election",
		"service/headroom-descheduler-metrics", "configmap/headroom-descheduler-policy-"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the overlay lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "cronjob") {
		t.Errorf("the overlay keeps the CronJob:\n%s", out)
	}

	// A run before saw the pressure in the sample before this one: the
	// Deployment's first cycle (every 5m) acts on it.
	rnpFirstSample(ctx, t, cp, rnpNode)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := shippedDeschedulerArgs(t, port)
	args = append(args, "--kubeconfig", cp.KubeconfigPath)
	p, err := cp.StartProcessAs("headroom-descheduler-deployment", "headroom-descheduler", args...)
	if err != nil {
		t.Fatal(err)
	}

	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	want := `headroom_relieve_node_pressure_nodes_total{result="unrelievable"} 1`
	var last string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/metrics", port))
		if err != nil {
			last = err.Error()
			return false, nil
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		last = string(body)
		return strings.Contains(last, want), nil
	})
	if err != nil {
		t.Fatalf("/metrics never showed %q: %v\n%.2000s\n%s", want, err, last, p.Log(4<<10))
	}
	lease, err := c.CoordinationV1().Leases("headroom-system").Get(ctx, "headroom-descheduler", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Fatalf("Lease headroom-system/headroom-descheduler: %v %+v", err, lease)
	}
	// Serving HTTPS, it wrote no certificate under its working directory
	// (--cert-dir defaults to apiserver.local.config/certificates): the
	// self-signed certificate stays in memory, so the Deployment's
	// read-only root filesystem needs no writable volume for it.
	if _, err := os.Stat(filepath.Join(cp.Dir, "apiserver.local.config")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("headroom-descheduler wrote %s (stat: %v): the Deployment needs a writable certificate directory", filepath.Join(cp.Dir, "apiserver.local.config"), err)
	}
}
