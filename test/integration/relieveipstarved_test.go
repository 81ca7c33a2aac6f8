package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/pkg/ipstarved"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

const (
	starvedNode = "ip-full"
	starvedPeer = "ip-peer"
)

// TestRelieveNodePressureEvictsPodsStarvedOfAPodIP runs the built
// headroom-descheduler once, as its CronJob does, with the shipped policy
// (its grace shortened to the shortest allowed, 10 s) and the shipped
// identities, admission policies included, against a Deployment's two pods
// on a kwok node whose pod IPs are all allocated (13 of 13): one waits for
// its sandbox, which the kubelet has failed to make for want of a pod IP
// (its FailedCreatePodSandBox Event written as the kubelet writes it, by
// the node's identity; its firstTimestamp claims 5 minutes, but the grace
// counts from the API server's creationTimestamp); the other has its
// sandbox and pulls its image. While the only other node has
// no free pod IP either, nothing is evicted; once it has, the starved pod
// is evicted (its replacement is for headroom-scheduler to place) and the
// pod pulling its image stays.
func TestRelieveNodePressureEvictsPodsStarvedOfAPodIP(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{ControllerManager: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := cp.Client
	ns := metav1.NamespaceDefault

	for _, name := range []string{starvedNode, starvedPeer} {
		if _, err := cp.CreateNode(ctx, name, resources("8", "32Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}
	deploy := starvedDeployment()
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=starved"})
		if err != nil {
			return false, err
		}
		pods = list.Items
		return len(pods) == 2, nil
	})
	if err != nil {
		t.Fatalf("the Deployment's pods: %v", err)
	}
	slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	starved, pulling := &pods[0], &pods[1]
	starvedSetStatus(ctx, t, c, starved, false)
	starvedSetStatus(ctx, t, c, pulling, true)
	now := time.Now()
	// As the kubelet's recorder writes it (core/v1, legacy timestamps, its
	// node as the source host and reporting instance), with the node's
	// identity: the shipped admission policy refuses anyone else.
	event := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", starved.Name, now.UnixNano()), Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: starved.Name, UID: starved.UID,
			APIVersion: "v1", ResourceVersion: starved.ResourceVersion},
		Reason: ipstarved.ReasonFailedCreatePodSandBox,
		Message: `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "5d41402abc4b2a76b9719d911017c592": ` +
			`plugin type="bridge" failed (add): failed to allocate for range 0: no IP addresses available in range set: 10.88.0.1-10.88.0.14`,
		Source:         corev1.EventSource{Component: "kubelet", Host: starvedNode},
		FirstTimestamp: metav1.NewTime(now.Add(-5 * time.Minute)), LastTimestamp: metav1.NewTime(now.Add(-20 * time.Second)),
		Count: 14, Type: corev1.EventTypeWarning,
		ReportingController: "kubelet", ReportingInstance: starvedNode,
	}
	if err := cp.ApplyShippedIdentities(ctx); err != nil {
		t.Fatal(err)
	}
	created, err := nodeIdentity(ctx, t, cp, starvedNode).CoreV1().Events(ns).Create(ctx, event, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	policy := bytes.Replace(repoFile(t, "manifests/descheduler/policy.yaml"), []byte("grace: 2m"), []byte("grace: 10s"), 1)
	if bytes.Equal(policy, repoFile(t, "manifests/descheduler/policy.yaml")) {
		t.Fatal("the shipped policy has no ipStarved grace: 2m to shorten")
	}
	// Past the grace by the API server's stamp.
	time.Sleep(time.Until(created.CreationTimestamp.Add(11 * time.Second)))

	// Both nodes have all 13 pod IPs allocated.
	starvedSample(ctx, t, c, starvedNode, 13)
	starvedSample(ctx, t, c, starvedPeer, 13)
	// What a run costs the API server in core Event requests: the
	// plugin's cache, one List and one Watch filtered by reason (or one
	// Watch alone, where client-go streams the initial list), whatever the
	// number of waiting pods (it was one List per waiting pod).
	eventRequests := func() (lists, watches float64) {
		return apiServerMetric(ctx, t, cp, "apiserver_request_total", `group=""`, `resource="events"`, `verb="LIST"`),
			apiServerMetric(ctx, t, cp, "apiserver_request_total", `group=""`, `resource="events"`, `verb="WATCH"`)
	}
	lists, watches := eventRequests()
	log := rnpRunPolicy(t, cp, policy)
	if l, w := eventRequests(); l-lists > 1 || w-watches > 1 || l-lists+w-watches < 1 {
		t.Errorf("one run made %v Lists and %v Watches of core Events, want at most one of each", l-lists, w-watches)
	} else {
		t.Logf("one run: %v List, %v Watch of core Events", l-lists, w-watches)
	}
	if evicted := rnpEvicted(log); len(evicted) != 0 {
		t.Fatalf("evicted %v with no free pod IP elsewhere\n%s", evicted, rnpPluginLines(log))
	}
	if !strings.Contains(log, "no other node has a free pod IP for its replacement") {
		t.Errorf("the run does not say why the starved pod stays\n%s", rnpPluginLines(log))
	}
	for _, p := range []*corev1.Pod{starved, pulling} {
		if gone := starvedGone(ctx, t, c, p); gone {
			t.Errorf("pod %s evicted with no free pod IP elsewhere", p.Name)
		}
	}

	// The peer frees pod IPs: the starved pod goes, the one pulling stays.
	starvedSample(ctx, t, c, starvedPeer, 5)
	log = rnpRunPolicy(t, cp, policy)
	if evicted, want := rnpEvicted(log), []string{ns + "/" + starved.Name}; !slices.Equal(evicted, want) {
		t.Fatalf("evicted %v, want %v\n%s", evicted, want, rnpPluginLines(log))
	}
	if !starvedGone(ctx, t, c, starved) {
		t.Errorf("the starved pod %s was not evicted", starved.Name)
	}
	if starvedGone(ctx, t, c, pulling) {
		t.Errorf("the pod pulling its image, %s, was evicted", pulling.Name)
	}
	// The plugin's Event on the pod, reported by headroom-descheduler,
	// says why.
	want := "RelieveNodePressure: node " + starvedNode + " has no free pod IP"
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		return slices.ContainsFunc(list.Items, func(e eventsv1.Event) bool {
			return e.Regarding.UID == starved.UID && e.Reason == relievenodepressure.ReasonStarvedOfPodIP &&
				e.ReportingController == relievenodepressure.EventReportingController && strings.HasPrefix(e.Note, want)
		}), nil
	})
	if err != nil {
		t.Errorf("no %s Event on %s with a note starting %q: %v", relievenodepressure.ReasonStarvedOfPodIP, starved.Name, want, err)
	}
}

