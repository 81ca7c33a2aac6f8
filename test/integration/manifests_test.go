package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
