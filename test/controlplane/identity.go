package controlplane

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

// Namespace is where the shipped manifests put Headroom and its
// ServiceAccounts.
const Namespace = "headroom-system"

// DeschedulerStateConfigMap is RelieveNodePressure's record of the nodes,
// shipped empty in Namespace.
const DeschedulerStateConfigMap = "headroom-descheduler-state"

// RepoDir is the root of the Headroom checkout this package is built from.
func RepoDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// identityKinds are the objects of the shipped manifests that make up who
// Headroom's components are and what they may do; workloads and their
// configuration are left out, so that nothing else starts.
var identityKinds = map[string]bool{
	"Namespace": true, "ServiceAccount": true,
	"ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

// ApplyShippedIdentities renders the shipped manifests (kubectl kustomize
// manifests/) and applies their Namespace, ServiceAccounts, RBAC and
// admission policies, as an operator's kubectl apply -k manifests/ would.
// It is idempotent; the first call per control plane does the work.
func (cp *ControlPlane) ApplyShippedIdentities(ctx context.Context) error {
	return cp.ApplyShippedIdentitiesOf(ctx, "manifests")
}

// ApplyShippedIdentitiesOf is ApplyShippedIdentities for the kustomize tree
// dir of the checkout, e.g. manifests/descheduler-deployment, whose Role
// lets the descheduler hold its Lease. It is idempotent per dir.
func (cp *ControlPlane) ApplyShippedIdentitiesOf(ctx context.Context, dir string) error {
	if cp.identitiesApplied[dir] {
		return nil
	}
	kubectl := filepath.Join(cp.BinDir, "kubectl")
	rendered, err := exec.CommandContext(ctx, kubectl, "kustomize", filepath.Join(RepoDir(), dir)).Output()
	if err != nil {
		return fmt.Errorf("kubectl kustomize %s/: %w%s", dir, err, stderrOf(err))
	}
	var kept []string
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return fmt.Errorf("kubectl kustomize %s/: %w", dir, err)
		}
		// The descheduler's state ConfigMap comes with its rights: they
		// allow it to update that ConfigMap, not to create it.
		if identityKinds[meta.Kind] || meta.Kind == "ConfigMap" && meta.Metadata.Name == DeschedulerStateConfigMap {
			kept = append(kept, doc)
		}
	}
	cmd := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.KubeconfigPath, "apply", "--server-side", "--force-conflicts", "-f", "-")
	cmd.Stdin = strings.NewReader(strings.Join(kept, "\n---\n"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("applying the shipped identities of %s/: %w\n%s", dir, err, out)
	}
	if cp.identitiesApplied == nil {
		cp.identitiesApplied = map[string]bool{}
	}
	cp.identitiesApplied[dir] = true
	return nil
}

// ServiceAccountKubeconfig writes a kubeconfig for this control plane that
// authenticates with a TokenRequest token of the ServiceAccount ns/name,
// bound to pod unless pod is nil (a pod-bound token names the pod's node in
// the user's extra, as the kubelet's projected tokens do). The token lasts
// a day, longer than any test or demo; the API server keeps its signing
// key across restarts, so it stays valid through RestartAPIServer.
func (cp *ControlPlane) ServiceAccountKubeconfig(ctx context.Context, ns, name string, pod *corev1.Pod) (string, error) {
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](24 * 3600)}}
	file := name
	if pod != nil {
		req.Spec.BoundObjectRef = &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
		file += "-" + pod.Name
	}
	tr, err := cp.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, req, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount %s/%s: %w", ns, name, err)
	}
	cfg, err := clientcmd.LoadFromFile(cp.KubeconfigPath)
	if err != nil {
		return "", err
	}
	for _, auth := range cfg.AuthInfos {
		auth.Token = tr.Status.Token
	}
	path := filepath.Join(cp.Dir, file+".kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}

// ShippedIdentityKubeconfig applies the shipped identities and returns a
// kubeconfig with a token of the shipped ServiceAccount name in
// headroom-system (headroom-scheduler, headroom-descheduler,
// headroom-node-agent), not bound to a pod.
func (cp *ControlPlane) ShippedIdentityKubeconfig(ctx context.Context, name string) (string, error) {
	if err := cp.ApplyShippedIdentities(ctx); err != nil {
		return "", err
	}
	return cp.ServiceAccountKubeconfig(ctx, Namespace, name, nil)
}

func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok && len(bytes.TrimSpace(ee.Stderr)) > 0 {
		return "\n" + string(ee.Stderr)
	}
	return ""
}
