//go:build e2ebench

package e2ebench

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/test/controlplane"
	"github.com/headroom-k8s/headroom/test/realnode"
)

// The pod-IP part runs on two fresh real nodes of its own, with nothing
// else on them: what keeps a pod Pending or without an address is the
// first node's 13 pod IPs, nothing another part left behind. The kubelet
// has no pod-IP signal, so a kubelet tuned to Headroom's line (A′) is the
// default kubelet here: the part runs A and B.

// lateStarved is how many of the "late" Deployment's pods, bound to the
// full node by the bench as a scheduler that had not seen it fill up
// would, find no address there: the Deployment has as many more pods as
// the node's range has addresses left when they are bound.
const lateStarved = 2

// rangeIPs are the addresses of a real node's /28 (realnode's default
// range) that host-local hands out: less network, broadcast and gateway.
const rangeIPs = 13

// ipResult is what one pod-IP run measured.
type ipResult struct {
	// fill: pods bound to the full node without an address, pods kept
	// Pending for want of a pod IP, and for another reason (by reason).
	stuckNoIP, pendingNoIP int
	pendingOther           map[string]int
	// late: at the end of the watch, pods still without an address on the
	// full node, and pods running on the other real node with an address of
	// its range; evictions of late pods and when the first replacement ran
	// (from the late pods' binding; -1: none).
	lateStuck, lateMoved int
	lateEvicted          int
	firstMovedRunning    time.Duration
	// lateReplicas is the late Deployment's size: the addresses the full
	// node had left, plus lateStarved.
	lateReplicas int
	// kubelet is the first node's kubelet version.
	kubelet string
}

// runPodIPs fills the first node's range with pods pinned to it by a
// nodeSelector, three more than it has, and sees where each is after
// 30 s. Then, with the stack's scheduler stopped, it binds a Deployment's
// pods (no nodeSelector; as many as the range has addresses left, plus
// lateStarved) to the full node, as a scheduler with a stale figure would,
// starts the scheduler again, and watches for ipStarved's grace and two
// more minutes: in A lateStarved pods stay without an address; B's
// descheduler (the shipped policy: ipStarved after 2 min) evicts them and
// headroom-scheduler places the replacements on the other real node.
func runPodIPs(t *testing.T, m mode) ipResult {
	// Pod IPs alone decide here: with the PID parts' budget of 2,000, the
	// fill pods a PID sample has not seen yet (100 PIDs each to NodePIDs)
	// would keep some Pending for want of PIDs.
	reserved, err := realnode.ReservedForBudget(realnode.AmplePIDBudget)
	if err != nil {
		t.Fatal(err)
	}
	cp, nodes := realnode.StartNodesForTest(t, controlplane.Options{}, realnode.Options{ReservedPIDs: reserved}, realnode.Options{Name: otherNode, ReservedPIDs: reserved})
	full, other := nodes[0], nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	c := cp.Client
	ns := metav1.NamespaceDefault
	if m.headroom {
		if _, err := realnode.DeployShippedNodeAgentOnNodes(ctx, nodes); err != nil {
			t.Fatal(err)
		}
		startScheduler(ctx, t, cp)
		startDescheduler(ctx, t, cp, shippedDeschedulingInterval(t), nil)
	}
	sched := schedulerProcess(t, cp, m.scheduler)

	fill(ctx, t, cp, m.scheduler, full.Name)
	time.Sleep(30 * time.Second)
	var r ipResult
	pods, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=fill"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		switch {
		case p.Spec.NodeName == full.Name && p.Status.PodIP == "":
			r.stuckNoIP++
		case p.Spec.NodeName == "":
			why := pendingReason(&p)
			if strings.Contains(why, nodeips.ErrReasonNoFreeIPs) {
				r.pendingNoIP++
				continue
			}
			if r.pendingOther == nil {
				r.pendingOther = map[string]int{}
			}
			r.pendingOther[why]++
		}
	}

	// The late pods: bound to the full node while their scheduler is away.
	sched.Stop(10 * time.Second)
	alloc, err := full.HostLocalAllocations()
	if err != nil {
		t.Fatal(err)
	}
	r.lateReplicas = rangeIPs - len(alloc) + lateStarved
	labels := map[string]string{"app": "late"}
	late := fillDeployment("late", m.scheduler, int32(r.lateReplicas), labels, nil)
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var created []corev1.Pod
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=late"})
		created = list.Items
		return err == nil && len(created) == r.lateReplicas, err
	})
	if err != nil {
		t.Fatalf("the late Deployment's pods: %v", err)
	}
	for _, p := range created {
		binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: ns},
			Target: corev1.ObjectReference{Kind: "Node", Name: full.Name}}
		if err := c.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bound := time.Now()
	if _, err := cp.Restart(sched); err != nil {
		t.Fatal(err)
	}
	original := map[string]bool{}
	for _, p := range created {
		original[p.Name] = true
	}
	_, otherRange, err := net.ParseCIDR(other.PodSubnet)
	if err != nil {
		t.Fatal(err)
	}
	r.firstMovedRunning = -1
	watch := 2*time.Minute + 2*time.Minute
	deadline := time.Now().Add(watch)
	for time.Now().Before(deadline) {
		list, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=late"})
		if err != nil {
			t.Fatal(err)
		}
		r.lateStuck, r.lateMoved, r.lateEvicted = 0, 0, 0
		for _, p := range list.Items {
			switch {
			case original[p.Name] && p.DeletionTimestamp != nil:
				r.lateEvicted++
			case p.Spec.NodeName == full.Name && p.Status.PodIP == "":
				r.lateStuck++
			case p.Spec.NodeName == other.Name && p.Status.Phase == corev1.PodRunning && otherRange.Contains(net.ParseIP(p.Status.PodIP)):
				r.lateMoved++
			}
		}
		r.lateEvicted += r.lateReplicas - countOriginal(list.Items, original)
		if r.lateMoved > 0 && r.firstMovedRunning < 0 {
			r.firstMovedRunning = time.Since(bound)
		}
		if r.lateMoved == lateStarved {
			break
		}
		time.Sleep(2 * time.Second)
	}
	r.kubelet = kubeletVersion(ctx, t, cp, full.Name)
	t.Logf("pod IPs, %s: %+v%s", m.name, r, realnode.PodSummaries(podsOf(ctx, t, cp)))
	return r
}

