package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/headroom-k8s/headroom/test/controlplane"
)

// repoFile reads a file of the repository, e.g. a shipped manifest, so tests
// exercise what operators use.
func repoFile(t *testing.T, rel string) []byte {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	data, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func resources(cpu, memory, pods string) corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(cpu),
		corev1.ResourceMemory: resource.MustParse(memory),
		corev1.ResourcePods:   resource.MustParse(pods),
	}
}

func newPod(name, schedulerName string, annotations map[string]string, requests, limits corev1.ResourceList) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault, Annotations: annotations},
		Spec: corev1.PodSpec{
			SchedulerName: schedulerName,
			Containers: []corev1.Container{{
				Name:      "app",
				Image:     "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits},
			}},
		},
	}
}

// waitBound waits until the pod is bound and returns its node.
func waitBound(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name string) string {
	t.Helper()
	var node string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = p.Spec.NodeName
		return node != "", nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not bound: %v", ns, name, err)
	}
	return node
}

// waitUnschedulable waits until the scheduler marks the pod unschedulable
// (PodScheduled False) and returns that condition; the pod being bound
// first fails the test, with why ("bound to <node>, <why>").
func waitUnschedulable(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, name, why string) corev1.PodCondition {
	t.Helper()
	var cond corev1.PodCondition
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if p.Spec.NodeName != "" {
			return false, fmt.Errorf("bound to %s, %s", p.Spec.NodeName, why)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				cond = c
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("pod not marked unschedulable: %v", err)
	}
	return cond
}

// repoPath is the absolute path of a file of the repository.
func repoPath(t *testing.T, rel string) string {
	t.Helper()
	path := filepath.Join(controlplane.RepoDir(), rel)
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	return path
}

// applyManifests runs kubectl apply -k on directories of manifests/.
func applyManifests(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		out, err := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig", cp.KubeconfigPath,
			"apply", "-k", filepath.Dir(repoPath(t, filepath.Join("manifests", dir, "kustomization.yaml")))).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl apply -k manifests/%s: %v\n%s", dir, err, out)
		}
	}
}

// serviceAccountKubeconfig writes a kubeconfig for the control plane that
// authenticates with a token of the ServiceAccount, bound to pod unless it
// is nil (a pod-bound token names the pod's node in the user's extra).
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, ns, name string, pod *corev1.Pod) string {
	t.Helper()
	path, err := cp.ServiceAccountKubeconfig(ctx, ns, name, pod)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// shippedIdentity returns a kubeconfig with a token of the shipped
// ServiceAccount name (headroom-scheduler, headroom-descheduler,
// headroom-node-agent), whose rights are the shipped RBAC's.
func shippedIdentity(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, name string) string {
	t.Helper()
	path, err := cp.ShippedIdentityKubeconfig(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// nodeIdentity returns a client that acts as node's kubelet, the user
// system:node:<node> in the group system:nodes: the admin impersonates it,
// as the control plane without a real node issues no kubelet certificate.
// Its RBAC-only authorizer has no Node authorizer either: a ClusterRole
// bound to the group grants what that authorizer grants every kubelet on
// Events (create, patch, update).
func nodeIdentity(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, node string) kubernetes.Interface {
	t.Helper()
	const name = "headroom-test-kubelet-events"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "update"}}}}
	if _, err := cp.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.GroupKind, Name: "system:nodes"}}}
	if _, err := cp.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg := restConfig(t, cp.KubeconfigPath)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"}}
	return kubernetes.NewForConfigOrDie(cfg)
}

// fileExists reports whether path names an existing file.
func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
