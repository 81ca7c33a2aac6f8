// Command localup brings up Headroom's demo: a local control plane (etcd,
// kube-apiserver, kube-controller-manager, kwok) with simulated nodes,
// headroom-scheduler as the secondary scheduler "headroom-scheduler", a
// demo Deployment that uses it, and headroom-descheduler relieving a node
// the demo drives into PID pressure (relieve.go); where the machine allows,
// two real nodes, a PID storm on the first relieved and its replacement
// started on the second (realnode.go). The processes keep running after it
// exits; `localup -down` stops them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/test/controlplane"
	"github.com/headroom-k8s/headroom/test/realnode"
)

func main() {
	var (
		nodes    = flag.Int("nodes", 10, "number of simulated (kwok) nodes")
		dir      = flag.String("dir", ".local", "directory for the cluster's data, logs and kubeconfig")
		schedCfg = flag.String("scheduler-config", "manifests/scheduler/scheduler-config.yaml", "KubeSchedulerConfiguration for headroom-scheduler")
		demo     = flag.String("demo", "manifests/samples/demo-deployment.yaml", "Deployment to apply")
		down     = flag.Bool("down", false, "stop a cluster started before in -dir and remove its data")
	)
	flag.StringVar(&relief.policy, "policy", "manifests/descheduler/policy.yaml", "DeschedulerPolicy for headroom-descheduler")
	flag.StringVar(&relief.deployment, "descheduler-deployment", "manifests/descheduler-deployment/deployment.yaml", "Deployment whose container args headroom-descheduler runs with")
	flag.DurationVar(&relief.interval, "descheduling-interval", 20*time.Second, "headroom-descheduler's --descheduling-interval; 0 skips the descheduler part of the demo")
	flag.Parse()
	if err := run(*nodes, *dir, *schedCfg, *demo, *down); err != nil {
		fmt.Fprintln(os.Stderr, "localup:", err)
		os.Exit(1)
	}
}

func run(nodes int, dir, schedCfg, demo string, down bool) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if down {
		// The real nodes first: their sandboxes go through containerd's CRI.
		// The control plane goes even where a node's teardown failed.
		if err := errors.Join(realnode.Teardown(dir), controlplane.StopDetached(dir)); err != nil {
			return err
		}
		fmt.Println("stopped the cluster in", dir)
		return os.RemoveAll(dir)
	}
	if nodes < 1 {
		return fmt.Errorf("-nodes must be at least 1, got %d", nodes)
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver.pid")); err == nil {
		return fmt.Errorf("a cluster already runs in %s: stop it first (make down)", dir)
	}
	os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	real := realnode.Supported(controlplane.DefaultBinDir())
	if real != nil {
		fmt.Printf("no real node: %v; the demo runs on kwok nodes alone\n", real)
	}
	fmt.Println("starting etcd, kube-apiserver, kube-controller-manager and kwok in", dir)
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: dir, ControllerManager: true, Kwok: true, Detached: true, RealNode: real == nil})
	if err != nil {
		return err
	}
	var realNodes []*realnode.Node
	if real == nil {
		if realNodes, err = startRealNodes(ctx, cp); err != nil {
			return err
		}
		// The kwok part of the demo runs on the kwok nodes: the demo's
		// image is not on the real nodes, and their figures are the
		// machine's. realNodeStorm uncordons them.
		for _, n := range realNodes {
			if err := setUnschedulable(ctx, cp, n.Name, true); err != nil {
				return err
			}
		}
		// The storm's pods on the real node are seconds old.
		relief.minPodAge = "0s"
	}
	fmt.Printf("creating %d kwok nodes\n", nodes)
	now := time.Now().UTC()
	for i := 0; i < nodes; i++ {
		if _, err := cp.CreateNode(ctx, fmt.Sprintf("kwok-node-%d", i), nodeResources(), nodeAnnotations(i, nodes, now)); err != nil {
			return err
		}
	}
	cfg, err := os.ReadFile(schedCfg)
	if err != nil {
		return err
	}
	fmt.Println("starting headroom-scheduler (schedulerName: headroom-scheduler)")
	if _, err := cp.StartScheduler(ctx, cfg, "--v=2"); err != nil {
		return err
	}
	dep, err := applyDeployment(ctx, cp, demo)
	if err != nil {
		return err
	}
	if err := printPlacement(ctx, cp, dep); err != nil {
		return err
	}
	pressured, busy := "kwok-node-0", "kwok-node-0"
	if relief.interval > 0 && nodes < 2 {
		fmt.Println("\nthe descheduler part needs at least 2 nodes: skipped")
	} else if relief.interval > 0 {
		if pressured, busy, err = relieveLoop(ctx, cp, dep, relief.policy, relief.deployment, relief.interval); err != nil {
			return err
		}
		if realNodes != nil {
			if err := realNodeStorm(ctx, cp, realNodes[0], realNodes[1]); err != nil {
				return err
			}
		}
	}
	bin, err := filepath.Abs(cp.BinDir)
	if err != nil {
		return err
	}
	fmt.Printf(`
The cluster keeps running. Try next:
  export KUBECONFIG=%[1]s PATH=%[2]s:$PATH
  kubectl headroom nodes
  kubectl headroom explain node %[3]s
  kubectl headroom evictions %[3]s
  kubectl headroom explain-oom %[5]s
  kubectl get pods -o wide
  kubectl events -A
  logs: %[4]s/*.log
Stop it with: make down
`, cp.KubeconfigPath, bin, pressured, dir, busy)
	return nil
}

