package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/test/controlplane"
)

// The label that opts a namespace in (and, with "disabled", a pod out).
const optInLabel = "headroom.dev/scheduler"

// TestNamespaceOptIn applies manifests/namespace-opt-in to a real API server
// (v1.36, no flags: the v1 API is served by default) and runs
// headroom-scheduler with the shipped profile. A pod created in a labelled
// namespace without a scheduler, or with an explicit default-scheduler
// (which the API server's defaulting makes indistinguishable), gets
// headroom-scheduler and is placed by it; a pod naming another scheduler, a
// pod labelled out, a DaemonSet's pod, a pod created bound, a pod in an
// unlabelled namespace, and pods in kube-system and headroom-system even
// when labelled, are left alone.
func TestNamespaceOptIn(t *testing.T) {
	// A minor that serves the policy only in v1beta1, behind its feature
	// gate, has an overlay of its own (docs/compatibility.md, "Installing
	// per minor"): its API server gets the flags it needs, and the overlay
	// is applied.
	minor, err := controlplane.APIServerMinor()
	if err != nil {
		t.Fatal(err)
	}
	optIn, opts := "namespace-opt-in", controlplane.Options{Kwok: true}
	if overlay := filepath.Join("minors", minor, "namespace-opt-in"); fileExists(filepath.Join(controlplane.RepoDir(), "manifests", overlay, "kustomization.yaml")) {
		optIn = overlay
		opts.APIServerArgs = []string{"--feature-gates=MutatingAdmissionPolicy=true", "--runtime-config=admissionregistration.k8s.io/v1beta1=true"}
	}
	cp := controlplane.StartForTest(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	if _, err := cp.CreateNode(ctx, "node-a", resources("4", "16Gi", "110"), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.StartScheduler(ctx, repoFile(t, "manifests/scheduler/scheduler-config.yaml")); err != nil {
		t.Fatal(err)
	}
	applyManifests(ctx, t, cp, optIn)

	// headroom-system exists (the scheduler's identity lives there); label it
	// and kube-system as an operator might by mistake.
	for _, ns := range []string{"opted-in", "plain", metav1.NamespaceSystem, "headroom-system"} {
		labels := map[string]string{optInLabel: "enabled"}
		if ns == "plain" {
			labels = nil
		}
		nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}
		if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, nsObj, metav1.CreateOptions{}); err != nil {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}})
			if _, perr := cp.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, patch, metav1.PatchOptions{}); perr != nil {
				t.Fatalf("namespace %s: %v; %v", ns, err, perr)
			}
		}
	}

	waitOptedIn(ctx, t, cp, "opted-in")

	optedOut := podIn("opted-in", "opted-out", "")
	optedOut.Labels = map[string]string{optInLabel: "disabled"}
	daemon := podIn("opted-in", "daemon", "")
	daemon.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "0d5e0b2c-4d7c-4a39-9a5e-1f3f6f0e8a11", Controller: ptr.To(true)}}
	prebound := podIn("opted-in", "prebound", "")
	prebound.Spec.NodeName = "node-a"
	cases := []struct {
		pod  *corev1.Pod
		want string
	}{
		{podIn("opted-in", "unnamed", ""), "headroom-scheduler"},
		{podIn("opted-in", "explicit-default", corev1.DefaultSchedulerName), "headroom-scheduler"},
		{podIn("opted-in", "other", "some-other-scheduler"), "some-other-scheduler"},
		{optedOut, corev1.DefaultSchedulerName},
		{daemon, corev1.DefaultSchedulerName},
		{prebound, corev1.DefaultSchedulerName},
		{podIn("plain", "unnamed", ""), corev1.DefaultSchedulerName},
		{podIn(metav1.NamespaceSystem, "unnamed", ""), corev1.DefaultSchedulerName},
		{podIn("headroom-system", "unnamed", ""), corev1.DefaultSchedulerName},
	}
	for _, c := range cases {
		got, err := cp.Client.CoreV1().Pods(c.pod.Namespace).Create(ctx, c.pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.SchedulerName != c.want {
			t.Errorf("pod %s/%s created with schedulerName %q, want %q", c.pod.Namespace, c.pod.Name, got.Spec.SchedulerName, c.want)
		}
	}

	for _, name := range []string{"unnamed", "explicit-default"} {
		if node := waitBound(ctx, t, cp.Client, "opted-in", name); node != "node-a" {
			t.Errorf("opted-in/%s bound to %q, want node-a", name, node)
		}
		if by := scheduledBy(ctx, t, cp, "opted-in", name); by != "headroom-scheduler" {
			t.Errorf("Scheduled Event of opted-in/%s reported by %q, want headroom-scheduler", name, by)
		}
	}
	// No other scheduler runs: the pods left alone stay unbound.
	for _, c := range cases {
		if c.want == "headroom-scheduler" || c.pod.Spec.NodeName != "" {
			continue
		}
		p, err := cp.Client.CoreV1().Pods(c.pod.Namespace).Get(ctx, c.pod.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.NodeName != "" {
			t.Errorf("pod %s/%s with schedulerName %q was bound to %s", p.Namespace, p.Name, p.Spec.SchedulerName, p.Spec.NodeName)
		}
	}
}

// podIn is newPod in namespace ns.
func podIn(ns, name, schedulerName string) *corev1.Pod {
	p := newPod(name, schedulerName, nil, nil, nil)
	p.Namespace = ns
	return p
}

// waitOptedIn waits until a pod created in ns gets schedulerName
// headroom-scheduler: the API server loads policies and bindings through an
// informer. The pods are created with dry run.
func waitOptedIn(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cp.Client.CoreV1().Pods(ns).Create(ctx, podIn(ns, "probe", ""), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false, err
		}
		return p.Spec.SchedulerName == "headroom-scheduler", nil
	})
	if err != nil {
		t.Fatalf("a pod created in namespace %s never got schedulerName headroom-scheduler: %v", ns, err)
	}
}

