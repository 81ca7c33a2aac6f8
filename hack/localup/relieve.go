package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// The simulated node agent's per-pod figure of a demo pod at rest, and the
// share of a pressured node's PIDs its pods are driven to.
const (
	restingPodPIDs   = 300
	pressuredPodPIDs = 1500
)

// relieveLoop shows RelieveNodePressure at work on the demo: it writes the
// PID samples the node agent would write now that the demo's pods run
// (their measured figures in headroom.dev/pid-pods), starts
// headroom-descheduler as the shipped Deployment runs it but on a short
// interval, drives the node holding the most demo pods into PID pressure,
// waits for the descheduler's next run and prints what it evicted, in which
// order and why, and where the replacements landed.
// It returns the pressured node and a node a replacement landed on.
func relieveLoop(ctx context.Context, cp *controlplane.ControlPlane, dep *appsv1.Deployment, policy, deployment string, interval time.Duration) (pressured, busy string, err error) {
	before, err := demoPods(ctx, cp, dep, int(*dep.Spec.Replicas))
	if err != nil {
		return "", "", err
	}
	// The shipped policy's minPodAge (10m) protects pods that started
	// recently. The demo's pods are shown as started an hour ago: kwok made
	// them Running and Ready and leaves a Ready pod's status alone.
	if err := age(ctx, cp, before, time.Hour); err != nil {
		return "", "", err
	}
	now := time.Now()
	nodes, err := cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", "", err
	}
	byNode := map[string][]corev1.Pod{}
	for _, p := range before {
		byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
	}
	fmt.Println("\nsimulated node agent: a new PID sample on every node, with the demo pods' figures (headroom.dev/pid-pods)")
	for _, n := range nodes.Items {
		stats, err := pidstats.ParseNode(n.Annotations, now, 0)
		if err != nil {
			continue
		}
		// The sample before the pods: their measured figures come on top.
		used := stats.Used + int64(len(byNode[n.Name]))*restingPodPIDs
		if err := sample(ctx, cp, n.Name, stats, used, byNode[n.Name], restingPodPIDs, now); err != nil {
			return "", "", err
		}
	}

	fmt.Printf("starting headroom-descheduler (the shipped Deployment's args, --descheduling-interval=%s, the shipped policy)\n", interval)
	if _, err := startDescheduler(ctx, cp, policy, deployment, interval); err != nil {
		return "", "", err
	}

	// The node with the most demo pods: its pods' PIDs climb.
	target := ""
	for name, pods := range byNode {
		if target == "" || len(pods) > len(byNode[target]) || len(pods) == len(byNode[target]) && name < target {
			target = name
		}
	}
	node, err := cp.Client.CoreV1().Nodes().Get(ctx, target, metav1.GetOptions{})
	if err != nil {
		return "", "", err
	}
	stats, err := pidstats.ParseNode(node.Annotations, time.Now(), 0)
	if err != nil {
		return "", "", fmt.Errorf("node %s: %w", target, err)
	}
	// The shipped policy relieves a node above 95 % of its allocatable PIDs
	// down to 90 %. Used is set so that evicting two of its pods at the
	// raised figure (one, when it holds one) reaches 90 %, and one fewer
	// does not.
	k, per := len(byNode[target]), int64(pressuredPodPIDs)
	evictions := int64(min(k, 2))
	if k == 1 {
		per = 2500
	}
	targetUsed := stats.Allocatable() * 90 / 100
	used := min(targetUsed+evictions*per-100, stats.Allocatable())
	logBefore := descheduledSoFar(cp)
	fmt.Printf("\ndriving %s into PID pressure: used %d → %d of %d allocatable (%.1f%%; threshold 95%%), its %d demo pod(s) now hold %d PIDs each\n",
		target, stats.Used, used, stats.Allocatable(), float64(used)*100/float64(stats.Allocatable()), k, per)
	if err := sample(ctx, cp, target, stats, used, byNode[target], per, time.Now()); err != nil {
		return "", "", err
	}

	// The shipped policy relieves pressure seen in two consecutive samples:
	// the first run that sees it waits, and the agent's next sample of the
	// same figures lets the run after act.
	fmt.Printf("\nwaiting for headroom-descheduler's next run to see it (every %s)…\n", interval)
	waiting := regexp.MustCompile(`"Node above threshold; waiting for the pressure to last".*node="` + regexp.QuoteMeta(target) + `".* seen="([^"]*)"`)
	var seen []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 2*interval+30*time.Second, true, func(context.Context) (bool, error) {
		data, _ := os.ReadFile(filepath.Join(cp.Dir, "headroom-descheduler.log"))
		seen = waiting.FindStringSubmatch(string(data))
		return seen != nil, nil
	})
	if err != nil {
		return "", "", fmt.Errorf("headroom-descheduler never saw %s above its threshold: %w\n%s", target, err, tail(cp, "headroom-descheduler"))
	}
	fmt.Printf("it saw %s above its threshold in %s, and waits for the pressure to last; the node's next sample, the same figures:\n", target, seen[1])
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	if err := sample(ctx, cp, target, stats, used, byNode[target], per, time.Now()); err != nil {
		return "", "", err
	}

	// What the plugin will do, as kubectl headroom shows it before the run.
	fmt.Printf("\n$ kubectl headroom evictions %s\n", target)
	plan := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl-headroom"), "evictions", target, "--kubeconfig", cp.KubeconfigPath)
	plan.Stdout, plan.Stderr = os.Stdout, os.Stderr
	if err := plan.Run(); err != nil {
		return "", "", fmt.Errorf("kubectl headroom evictions: %w", err)
	}

	fmt.Printf("\nwaiting for headroom-descheduler's next run (every %s)…\n", interval)
	var evicted []eviction
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*interval+30*time.Second, true, func(context.Context) (bool, error) {
		evicted = descheduledSoFar(cp)[len(logBefore):]
		return int64(len(evicted)) >= evictions, nil
	})
	if err != nil {
		return "", "", fmt.Errorf("headroom-descheduler evicted %d pod(s), want %d: %w\n%s", len(evicted), evictions, err, tail(cp, "headroom-descheduler"))
	}
	after, err := demoPods(ctx, cp, dep, int(*dep.Spec.Replicas))
	if err != nil {
		return "", "", err
	}
	busy, err = printRelief(ctx, cp, before, after, evicted)
	return target, busy, err
}

