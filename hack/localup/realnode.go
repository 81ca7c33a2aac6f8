package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/test/controlplane"
	"github.com/headroom-k8s/headroom/test/realnode"
)

// The demo's two real nodes: the storm runs on the first, whose pods
// have 2,000 PIDs; the second has room for its replacement. Both count the
// machine's tasks (one kernel), so the second's budget is large enough
// that the storm on the first leaves it well below the line.
const (
	stormNodePIDs = 2000
	roomyNodePIDs = 8000
)

// startRealNodes starts two real nodes (each a kubelet, containerd, runc
// and CNI of its own) and runs the shipped node agent DaemonSet on both,
// when this machine can; otherwise it says why in one line and returns
// nil.
func startRealNodes(ctx context.Context, cp *controlplane.ControlPlane) ([]*realnode.Node, error) {
	fmt.Println("starting the default scheduler (DaemonSet pods), then two real nodes: each a kubelet, containerd, runc, CNI bridge + host-local of its own")
	if _, err := cp.StartDefaultScheduler(ctx); err != nil {
		return nil, err
	}
	pidMax, err := realnode.ReadInt("/proc/sys/kernel/pid_max")
	if err != nil {
		return nil, err
	}
	nodes, err := realnode.StartNodes(ctx, cp,
		realnode.Options{Name: "real-node", ReservedPIDs: pidMax - stormNodePIDs},
		realnode.Options{Name: "real-node-2", ReservedPIDs: pidMax - roomyNodePIDs})
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		fmt.Printf("real node %s is Ready (InternalIP %s; the pods' PID budget %d; pod IPs from %s)\n", n.Name, n.IP, n.PIDBudget, n.PodSubnet)
	}
	fmt.Println("running the shipped node agent DaemonSet on both (each pod reads its node's kubelet configuration for the PID reservation)")
	if _, err := realnode.DeployShippedNodeAgentOnNodes(ctx, nodes, "--interval=5s"); err != nil {
		return nil, err
	}
	return nodes, nil
}

