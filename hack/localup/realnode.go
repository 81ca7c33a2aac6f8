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
	// Pinned to the real node: a replacement stays Pending there rather
	// than land on a simulated node.
	storm.Spec.Template.Spec.NodeSelector = map[string]string{corev1.LabelHostname: node.Name}
	if _, err := cp.Client.AppsV1().Deployments(metav1.NamespaceDefault).Create(ctx, storm, metav1.CreateOptions{}); err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "TIME\tPIDS USED (agent)\tKUBEPODS TASKS (kernel)\tSTORM PODS")
	start := time.Now()
	evictedSeen := false
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
				st, evictedSeen = "terminating", true
			} else if p.Spec.NodeName == "" {
				st = "Pending (unschedulable)"
			} else if last, err := node.StressStatus(ctx, p.Namespace, p.Name); err == nil {
				st = last
			}
			states = append(states, p.Name[len(p.Name)-5:]+": "+st)
		}
		fmt.Fprintf(w, "+%s\t%d/%d\t%s\t%s\n", time.Since(start).Round(time.Second), s.Used, alloc, strings.TrimSpace(string(tasks)), strings.Join(states, "; "))
		w.Flush()
		return evictedSeen && len(descheduledSoFar(cp)) > 0 && s.Used <= alloc*90/100, nil
	})
	if err != nil {
		fmt.Printf("the storm was not relieved within 3 minutes (%v): see %s/headroom-descheduler.log\n", err, cp.Dir)
		return nil
	}
	fmt.Println("relieved: headroom-descheduler evicted, the kubelet stopped the pod's tasks, the agent's next sample shows the node under target")
	return nil
}
