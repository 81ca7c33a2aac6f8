package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/test/cniruntime"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// TestNodeIPsWithRealIPAM exhausts a /28 with the real host-local plugin for
// node A and leaves 10 of another /28's 13 addresses free for node B. The
// real headroom-node-agent (--once, with its pod-bound token and the shipped
// manifests) reports both; headroom-scheduler with the shipped profile keeps
// new pods off A, although every pod prefers A by node affinity, and places
// them on B until B's pool is used up too by the estimate (its reported use
// plus the pods placed since). The next pod fits nowhere and gets a
// FailedScheduling event naming the pod-IP reason; after DELs on A's network
// the agent reports the drop, and the pending pod goes to A. Once both are
// full again, deleting a pod placed on B after B's sample frees its address
// in the estimate, and the next pending pod goes to B. Both moves come from
// NodeIPs' queueing hints (node annotations, pod deletion): the scheduler's
// periodic retry of unschedulable pods comes after 5 minutes.
func TestNodeIPsWithRealIPAM(t *testing.T) {
	netA := cniruntime.HostLocalNetwork(t, "pods-a", `[[{"subnet": "10.88.1.0/28"}]]`)
	netB := cniruntime.HostLocalNetwork(t, "pods-b", `[[{"subnet": "10.88.2.0/28"}]]`)
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	for i := range 13 {
		if _, err := netA.Add(ctx, fmt.Sprintf("a-%d", i)); err != nil {
			t.Fatalf("ADD %d on A's network: %v", i, err)
		}
	}
	if _, err := netA.Add(ctx, "a-14"); err == nil || !strings.Contains(err.Error(), "no IP addresses available") {
		t.Fatalf("ADD 14 on a full /28: %v, want host-local's exhaustion error", err)
	}
	for i := range 3 {
		if _, err := netB.Add(ctx, fmt.Sprintf("b-%d", i)); err != nil {
			t.Fatalf("ADD %d on B's network: %v", i, err)
		}
	}

	applyManifests(ctx, t, cp, "namespace", "node-agent")
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := cp.CreateNode(ctx, n, resources("16", "64Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}
	// An empty pod cgroup tree: the per-pod PID probe has nothing to list.
	cgroupRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cgroupRoot, "pids", "kubepods", "burstable"), 0o755); err != nil {
		t.Fatal(err)
	}
	kubeconfigs := map[string]string{}
	for _, n := range []string{"node-a", "node-b"} {
		pod := agentPod(ctx, t, cp.Client, n)
		// The shipped agent runs on the host's network, so it takes none
		// of the addresses it counts (and starts where none is left).
		if !pod.Spec.HostNetwork {
			t.Fatal("the shipped node agent's pod is on the pod network: it would need a pod IP to report that there is none")
		}
		kubeconfigs[n] = serviceAccountKubeconfig(ctx, t, cp, "headroom-system", "headroom-node-agent", pod)
	}
	report := func(node string, net *cniruntime.Network) ipstats.NodeStats {
		t.Helper()
		p, err := cp.StartProcessAs("node-agent-once-"+node, "headroom-node-agent", "--once", "--node-name="+node,
			"--kubeconfig="+kubeconfigs[node], "--cgroup-root="+cgroupRoot, "--cni-conf-dir="+net.ConfDir)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(time.Minute); err != nil {
			t.Fatalf("headroom-node-agent --once for %s: %v\n%s", node, err, p.Log(4<<10))
		}
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := ipstats.ParseNode(n.Annotations, time.Now(), 0)
		if err != nil {
			t.Fatalf("%s's pod-IP annotations: %v (%v)", node, err, n.Annotations)
		}
		return s
	}
	if s := report("node-a", netA); s.Capacity != 13 || s.Used != 13 {
		t.Fatalf("node-a: capacity %d, used %d; want 13 and 13", s.Capacity, s.Used)
	}
	if s := report("node-b", netB); s.Capacity != 13 || s.Used != 3 {
		t.Fatalf("node-b: capacity %d, used %d; want 13 and 3", s.Capacity, s.Used)
	}

	if _, err := cp.StartScheduler(ctx, repoFile(t, "manifests/scheduler/scheduler-config.yaml")); err != nil {
		t.Fatal(err)
	}
	preferA := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-a"},
			}}},
		}},
	}}
	pods := cp.Client.CoreV1().Pods(metav1.NamespaceDefault)
	create := func(name string, hostNetwork bool) {
		t.Helper()
		p := newPod(name, "headroom-scheduler", nil, nil, nil)
		p.Spec.Affinity = preferA
		p.Spec.HostNetwork = hostNetwork
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// B's 10 free addresses take 10 pods, one at a time so that each sees
	// the others in the estimate; none goes to A.
	for i := range 10 {
		name := fmt.Sprintf("p%02d", i)
		create(name, false)
		if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, name); node != "node-b" {
			t.Fatalf("%s bound to %s, which has no free pod IP; want node-b", name, node)
		}
	}
	// A host-network pod takes no pod IP: A, which it prefers, is fine.
	create("hostnet", true)
	if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, "hostnet"); node != "node-a" {
		t.Errorf("host-network pod bound to %s, want node-a (preferred, and it takes no pod IP)", node)
	}

	// Both pools are used up now: the next pod fits nowhere.
	create("stuck", false)
	cond := waitUnschedulable(ctx, t, cp.Client, metav1.NamespaceDefault, "stuck", "but no node has a free pod IP")
	if want := "2 " + nodeips.ErrReasonNoFreeIPs; !strings.Contains(cond.Message, want) {
		t.Errorf("PodScheduled condition %q, want it to contain %q", cond.Message, want)
	}
	ev := waitEvent(ctx, t, cp.Client, "stuck", "FailedScheduling", nodeips.ErrReasonNoFreeIPs)
	t.Logf("FailedScheduling: %s", ev.Message)

	// Two containers on A go away; the agent reports the drop, and the
	// queueing hint for the annotation update sends the pod to A (the
	// scheduler's periodic flush comes after 5 minutes).
	for _, id := range []string{"a-3", "a-7"} {
		if err := netA.Del(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if s := report("node-a", netA); s.Capacity != 13 || s.Used != 11 {
		t.Fatalf("node-a after two DELs: capacity %d, used %d; want 13 and 11", s.Capacity, s.Used)
	}
	if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, "stuck"); node != "node-a" {
		t.Fatalf("stuck bound to %s, want node-a", node)
	}

	// A's last free address goes to the next pod; then nothing is free
	// again, and a pod on B that was placed after B's sample is deleted:
	// its address leaves B's estimate, and the queueing hint for the
	// deletion sends the pending pod there.
	create("a-last", false)
	if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, "a-last"); node != "node-a" {
		t.Fatalf("a-last bound to %s, want node-a", node)
	}
	create("stuck-2", false)
	waitEvent(ctx, t, cp.Client, "stuck-2", "FailedScheduling", "2 "+nodeips.ErrReasonNoFreeIPs)
	if err := pods.Delete(ctx, "p00", metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, "stuck-2"); node != "node-b" {
		t.Fatalf("stuck-2 bound to %s, want node-b, where p00 left", node)
	}
}