// relief configures the descheduler part of the demo.
var relief struct {
	policy, deployment string
	interval           time.Duration
	// minPodAge, when set, replaces the policy's DefaultEvictor minPodAge.
	minPodAge string
}

func nodeResources() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("8"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
}

// nodeAnnotations gives node i the PID and pod-IP figures
// headroom-node-agent would write. Every third node is nearly out of PIDs,
// so the demo shows NodePIDs steering pods away from it; every fourth node's
// CNI IPAM (a /27: 29 pod IPs) has no address left, so NodeIPs keeps pods
// off it; the last node's IPAM is one the agent cannot read (pod-IP headroom
// unknown: neither filtered nor favoured).
func nodeAnnotations(i, nodes int, now time.Time) map[string]string {
	used := 4000 + 1000*(i%25)
	if i%3 == 2 {
		used = 31000
	}
	a := pidstats.NodeStats{Capacity: 32768, Reserved: 1000, Used: int64(used), SampledAt: now}.Annotations()
	if i == nodes-1 && nodes > 1 {
		return a
	}
	ipUsed := int64(5 + 4*(i%6))
	if i%4 == 1 {
		ipUsed = 29
	}
	maps.Copy(a, ipstats.NewNodeStats(29, ipUsed, now).Annotations())
	return a
}

func applyDeployment(ctx context.Context, cp *controlplane.ControlPlane, path string) (*appsv1.Deployment, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var dep appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &dep); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if dep.Namespace == "" {
		dep.Namespace = metav1.NamespaceDefault
	}
	fmt.Printf("applying Deployment %s/%s (%s)\n", dep.Namespace, dep.Name, path)
	return cp.Client.AppsV1().Deployments(dep.Namespace).Create(ctx, &dep, metav1.CreateOptions{})
}

func printPlacement(ctx context.Context, cp *controlplane.ControlPlane, dep *appsv1.Deployment) error {
	want := int(*dep.Spec.Replicas)
	selector := metav1.FormatLabelSelector(dep.Spec.Selector)
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Client.CoreV1().Pods(dep.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		bound := 0
		for _, p := range list.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		pods = list.Items
		return bound >= want, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %d pods of %s to be bound: %w", want, dep.Name, err)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Spec.NodeName < pods[j].Spec.NodeName })
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nPOD\tNODE\tSCHEDULER\tPHASE")
	perNode := map[string]int{}
	for _, p := range pods {
		perNode[p.Spec.NodeName]++
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", p.Name, p.Spec.NodeName, p.Spec.SchedulerName, p.Status.Phase)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	nodes, err := cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	// The figures as reported (the annotations); the plugins add the pods
	// placed since the sample.
	fmt.Fprintln(w, "\nNODE\tPID ALLOCATABLE\tPIDS USED\tPOD IP CAPACITY\tPOD IPS USED\tDEMO PODS")
	now := time.Now()
	for _, n := range nodes.Items {
		pidAlloc, pidUsed, ipCap, ipUsed := "unknown", "", "unknown", ""
		if s, err := pidstats.ParseNode(n.Annotations, now, 0); err == nil {
			pidAlloc, pidUsed = strconv.FormatInt(s.Allocatable(), 10), strconv.FormatInt(s.Used, 10)
		}
		if s, err := ipstats.ParseNode(n.Annotations, now, 0); err == nil {
			ipCap, ipUsed = strconv.FormatInt(s.Capacity, 10), strconv.FormatInt(s.Used, 10)
			if s.Free() == 0 {
				ipUsed += " (none free)"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\n", n.Name, pidAlloc, pidUsed, ipCap, ipUsed, perNode[n.Name])
	}
	return w.Flush()
}