// demoPods waits until the Deployment has n bound pods that are not being
// deleted, and returns them.
func demoPods(ctx context.Context, cp *controlplane.ControlPlane, dep *appsv1.Deployment, n int) ([]corev1.Pod, error) {
	selector := metav1.FormatLabelSelector(dep.Spec.Selector)
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := cp.Client.CoreV1().Pods(dep.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		pods = pods[:0]
		for _, p := range list.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
				return false, nil
			}
			pods = append(pods, p)
		}
		return len(pods) == n, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for %d running pods of %s: %w", n, dep.Name, err)
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].Name < pods[j].Name })
	return pods, nil
}

// age rewrites the running pods' status as if they had started d ago.
func age(ctx context.Context, cp *controlplane.ControlPlane, pods []corev1.Pod, d time.Duration) error {
	then := metav1.NewTime(time.Now().Add(-d))
	for _, p := range pods {
		err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			cur, err := cp.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			cur.Status.StartTime = &then
			for i := range cur.Status.Conditions {
				cur.Status.Conditions[i].LastTransitionTime = then
			}
			for i := range cur.Status.ContainerStatuses {
				if r := cur.Status.ContainerStatuses[i].State.Running; r != nil {
					r.StartedAt = then
				}
			}
			if _, err := cp.Client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); apierrors.IsConflict(err) {
				return false, nil
			} else if err != nil {
				return false, err
			}
			return true, nil
		})
		if err != nil {
			return fmt.Errorf("status of pod %s: %w", p.Name, err)
		}
	}
	return nil
}

