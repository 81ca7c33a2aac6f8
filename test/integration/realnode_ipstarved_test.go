package integration

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/test/controlplane"
	"github.com/headroom-k8s/headroom/test/realnode"
)

// TestRealNodeIPStarved fills the real node's host-local
// range (13 pod IPs), then binds a Deployment's two headroom-scheduler pods
// to it directly, as a scheduler with a stale figure would: the runtime
// has no address for them and the kubelet reports FailedCreatePodSandBox
// with host-local's "no IP addresses available in range set". One run of
// headroom-descheduler with the shipped policy (ipStarved on; its grace
// at its 10 s minimum and DefaultEvictor's minPodAge at 0, the pods being
// seconds old) evicts them, and headroom-scheduler, whose NodeIPs sees the
// real node full, places their replacements on a second real node, where
// they get addresses of its own range and run. Two pods of another Deployment on the same node got the range's
// last addresses and wait for their image from a registry that accepts
// connections and never answers (each pull hangs until the runtime gives
// up, then the kubelet backs off and pulls again): their sandboxes exist,
// so they are not starved of a pod IP, and the run leaves them alone.
func TestRealNodeIPStarved(t *testing.T) {
	cp, nodes := realnode.StartNodesForTest(t, controlplane.Options{}, realnode.Options{}, realnode.Options{Name: "real-node-2"})
	node, other := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := cp.Client
	ns := metav1.NamespaceDefault
	if _, err := realnode.DeployShippedNodeAgentOnNodes(ctx, nodes); err != nil {
		t.Fatal(err)
	}

	// A registry that accepts connections and never answers: a pull from
	// it hangs, as a slow one does, until the runtime gives up.
	slowRegistry, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer slowRegistry.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := slowRegistry.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()

	var fill []*corev1.Pod
	for i := range 11 {
		p, err := c.CoreV1().Pods(ns).Create(ctx, pausePod(fmt.Sprintf("fill-%02d", i), node.Name, corev1.DefaultSchedulerName), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fill = append(fill, p)
	}
	waitPodsRunning(ctx, t, cp, fill...)
	pullingLabels := map[string]string{"app": "pulling"}
	pulling := pausePod("", "", "headroom-scheduler")
	pulling.Spec.NodeSelector = nil
	pulling.Spec.NodeName = node.Name
	pulling.Spec.Containers[0].Image = slowRegistry.Addr().String() + "/headroom/slow:1"
	pulling.Spec.Containers[0].ImagePullPolicy = corev1.PullAlways
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "pulling", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: pullingLabels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: pullingLabels}, Spec: pulling.Spec},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Both have their sandbox (the range's last two addresses) and wait
	// for their image.
	var waiting []corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=pulling"})
		if err != nil {
			return false, err
		}
		waiting = waiting[:0]
		for _, p := range list.Items {
			if p.Status.PodIP != "" && p.Status.Phase == corev1.PodPending && podCondition(&p, corev1.PodReadyToStartContainers) {
				waiting = append(waiting, p)
			}
		}
		return len(waiting) == 2, nil
	})
	if err != nil {
		list, _ := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		t.Fatalf("the pulling pods never had their sandbox while waiting for their image: %v%s", err, realnode.PodSummaries(list.Items))
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := c.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s, err := ipstats.ParseNode(n.Annotations, time.Now(), 0)
		return err == nil && s.Capacity == 13 && s.Used == 13, nil
	})
	if err != nil {
		t.Fatalf("the agent never published 13 of 13 pod IPs used: %v", err)
	}

	// headroom-scheduler is not running yet: the test binds the pods, as a
	// scheduler that had not seen the node fill up would.
	labels := map[string]string{"app": "starved"}
	tmpl := pausePod("", "", "headroom-scheduler")
	tmpl.Spec.NodeSelector = nil
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "starved", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](2),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec},
		},
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var starved []corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=starved"})
		starved = list.Items
		return err == nil && len(starved) == 2, err
	})
	if err != nil {
		t.Fatalf("the Deployment's pods: %v", err)
	}
	for _, p := range starved {
		binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns},
			Target: corev1.ObjectReference{Kind: "Node", Name: node.Name}}
		if err := c.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range starved {
		msg := waitEvent(ctx, t, c, p.Name, "FailedCreatePodSandBox", "no IP addresses available in range set").Message
		t.Logf("%s bound to %s and stuck: %s", p.Name, node.Name, msg)
	}
	if _, err := cp.StartScheduler(ctx, repoFile(t, "manifests/scheduler/scheduler-config.yaml")); err != nil {
		t.Fatal(err)
	}
	// Past the grace (10 s) since the first failure.
	time.Sleep(12 * time.Second)

	start := time.Now()
	log := rnpRunPolicy(t, cp, ipStarvedPolicy(t))
	evicted := rnpEvicted(log)
	t.Logf("one run evicted %v in %s", evicted, time.Since(start).Round(time.Millisecond))
	if len(evicted) == 0 {
		t.Fatalf("nothing evicted\n%s", rnpPluginLines(log))
	}
	for _, e := range evicted {
		if !slices.ContainsFunc(starved, func(p corev1.Pod) bool { return ns+"/"+p.Name == e }) {
			t.Errorf("evicted %s, not one of the starved pods", e)
		}
	}
	// The pods waiting for their image are where they were.
	for _, p := range waiting {
		got, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil || got.UID != p.UID || got.DeletionTimestamp != nil {
			t.Errorf("%s, waiting for its image, was disturbed: %v", p.Name, err)
		} else {
			t.Logf("%s left alone: %s, waiting for its image (%s)", p.Name, got.Status.Phase, containerWaiting(got))
		}
	}
	if !strings.Contains(log, "has no free pod IP (") {
		t.Errorf("no eviction reason names the pod IPs\n%s", rnpPluginLines(log))
	}
	// The replacements go to the other real node and run there, with
	// addresses of its range.
	_, otherRange, err := net.ParseCIDR(other.PodSubnet)
	if err != nil {
		t.Fatal(err)
	}
	var moved []string
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=starved"})
		if err != nil {
			return false, err
		}
		moved = moved[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp == nil && p.Spec.NodeName == other.Name && p.Status.Phase == corev1.PodRunning && otherRange.Contains(net.ParseIP(p.Status.PodIP)) {
				moved = append(moved, p.Name+" "+p.Status.PodIP)
			}
		}
		return len(moved) == len(evicted), nil
	})
	if err != nil {
		list, _ := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		t.Fatalf("the replacements do not run on %s: %v%s", other.Name, err, realnode.PodSummaries(list.Items))
	}
	t.Logf("replacements running on %s: %v", other.Name, moved)
}

// ipStarvedPolicy is the shipped policy with the ipStarved grace at its
// minimum, 10 s, and DefaultEvictor's minPodAge at 0: the test's pods are
// seconds old.
func ipStarvedPolicy(t *testing.T) []byte {
	t.Helper()
	var policy map[string]any
	if err := yaml.Unmarshal(shippedPolicyForNewPods(t), &policy); err != nil {
		t.Fatal(err)
	}
	for _, pc := range policy["profiles"].([]any)[0].(map[string]any)["pluginConfig"].([]any) {
		if pc := pc.(map[string]any); pc["name"] == "RelieveNodePressure" {
			pc["args"].(map[string]any)["ipStarved"].(map[string]any)["grace"] = "10s"
		}
	}
	data, err := yaml.Marshal(policy)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// podCondition reports whether the pod's condition of type ct is True.
func podCondition(p *corev1.Pod, ct corev1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == ct {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// containerWaiting is the reason its first container waits, if it does.
func containerWaiting(p *corev1.Pod) string {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting != nil {
			return s.State.Waiting.Reason
		}
	}
	return "not waiting"
}