// realNodeStorm shows the loop across two real nodes: three stress pods
// placed by headroom-scheduler on the first grow their threads until its
// PIDs pass the descheduler's threshold; the agent publishes it,
// headroom-descheduler (already running every interval) evicts, the
// kubelet kills the victim's tasks and the next sample shows the relief;
// headroom-scheduler places the replacement on the second real node, where
// it starts and the agent there lists its PIDs.
func realNodeStorm(ctx context.Context, cp *controlplane.ControlPlane, node, roomy *realnode.Node) error {
	n, err := cp.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	base, err := pidstats.ParseNode(n.Annotations, time.Now(), 0)
	if err != nil {
		return fmt.Errorf("the agent's figures of %s: %w", node.Name, err)
	}
	alloc := base.Allocatable()
	perPod := (alloc*95/100-base.Used+60)/3 + 40
	fmt.Printf("\nreal node %s: %d of %d allocatable PIDs used; a storm of 3 pods growing to %d threads each over 20s\n", node.Name, base.Used, alloc, perPod)
	storm, err := realnode.StressDeployment("storm", "headroom-scheduler", 3, 20, "--threads", strconv.FormatInt(perPod, 10), "--ramp", "20s")
	if err != nil {
		return err
	}
	// All three start on the first real node: every other node is cordoned
	// until the storm's pods are bound (the scheduler would spread them).
	// Then the second real node alone is uncordoned, so that the
	// replacement goes there, and the kwok nodes stay cordoned until the
	// demo ends. A pod pinned to the node would not be evicted at all: the
	// evictor's nodeFit finds no other node for it.
	if err := setUnschedulable(ctx, cp, node.Name, false); err != nil {
		return err
	}
	if err := cordonOthers(ctx, cp, node.Name, true); err != nil {
		return err
	}
	defer func() {
		if err := cordonOthers(ctx, cp, node.Name, false); err != nil {
			fmt.Println("uncordoning the nodes:", err)
		}
	}()
	if _, err := cp.Client.AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, storm, metav1.CreateOptions{}); err != nil {
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=storm"})
		if err != nil {
			return false, err
		}
		bound := 0
		for _, p := range pods.Items {
			if p.Spec.NodeName == node.Name {
				bound++
			}
		}
		return bound == 3, nil
	})
	if err != nil {
		return fmt.Errorf("the storm's pods were not all placed on %s: %w", node.Name, err)
	}
	if err := setUnschedulable(ctx, cp, roomy.Name, false); err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "TIME\t%s PIDS USED (agent)\tKUBEPODS TASKS (kernel)\t%s PIDS USED\tSTORM PODS\n", node.Name, roomy.Name)
	start := time.Now()
	above, relieved := false, false
	var moved string
	err = wait.PollUntilContextTimeout(ctx, 5*time.Second, 4*time.Minute, true, func(ctx context.Context) (bool, error) {
		figures := func(name string) (pidstats.NodeStats, error) {
			n, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return pidstats.NodeStats{}, err
			}
			s, _ := pidstats.ParseNode(n.Annotations, time.Now(), 0)
			return s, nil
		}
		s, err := figures(node.Name)
		if err != nil {
			return false, err
		}
		r, err := figures(roomy.Name)
		if err != nil {
			return false, err
		}
		tasks, _ := os.ReadFile(node.KubepodsDir() + "/pids.current")
		pods, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=storm"})
		if err != nil {
			return false, err
		}
		var states []string
		for _, p := range pods.Items {
			st := string(p.Status.Phase)
			switch {
			case p.DeletionTimestamp != nil:
				st = "terminating"
			case p.Spec.NodeName == "":
				st = "Pending (unschedulable)"
			case p.Spec.NodeName == node.Name:
				if last, err := node.StressStatus(ctx, p.Namespace, p.Name); err == nil {
					st = last
				}
			default:
				st = "replacement, " + st + " on " + p.Spec.NodeName
				if held, ok := r.Pods.Lookup(p.UID); ok && p.Spec.NodeName == roomy.Name && p.Status.Phase == corev1.PodRunning {
					st += fmt.Sprintf(", %d PIDs in its agent's pid-pods", held)
					moved = fmt.Sprintf("%s started on %s, where the node agent lists it with %d PIDs", p.Name, roomy.Name, held)
				}
			}
			states = append(states, p.Name[len(p.Name)-5:]+": "+st)
		}
		fmt.Fprintf(w, "+%s\t%d/%d\t%s\t%d/%d\t%s\n", time.Since(start).Round(time.Second), s.Used, alloc, strings.TrimSpace(string(tasks)), r.Used, r.Allocatable(), strings.Join(states, "; "))
		w.Flush()
		above = above || s.Used > alloc*95/100
		relieved = relieved || (above && s.Used <= alloc*90/100)
		return relieved && moved != "", nil
	})
	if err != nil {
		fmt.Printf("the storm was not relieved onto %s within 4 minutes (%v): see %s/headroom-descheduler.log\n", roomy.Name, err, cp.Dir)
		return nil
	}
	fmt.Printf("relieved: headroom-descheduler evicted a storm pod from %s, the kubelet stopped its tasks and the agent's next sample showed the node under target; headroom-scheduler placed the replacement on the other real node: %s\n", node.Name, moved)
	fmt.Printf("(both nodes count the machine's tasks, one kernel: as the replacement's threads grow, %s's figure climbs again and the descheduler may move another storm pod; docs/real-node.md)\n", node.Name)
	return nil
}

// cordonOthers cordons (or uncordons) every node but keep.
func cordonOthers(ctx context.Context, cp *controlplane.ControlPlane, keep string, cordon bool) error {
	nodes, err := cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if n.Name == keep {
			continue
		}
		if err := setUnschedulable(ctx, cp, n.Name, cordon); err != nil {
			return err
		}
	}
	return nil
}

// setUnschedulable cordons or uncordons a node.
func setUnschedulable(ctx context.Context, cp *controlplane.ControlPlane, node string, v bool) error {
	patch := []byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, v))
	_, err := cp.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}