// schedulerProcess is the control plane's process of the scheduler named.
func schedulerProcess(t *testing.T, cp *controlplane.ControlPlane, scheduler string) *controlplane.Process {
	t.Helper()
	name := "kube-scheduler"
	if scheduler != corev1.DefaultSchedulerName {
		name = scheduler
	}
	var found *controlplane.Process
	for _, p := range cp.Processes() {
		if p.Name == name {
			found = p
		}
	}
	if found == nil {
		t.Fatalf("no %s process in the control plane", name)
	}
	return found
}

// countOriginal counts the pods of list that are among original.
func countOriginal(list []corev1.Pod, original map[string]bool) int {
	n := 0
	for _, p := range list {
		if original[p.Name] {
			n++
		}
	}
	return n
}

func podsOf(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane) []corev1.Pod {
	t.Helper()
	list, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// fillDeployment is a Deployment of replicas pause pods placed by
// scheduler, on the nodes nodeSelector allows.
func fillDeployment(name, scheduler string, replicas int32, labels, nodeSelector map[string]string) *appsv1.Deployment {
	grace := int64(1)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					SchedulerName:                 scheduler,
					NodeSelector:                  nodeSelector,
					TerminationGracePeriodSeconds: &grace,
					Containers:                    []corev1.Container{{Name: "pause", Image: realnode.PauseImage, ImagePullPolicy: corev1.PullNever}},
				},
			},
		},
	}
}

// renderPodIPs is the pod-IP part's table.
func renderPodIPs(rs []stackRun[ipResult]) string {
	var b strings.Builder
	fmt.Fprintf(&b, `
## %s

Two real nodes of their own, nothing else on them: 13 pod IPs each
(host-local, 10.244.0.0/28 and 10.244.1.0/28) and a budget of %d PIDs
for pods each, far above what they hold, so that pod IPs alone decide
(NodePIDs counts 100 PIDs for a pod its node's last sample has not seen).
%d pause pods pinned to
the first by a nodeSelector, three more than its pod IPs, seen 30 s
later. Then, with the stack's scheduler stopped, a "late" Deployment's
pods (no nodeSelector; as many as the first node has addresses left, plus
%d) are bound to it, as a scheduler that had not seen it fill up would,
and the scheduler is started again; watched for 4 min (the shipped
ipStarved grace is 2 min). The kubelet has no pod-IP signal: A′ (the
kubelet tuned to Headroom's lines) is A here.

`, podIPsTitle, realnode.AmplePIDBudget, fillPods, lateStarved)
	rows := []row[ipResult]{
		countRow("pinned pods stuck without an IP (ContainerCreating)", func(r ipResult) int { return r.stuckNoIP }),
		countRow("pinned pods kept Pending for want of a pod IP", func(r ipResult) int { return r.pendingNoIP }),
		{name: "pinned pods kept Pending for another reason", text: func(r ipResult) string {
			return orNone(tally(r.pendingOther, "; ", func(k string, v int) string { return fmt.Sprintf("%d: %q", v, k) }))
		}, num: func(r ipResult) (float64, bool) {
			n := 0
			for _, v := range r.pendingOther {
				n += v
			}
			return float64(n), true
		}},
		countRow("late pods (the first node's free addresses + 2)", func(r ipResult) int { return r.lateReplicas }),
		countRow("late pods still without an IP on the full node at the end", func(r ipResult) int { return r.lateStuck }),
		countRow("late pods evicted", func(r ipResult) int { return r.lateEvicted }),
		countRow("late pods' replacements running on the other real node", func(r ipResult) int { return r.lateMoved }),
		{name: "binding to the first replacement running there (s)", text: func(r ipResult) string {
			if r.firstMovedRunning < 0 {
				return "never"
			}
			return fmt.Sprintf("%.0f", r.firstMovedRunning.Seconds())
		}, num: func(r ipResult) (float64, bool) { return r.firstMovedRunning.Seconds(), r.firstMovedRunning >= 0 }},
	}
	writeRuns(&b, rs, rows)
	return b.String()
}
