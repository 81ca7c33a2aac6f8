package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/test/controlplane"
	"github.com/headroom-k8s/headroom/test/realnode"
)

// startRealNode starts the real node (kubelet, containerd, runc, CNI) and
// runs the shipped node agent on it as its DaemonSet's pod, when this
// machine can; otherwise it says why in one line and returns nil.
func startRealNode(ctx context.Context, cp *controlplane.ControlPlane) (*realnode.Node, error) {
	fmt.Println("starting the default scheduler (DaemonSet pods), then a real node: kubelet, containerd, runc, CNI bridge + host-local")
	if _, err := cp.StartDefaultScheduler(ctx); err != nil {
		return nil, err
	}
	node, err := realnode.Start(ctx, cp, realnode.Options{})
	if err != nil {
		return nil, err
	}
	fmt.Printf("real node %s is Ready (InternalIP %s; the pods' PID budget %d; pod IPs from %s)\n", node.Name, node.IP, node.PIDBudget, realnode.DefaultPodSubnet)
	fmt.Println("running the shipped node agent DaemonSet on it")
	if _, err := node.DeployShippedNodeAgent(ctx, "--reserved-pids="+strconv.FormatInt(node.ReservedPIDs, 10), "--interval=5s"); err != nil {
		return nil, err
	}
	return node, nil
}

// realNodeStorm shows the loop on the real node: three stress pods placed
// by headroom-scheduler grow their threads until the node's PIDs pass the
// descheduler's threshold; the agent publishes it, headroom-descheduler
// (already running every interval) evicts, the kubelet kills the victim's
// tasks and the next sample shows the relief.
func realNodeStorm(ctx context.Context, cp *controlplane.ControlPlane, node *realnode.Node) error {
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
	fmt.Printf("\nreal node: %d of %d allocatable PIDs used; a storm of 3 pods growing to %d threads each over 20s\n", base.Used, alloc, perPod)
	storm, err := realnode.StressDeployment("storm", "headroom-scheduler", 3, 20, "--threads", strconv.FormatInt(perPod, 10), "--ramp", "20s")
	if err != nil {
		return err
	}
	// All three start on the real node: the simulated nodes are cordoned
	// until the storm's pods are bound (the scheduler would spread them),
	// then uncordoned, so that a replacement has somewhere to go. A pod
	// pinned to the node would not be evicted at all: the evictor's
	// nodeFit finds no other node for it.
	if err := cordonOthers(ctx, cp, node.Name, true); err != nil {
		return err
	}
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
	if err := cordonOthers(ctx, cp, node.Name, false); err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TIME\tPIDS USED (agent)\tKUBEPODS TASKS (kernel)\tSTORM PODS")
	start := time.Now()
	above := false
	err = wait.PollUntilContextTimeout(ctx, 5*time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s, _ := pidstats.ParseNode(n.Annotations, time.Now(), 0)
		tasks, _ := os.ReadFile(node.KubepodsDir() + "/pids.current")
		pods, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: "app=storm"})
		if err != nil {
			return false, err
		}
		var states []string
		for _, p := range pods.Items {
			st := string(p.Status.Phase)
			if p.DeletionTimestamp != nil {
				st = "terminating"
			} else if p.Spec.NodeName != node.Name && p.Spec.NodeName != "" {
				st = "replacement, " + st + " on " + p.Spec.NodeName
			} else if p.Spec.NodeName == "" {
				st = "Pending (unschedulable)"
			} else if last, err := node.StressStatus(ctx, p.Namespace, p.Name); err == nil {
				st = last
			}
			states = append(states, p.Name[len(p.Name)-5:]+": "+st)
		}
		fmt.Fprintf(w, "+%s\t%d/%d\t%s\t%s\n", time.Since(start).Round(time.Second), s.Used, alloc, strings.TrimSpace(string(tasks)), strings.Join(states, "; "))
		w.Flush()
		above = above || s.Used > alloc*95/100
		return above && s.Used <= alloc*90/100, nil
	})
	if err != nil {
		fmt.Printf("the storm was not relieved within 3 minutes (%v): see %s/headroom-descheduler.log\n", err, cp.Dir)
		return nil
	}
	fmt.Println("relieved: headroom-descheduler evicted a storm pod, the kubelet stopped its tasks, the agent's next sample shows the node under target, and headroom-scheduler placed the replacement elsewhere")
	return nil
}

// cordonOthers cordons (or uncordons) every node but keep.
func cordonOthers(ctx context.Context, cp *controlplane.ControlPlane, keep string, cordon bool) error {
	nodes, err := cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	patch := []byte(fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, cordon))
	for _, n := range nodes.Items {
		if n.Name == keep {
			continue
		}
		if _, err := cp.Client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}
