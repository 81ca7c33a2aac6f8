package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
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
// headroom-descheduler once, as its CronJob does, with the shipped sample
// policy, against a Deployment's pods on a kwok node short of PIDs: 9900 of
// 10000 used (99 % > the sample's threshold of 95 %), each pod declaring 400.
// Reaching the target of 90 % takes three evictions. The pods, in the order
// the ReplicaSet controller would delete them, with delete priority first:
//
//	bare       no owner, delete-priority 10  the evictor's filter keeps it
//	prio       delete-priority 5             evicted 1st (9500)
//	pending    Pending, declares 0 PIDs      skipped: frees nothing
//	notready   Running, not Ready            evicted 2nd (9100)
//	guarded    Ready, deletion cost -100     its PodDisruptionBudget refuses
//	fresh      Ready for 2 minutes           evicted 3rd (8700 ≤ 9000: done)
//	restarts   Ready for 2h, 7 restarts      kept
//	malformed  Ready for 2h, priority "urgent" (counts as 0)  kept, Warning Event
func TestRelieveNodePressureEvictsInDeleteOrder(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{ControllerManager: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := cp.Client
	ns := metav1.NamespaceDefault

	// The spare node leaves room elsewhere, so the evictor's nodeFit passes.
	for _, name := range []string{rnpNode, "spare"} {
		if _, err := cp.CreateNode(ctx, name, resources("8", "32Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}

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

	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, repoFile(t, "manifests/descheduler/policy.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := cp.StartProcess("headroom-descheduler",
		"--policy-config-file", policy,
		"--kubeconfig", shippedIdentity(ctx, t, cp, "headroom-descheduler"),
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
	logData, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	log := string(logData)

	// The plugin's walk down the node's delete order, from its log (V(2)
	// evictions and failures, V(4) skips): every decision up to the target.
	type step struct {
		role     string
		decision string
		position string
	}
	var walk []step
	var evicted []string
	decisions := regexp.MustCompile(`"(Evicted pod to relieve node|Skipping pod[^"]*|Eviction failed; trying the next pod)" .* pod="([^"]+)" position=(\d+) of=`)
	for _, m := range decisions.FindAllStringSubmatch(log, -1) {
		s := step{role: roleOf[m[2]], decision: m[1], position: m[3]}
		walk = append(walk, s)
		t.Logf("position %s: %s (%s): %s", s.position, s.role, m[2], s.decision)
		if strings.HasPrefix(s.decision, "Evicted") {
			evicted = append(evicted, s.role)
		}
	}
	wantWalk := []step{
		{"bare", "Skipping pod: the evictor's filter, the namespaces or the label selector exclude it", "1"},
		{"prio", "Evicted pod to relieve node", "2"},
		{"pending", "Skipping pod: evicting it would not move the node toward its target", "3"},
		{"notready", "Evicted pod to relieve node", "4"},
		{"guarded", "Eviction failed; trying the next pod", "5"},
		{"fresh", "Evicted pod to relieve node", "6"},
	}
	if !slices.Equal(evicted, wantEvicted) {
		t.Fatalf("evicted %v, want %v\n%s", evicted, wantEvicted, rnpPluginLines(log))
	}
	if !slices.Equal(walk, wantWalk) {
		t.Errorf("walk %+v, want %+v\n%s", walk, wantWalk, rnpPluginLines(log))
	}
	if !regexp.MustCompile(`"Eviction failed; trying the next pod" .* pod="` + ns + "/" + byRole["guarded"] + `"`).MatchString(log) {
		t.Errorf("no refused eviction logged for the guarded pod\n%s", rnpPluginLines(log))
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

// rnpPodSpec binds to the PID-starved node directly (the harness runs no
// default scheduler). With no kubelet to confirm a graceful deletion of a
// pod whose status kwok leaves alone, a zero grace period makes an eviction
// delete the pod at once.
func rnpPodSpec() corev1.PodSpec {
	return corev1.PodSpec{
		NodeName:                      rnpNode,
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
	now := time.Now()
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
