package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	_ "github.com/headroom-k8s/headroom/apis/config/scheme"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// TestManifestsApply applies the shipped kustomize tree (kubectl apply -k
// manifests/) to a real API server, so every object passes the server's
// schema validation, and checks that the scheduler ConfigMap it created
// holds a KubeSchedulerConfiguration the scheduler accepts.
func TestManifestsApply(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	_, file, _, _ := runtime.Caller(0)
	manifests := filepath.Join(filepath.Dir(file), "..", "..", "manifests")
	kubectl := filepath.Join(cp.BinDir, "kubectl")
	for _, verb := range []string{"apply", "get"} {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.KubeconfigPath, verb, "-k", manifests).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s -k manifests/: %v\n%s", verb, err, out)
		}
	}

	cms, err := cp.Client.CoreV1().ConfigMaps("headroom-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cm := range cms.Items {
		data, ok := cm.Data["scheduler-config.yaml"]
		if !ok {
			continue
		}
		found = true
		obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(data), nil, nil)
		if err != nil {
			t.Fatalf("ConfigMap %s: scheduler config does not decode: %v", cm.Name, err)
		}
		cfg := obj.(*schedconfig.KubeSchedulerConfiguration)
		var names []string
		for _, p := range cfg.Profiles {
			names = append(names, p.SchedulerName)
		}
		if !strings.Contains(strings.Join(names, ","), "headroom-scheduler") {
			t.Errorf("shipped profiles %v lack schedulerName headroom-scheduler", names)
		}
	}
	if !found {
		t.Error("no ConfigMap in headroom-system holds scheduler-config.yaml")
	}
}

// limitCriticalClasses configures ResourceQuota admission as GKE does: a pod
// with a critical priority class is refused in a namespace where no
// ResourceQuota's scopeSelector covers its class.
const limitCriticalClasses = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: ResourceQuota
  configuration:
    apiVersion: apiserver.config.k8s.io/v1
    kind: ResourceQuotaConfiguration
    limitedResources:
    - resource: pods
      matchScopes:
      - scopeName: PriorityClass
        operator: In
        values: [system-node-critical, system-cluster-critical]