// TestNamespaceOptInOn135 checks docs/scheduling.md's word on Kubernetes
// 1.35 as far as kube-apiserver v1.36.3 emulating 1.35 (--emulated-version)
// can: no MutatingAdmissionPolicy API is served by default; the
// MutatingAdmissionPolicy feature gate with
// --runtime-config=admissionregistration.k8s.io/v1beta1=true serves
// v1beta1, and the policy of manifests/namespace-opt-in with apiVersion
// v1beta1 is accepted and works. The v1.36 binary's admission plugin reads
// the v1 API, which an emulated 1.35 does not serve: without
// --emulation-forward-compatible (which serves v1 beside v1beta1) that
// API server refuses every request as "not yet ready" and exits. A real
// 1.35 reads v1beta1 and needs no such flag.
func TestNamespaceOptInOn135(t *testing.T) {
	out, err := exec.Command(filepath.Join(controlplane.DefaultBinDir(), "kubectl"), "kustomize", repoPath(t, "manifests/namespace-opt-in")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize manifests/namespace-opt-in: %v", err)
	}
	v1beta1 := strings.ReplaceAll(string(out), "apiVersion: admissionregistration.k8s.io/v1\n", "apiVersion: admissionregistration.k8s.io/v1beta1\n")
	if strings.Count(v1beta1, "admissionregistration.k8s.io/v1beta1") != 2 {
		t.Fatalf("want two objects of admissionregistration.k8s.io/v1 in manifests/namespace-opt-in:\n%s", out)
	}
	served := func(ctx context.Context, cp *controlplane.ControlPlane) []string {
		var gvs []string
		for _, gv := range []string{"admissionregistration.k8s.io/v1", "admissionregistration.k8s.io/v1beta1"} {
			list, err := cp.Client.Discovery().ServerResourcesForGroupVersion(gv)
			if err != nil {
				continue
			}
			for _, r := range list.APIResources {
				if r.Name == "mutatingadmissionpolicies" {
					gvs = append(gvs, gv)
				}
			}
		}
		return gvs
	}

	t.Run("no flags", func(t *testing.T) {
		cp := controlplane.StartForTest(t, controlplane.Options{APIServerArgs: []string{"--emulated-version=1.35"}})
		if gvs := served(context.Background(), cp); len(gvs) != 0 {
			t.Errorf("emulating 1.35 without flags, mutatingadmissionpolicies are served in %v", gvs)
		}
	})
	t.Run("feature gate and runtime-config", func(t *testing.T) {
		args := []string{"--emulated-version=1.35", "--feature-gates=MutatingAdmissionPolicy=true", "--runtime-config=admissionregistration.k8s.io/v1beta1=true"}
		// Only a newer binary emulates: 1.35's own refuses the flag.
		if minor, err := controlplane.APIServerMinor(); err != nil {
			t.Fatal(err)
		} else if minor != "1.35" {
			args = append(args, "--emulation-forward-compatible=true")
		}
		cp := controlplane.StartForTest(t, controlplane.Options{APIServerArgs: args})
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if gvs := served(ctx, cp); !slices.Contains(gvs, "admissionregistration.k8s.io/v1beta1") {
			t.Errorf("mutatingadmissionpolicies served in %v, want v1beta1", gvs)
		}
		apply := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig", cp.KubeconfigPath, "apply", "-f", "-")
		apply.Stdin = strings.NewReader(v1beta1)
		if out, err := apply.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply of the v1beta1 policy: %v\n%s", err, out)
		}
		for ns, labels := range map[string]map[string]string{"opted-in": {optInLabel: "enabled"}, "plain": nil} {
			if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		waitOptedIn(ctx, t, cp, "opted-in")
		p, err := cp.Client.CoreV1().Pods("plain").Create(ctx, podIn("plain", "app", ""), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.SchedulerName != corev1.DefaultSchedulerName {
			t.Errorf("pod of an unlabelled namespace created with schedulerName %q", p.Spec.SchedulerName)
		}
	})
}

// scheduledBy is the reportingController of the pod's Scheduled Event.
func scheduledBy(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, ns, name string) string {
	t.Helper()
	var by string
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		events, err := cp.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err
		}
		for _, e := range events.Items {
			if e.Reason == "Scheduled" {
				by = e.ReportingController
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no Scheduled Event for %s/%s: %v", ns, name, err)
	}
	return by
}

// TestChartNamespaceOptIn: namespaceOptIn.enabled renders the policy and
// binding of manifests/namespace-opt-in, field by field, with the release
// namespace in place of headroom-system, and passes helm lint --strict; off
// by default.
func TestChartNamespaceOptIn(t *testing.T) {
	const (
		policyKey  = "MutatingAdmissionPolicy headroom-namespace-opt-in"
		bindingKey = "MutatingAdmissionPolicyBinding headroom-namespace-opt-in"
	)
	defaults := renderChart(t)
	for _, key := range []string{policyKey, bindingKey} {
		if _, ok := defaults[key]; ok {
			t.Errorf("%s rendered by default", key)
		}
	}
	if !bytes.Equal(repoFile(t, "manifests/namespace-opt-in/mutating-admission-policy.yaml"),
		repoFile(t, filepath.Join(chartDir, "files/namespace-opt-in-policy.yaml"))) {
		t.Errorf("%s/files/namespace-opt-in-policy.yaml differs from manifests/namespace-opt-in/mutating-admission-policy.yaml: run hack/update-chart.sh", chartDir)
	}

	enabled := renderChart(t, "--set", "namespaceOptIn.enabled=true")
	rendered := map[string]object{}
	for _, key := range []string{policyKey, bindingKey} {
		if o, ok := enabled[key]; ok {
			rendered[key] = o
		}
	}
	compareObjects(t, renderKustomizeDir(t, "manifests/namespace-opt-in"), rendered)

	if out, err := helmCmd("lint", "--strict", repoPath(t, chartDir), "--namespace", chartNS, "--set", "namespaceOptIn.enabled=true"); err != nil || !strings.Contains(out, "0 chart(s) failed") {
		t.Errorf("helm lint --strict with namespaceOptIn.enabled: %v\n%s", err, out)
	}

	other := renderChart(t, "--set", "namespaceOptIn.enabled=true", "--namespace", "headroom-elsewhere")
	// Read unstructured: the chart renders v1 or v1beta1 by the cluster's
	// minor (the fields are the same), and k8s.io/api has no v1 type
	// before 1.36, while this test builds for every minor.
	expressions, _, err := unstructured.NestedSlice(other[policyKey], "spec", "matchConstraints", "namespaceSelector", "matchExpressions")
	if err != nil || len(expressions) == 0 {
		t.Fatalf("%s: no namespaceSelector.matchExpressions (%v)", policyKey, err)
	}
	excluded, _, _ := unstructured.NestedStringSlice(expressions[0].(map[string]any), "values")
	if len(excluded) != 2 || excluded[0] != metav1.NamespaceSystem || excluded[1] != "headroom-elsewhere" {
		t.Errorf("policy of a release in headroom-elsewhere excludes namespaces %v, want [kube-system headroom-elsewhere]", excluded)
	}
}