func starvedDeployment() *appsv1.Deployment {
	labels := map[string]string{"app": "starved"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "starved", Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			// Two, for the shipped DefaultEvictor's minReplicas.
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels,
					// The test sets the status the kubelet would.
					Annotations: map[string]string{controlplane.KwokCustomStatusAnnotation: "custom"}},
				Spec: corev1.PodSpec{
					// Bound as another scheduler, or a stale figure, would.
					NodeName:                      starvedNode,
					SchedulerName:                 relievenodepressure.DefaultSchedulerName,
					TerminationGracePeriodSeconds: ptr.To[int64](0),
					Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}},
				},
			},
		},
	}
}

// starvedSetStatus gives the pod the status the kubelet reports for a pod
// whose sandbox it cannot make (sandbox false) or one pulling its image
// (sandbox true): Pending, started 3 hours ago (past the shipped
// minPodAge), PodReadyToStartContainers False or True.
func starvedSetStatus(ctx context.Context, t *testing.T, c kubernetes.Interface, pod *corev1.Pod, sandbox bool) {
	t.Helper()
	pods := c.CoreV1().Pods(pod.Namespace)
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		started := metav1.NewTime(time.Now().Add(-3 * time.Hour))
		ready, waiting := corev1.ConditionFalse, "ContainerCreating"
		if sandbox {
			ready, waiting = corev1.ConditionTrue, "ErrImagePull"
		}
		cur.Status.Phase = corev1.PodPending
		cur.Status.StartTime = &started
		cur.Status.Conditions = []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.PodReadyToStartContainers, Status: ready, LastTransitionTime: started},
			{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: started},
			{Type: corev1.ContainersReady, Status: corev1.ConditionFalse, LastTransitionTime: started},
			{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: started},
		}
		cur.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "registry.k8s.io/pause:3.10",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: waiting}}}}
		if _, err := pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
			return false, nil
		} else if err != nil {
			return false, err
		}
		*pod = *cur
		return true, nil
	})
	if err != nil {
		t.Fatalf("status of %s: %v", pod.Name, err)
	}
}

// starvedSample writes node's pod-IP sample as the node agent would: used
// of 13 pod IPs allocated, now.
func starvedSample(ctx context.Context, t *testing.T, c kubernetes.Interface, node string, used int64) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
		"annotations": ipstats.NewNodeStats(13, used, time.Now()).Annotations()}})
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// starvedGone reports whether pod is deleted or terminating.
func starvedGone(ctx context.Context, t *testing.T, c kubernetes.Interface, pod *corev1.Pod) bool {
	t.Helper()
	cur, err := c.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true
	}
	if err != nil {
		t.Fatal(err)
	}
	return cur.DeletionTimestamp != nil || cur.UID != pod.UID
}