`

// TestManifestsPodsAdmitted creates a pod from every shipped workload's pod
// template (the kustomize tree and the descheduler-deployment overlay, which
// the chart renders field by field) in headroom-system, on an API server
// whose ResourceQuota admission limits the critical priority classes the
// way GKE does. Every pod is admitted with its class's priority, thanks to
// the shipped ResourceQuota headroom-critical-pods: in a namespace without
// it the same pod is refused. Pod Security's "restricted" level, which the
// namespace warns about, finds nothing to warn about in the scheduler and
// descheduler pods (TestPodSecurityLevels), and in the node agent's only the
// host access it needs.
// Every pod selects linux nodes and sets memory requests and limits.
func TestManifestsPodsAdmitted(t *testing.T) {
	config := filepath.Join(t.TempDir(), "admission.yaml")
	if err := os.WriteFile(config, []byte(limitCriticalClasses), 0o644); err != nil {
		t.Fatal(err)
	}
	cp := controlplane.StartForTest(t, controlplane.Options{
		APIServerArgs: []string{"--admission-control-config-file=" + config},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	applyManifests(ctx, t, cp, ".", "descheduler-deployment")
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "elsewhere"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	templates := podTemplates(t, renderKustomize(t))
	for key, pt := range podTemplates(t, renderKustomizeDir(t, "manifests/descheduler-deployment")) {
		templates[key] = pt
	}
	if len(templates) != 4 {
		t.Fatalf("%d pod templates, want the scheduler's, the node agent's and the descheduler's CronJob and Deployment", len(templates))
	}
	create := func(ns string, pt corev1.PodTemplateSpec) (*corev1.Pod, []string, error) {
		w := &warningRecorder{}
		cfg := rest.CopyConfig(cp.Config)
		cfg.WarningHandler = w
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{GenerateName: pt.Labels["app.kubernetes.io/name"] + "-", Namespace: ns, Labels: pt.Labels},
			Spec:       pt.Spec,
		}
		created, err := client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return created, w.list, err
	}
	for key, pt := range templates {
		t.Run(key, func(t *testing.T) {
			if os := pt.Spec.NodeSelector[corev1.LabelOSStable]; os != "linux" {
				t.Errorf("nodeSelector %v, want %s: linux", pt.Spec.NodeSelector, corev1.LabelOSStable)
			}
			for _, c := range pt.Spec.Containers {
				if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("container %s: resources %v, want a memory request and limit", c.Name, c.Resources)
				}
			}
			class := pt.Spec.PriorityClassName
			if class != "system-cluster-critical" && class != "system-node-critical" {
				t.Fatalf("priorityClassName %q: this test knows the critical classes only", class)
			}
			pc, err := cp.Client.SchedulingV1().PriorityClasses().Get(ctx, class, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pod, warned, err := create(chartNS, pt)
			if err != nil {
				t.Fatalf("not admitted in %s: %v", chartNS, err)
			}
			if pod.Spec.Priority == nil || *pod.Spec.Priority != pc.Value {
				t.Errorf("priority %v, want %s's %d", pod.Spec.Priority, class, pc.Value)
			}
			for _, w := range warned {
				if !strings.Contains(w, "PodSecurity") {
					continue
				}
				if !pt.Spec.HostNetwork {
					t.Errorf("warning: %s", w)
					continue
				}
				// The node agent: host network, its port and hostPath
				// volumes, nothing of the hardening.
				for _, s := range []string{"allowPrivilegeEscalation", "capabilities", "runAsNonRoot", "seccompProfile", "privileged"} {
					if strings.Contains(w, s) {
						t.Errorf("warning names %s: %s", s, w)
					}
				}
			}

			_, _, err = create("elsewhere", pt)
			if err == nil || !strings.Contains(err.Error(), "insufficient quota to match these scopes") {
				t.Errorf("in a namespace without the quota: %v, want insufficient quota", err)
			}
		})
	}
}

// TestSchedulerReplicasPlacement runs the shipped headroom-scheduler
// Deployment and PodDisruptionBudget on kwok nodes, placed by a default
// scheduler (headroom-scheduler with the default profile only). Its
// anti-affinity is preferred, not required: on one node both replicas run;
// once a second node joins, a rolling update (one surge pod, none
// unavailable) completes, where a required anti-affinity would leave the
// surge pod pending for good on two nodes; the new replicas are on
// different nodes. The PodDisruptionBudget lets a drain evict one replica and
// refuses the second until the first is replaced.
func TestSchedulerReplicasPlacement(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{ControllerManager: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := cp.Client
	addNode := func(name string) {
		t.Helper()
		if _, err := cp.CreateNode(ctx, name, resources("8", "32Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
		patch := []byte(`{"metadata":{"labels":{"kubernetes.io/os":"linux"}}}`)
		if _, err := c.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	addNode("node-a")
	if _, err := cp.StartScheduler(ctx, []byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
`)); err != nil {
		t.Fatal(err)
	}
	applyManifests(ctx, t, cp, "namespace", "scheduler")

	selector := "app.kubernetes.io/name=headroom-scheduler"
	// rolledOut waits until the Deployment's current template runs on every
	// replica, all available and no old pod left, and returns the nodes.
	rolledOut := func() []string {
		t.Helper()
		var nodes []string
		err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			d, err := c.AppsV1().Deployments(chartNS).Get(ctx, "headroom-scheduler", metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			want := *d.Spec.Replicas
			if d.Status.ObservedGeneration < d.Generation || d.Status.UpdatedReplicas != want || d.Status.AvailableReplicas != want || d.Status.Replicas != want {
				return false, nil
			}
			pods, err := c.CoreV1().Pods(chartNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return false, err
			}
			// The Deployment's status may still count a replica just
			// deleted, while its replacement waits to be scheduled.
			nodes = nil
			for _, p := range pods.Items {
				if p.DeletionTimestamp == nil {
					if p.Spec.NodeName == "" {
						return false, nil
					}
					nodes = append(nodes, p.Spec.NodeName)
				}
			}
			return len(nodes) == int(want), nil
		})
		if err != nil {
			d, _ := c.AppsV1().Deployments(chartNS).Get(ctx, "headroom-scheduler", metav1.GetOptions{})
			t.Fatalf("the Deployment did not roll out: %v\nstatus %+v", err, d.Status)
		}
		slices.Sort(nodes)
		return nodes
	}
	if nodes := rolledOut(); !slices.Equal(nodes, []string{"node-a", "node-a"}) {
		t.Errorf("on one node, replicas on %v, want both on node-a", nodes)
	}

	addNode("node-b")
	restart := []byte(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":"` + time.Now().Format(time.RFC3339) + `"}}}}}`)
	if _, err := c.AppsV1().Deployments(chartNS).Patch(ctx, "headroom-scheduler", types.StrategicMergePatchType, restart, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	rolledOut()

	// Pods of one rollout may still share a node, either one: the second
	// surge pod sees one old replica on node-a and one new on node-b, a tie
	// for the anti-affinity that other scores break. A pod deleted and
	// replaced goes where the other replica is not.
	pods, err := c.CoreV1().Pods(chartNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	byNode := map[string][]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p.Name)
		}
	}
	for _, names := range byNode {
		if len(names) == 2 {
			if err := c.CoreV1().Pods(chartNS).Delete(ctx, names[0], metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if nodes := rolledOut(); !slices.Equal(nodes, []string{"node-a", "node-b"}) {
		t.Errorf("on two nodes, replicas on %v, want one on each", nodes)
	}

	// A drain of both nodes: cordoned, so that a replacement stays pending
	// (kwok would make it ready at once); the first eviction passes, the
	// second waits for a replacement (the budget allows one replica down).
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := c.CoreV1().Nodes().Patch(ctx, n, types.StrategicMergePatchType, []byte(`{"spec":{"unschedulable":true}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		pdb, err := c.PolicyV1().PodDisruptionBudgets(chartNS).Get(ctx, "headroom-scheduler", metav1.GetOptions{})
		return err == nil && pdb.Status.ObservedGeneration == pdb.Generation && pdb.Status.DisruptionsAllowed == 1, err
	})
	if err != nil {
		t.Fatalf("the PodDisruptionBudget never allowed one disruption: %v", err)
	}
	pods, err = c.CoreV1().Pods(chartNS).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	var evicted int
	for _, p := range pods.Items {
		err := c.PolicyV1().Evictions(chartNS).Evict(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: chartNS}})
		switch {
		case err == nil:
			evicted++
		case !apierrors.IsTooManyRequests(err):
			t.Errorf("evicting %s: %v", p.Name, err)
		}
	}
	if evicted != 1 {
		t.Errorf("%d of %d replicas evicted at once, want 1", evicted, len(pods.Items))
	}
}