// sample writes a PID sample taken at, as headroom-node-agent writes it:
// the node's figures with used PIDs in use, and each of pods holding per.
func sample(ctx context.Context, cp *controlplane.ControlPlane, node string, stats pidstats.NodeStats, used int64, pods []corev1.Pod, per int64, at time.Time) error {
	stats.Used, stats.SampledAt = used, at
	ann := stats.Annotations()
	var usage []pidstats.PodUsage
	for _, p := range pods {
		usage = append(usage, pidstats.PodUsage{UID: p.UID, Value: per})
	}
	ann[pidstats.AnnotationPIDPods] = pidstats.NewPodList(usage).String()
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	_, err = cp.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// startDescheduler runs bin/headroom-descheduler with the container args of
// the shipped Deployment (its own leader Lease, metrics port), the policy
// file, this cluster's kubeconfig and the given interval.
func startDescheduler(ctx context.Context, cp *controlplane.ControlPlane, policy, deployment string, interval time.Duration) (*controlplane.Process, error) {
	data, err := os.ReadFile(deployment)
	if err != nil {
		return nil, err
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict(data, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", deployment, err)
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: d.Namespace}}
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	policyCopy := filepath.Join(cp.Dir, "descheduler-policy.yaml")
	data, err = os.ReadFile(policy)
	if err != nil {
		return nil, err
	}
	if relief.minPodAge != "" {
		data = regexp.MustCompile(`minPodAge: \S+`).ReplaceAll(data, []byte("minPodAge: "+relief.minPodAge))
	}
	if err := os.WriteFile(policyCopy, data, 0o644); err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	var args []string
	for _, a := range d.Spec.Template.Spec.Containers[0].Args {
		switch {
		case strings.HasPrefix(a, "--policy-config-file="):
			a = "--policy-config-file=" + policyCopy
		case strings.HasPrefix(a, "--descheduling-interval="):
			a = "--descheduling-interval=" + interval.String()
		case strings.HasPrefix(a, "--bind-address="):
			a = "--bind-address=127.0.0.1"
		case strings.HasPrefix(a, "--secure-port="):
			a = fmt.Sprintf("--secure-port=%d", port)
		}
		args = append(args, a)
	}
	args = append(args, "--kubeconfig="+cp.KubeconfigPath)
	return cp.StartProcess("headroom-descheduler", args...)
}

// eviction is one "Evicted pod" line of the descheduler's log.
type eviction struct {
	pod, node, reason string
}

var evictedLine = regexp.MustCompile(`"Evicted pod" pod="([^"]+)" reason="([^"]*)" strategy="[^"]*" node="([^"]*)"`)

// descheduledSoFar reads the evictions the descheduler logged, in order.
func descheduledSoFar(cp *controlplane.ControlPlane) []eviction {
	data, _ := os.ReadFile(filepath.Join(cp.Dir, "headroom-descheduler.log"))
	var out []eviction
	for _, m := range evictedLine.FindAllStringSubmatch(string(data), -1) {
		out = append(out, eviction{pod: m[1], reason: m[2], node: m[3]})
	}
	return out
}

func tail(cp *controlplane.ControlPlane, name string) string {
	data, _ := os.ReadFile(filepath.Join(cp.Dir, name+".log"))
	if len(data) > 4<<10 {
		data = data[len(data)-4<<10:]
	}
	return string(data)
}

// printRelief prints the evictions in order and the placement before and
// after: which demo pods left which node, and where their replacements
// landed.
func printRelief(ctx context.Context, cp *controlplane.ControlPlane, before, after []corev1.Pod, evicted []eviction) (busy string, err error) {
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "\nORDER\tEVICTED POD\tFROM NODE\tWHY (the eviction's reason, from headroom-descheduler's log and the pod's Event)")
	for i, e := range evicted {
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", i+1, e.pod, e.node, e.reason)
	}
	if err := w.Flush(); err != nil {
		return "", err
	}
	old := map[types.UID]bool{}
	for _, p := range before {
		old[p.UID] = true
	}
	var replacements []corev1.Pod
	for _, p := range after {
		if !old[p.UID] {
			replacements = append(replacements, p)
		}
	}
	fmt.Fprintln(w, "\nREPLACEMENT\tNODE\tSCHEDULER")
	for _, p := range replacements {
		busy = p.Spec.NodeName
		fmt.Fprintf(w, "%s/%s\t%s\t%s\n", p.Namespace, p.Name, p.Spec.NodeName, p.Spec.SchedulerName)
	}
	if err := w.Flush(); err != nil {
		return "", err
	}

	count := func(pods []corev1.Pod) map[string]int {
		m := map[string]int{}
		for _, p := range pods {
			m[p.Spec.NodeName]++
		}
		return m
	}
	nb, na := count(before), count(after)
	nodes, err := cp.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	pods, err := cp.Client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", err
	}
	onNode := map[string][]*corev1.Pod{}
	for i := range pods.Items {
		p := &pods.Items[i]
		onNode[p.Spec.NodeName] = append(onNode[p.Spec.NodeName], p)
	}
	fmt.Fprintln(w, "\nNODE\tDEMO PODS BEFORE\tAFTER\tPIDS USED NOW (estimate)\tALLOCATABLE")
	now := time.Now()
	var stuck []string
	for _, n := range nodes.Items {
		used, alloc := "unknown", ""
		if s, err := pidstats.ParseNode(n.Annotations, now, 0); err == nil {
			est := pidstats.EstimateUsed(s, onNode[n.Name], relievenodepressure.DefaultPodPIDs)
			used, alloc = fmt.Sprintf("%d (%.1f%%)", est, float64(est)*100/float64(max(s.Allocatable(), 1))), fmt.Sprint(s.Allocatable())
			if est*100 > s.Allocatable()*95 {
				stuck = append(stuck, n.Name)
			}
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\n", n.Name, nb[n.Name], na[n.Name], used, alloc)
	}
	if err := w.Flush(); err != nil {
		return "", err
	}
	left := slices.ContainsFunc(replacements, func(p corev1.Pod) bool {
		return slices.ContainsFunc(evicted, func(e eviction) bool { return e.node == p.Spec.NodeName })
	})
	if left {
		fmt.Println("\nnote: a replacement landed back on a relieved node")
	}
	if len(stuck) > 0 {
		fmt.Printf("\n%s: above 95%% with no pod that could go (their PIDs are used outside the demo): every run evicts nothing there and records a %s Warning Event on the Node\n",
			strings.Join(stuck, ", "), relievenodepressure.ReasonNodePressureUnrelievable)
	}
	return busy, nil
}
