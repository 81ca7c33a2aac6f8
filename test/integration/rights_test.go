package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/pkg/ipstarved"
	"github.com/headroom-k8s/headroom/pkg/nodeagent"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// rightsNamespaces are where effective rights are listed: an ordinary
// namespace, Headroom's own and kube-system (where the scheduler reads the
// authentication ConfigMap).
var rightsNamespaces = []string{"default", controlplane.Namespace, "kube-system"}

// TestShippedRights lists what each shipped ServiceAccount may do, bound
// through the shipped RBAC (kubectl auth can-i --list, a
// SelfSubjectRulesReview, with a TokenRequest token of the ServiceAccount
// itself), and compares it with the reviewed list in
// testdata/rights/<name>.txt (the descheduler twice: as the CronJob runs,
// and with the Deployment overlay's leader-election Role), so a widened (or narrowed) role fails here
// and is reviewed. HEADROOM_UPDATE_RIGHTS=1 rewrites the lists.
//
// It also checks the few rights that matter most by name.
func TestShippedRights(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// What the API server's own bootstrap policy gives every ServiceAccount
	// (discovery, self reviews, and whatever a release adds for the group
	// system:serviceaccounts: v1.37 adds the ClusterTrustBundles) is not
	// Headroom's grant: the lists hold what a ServiceAccount without any
	// binding lacks, so that they review Headroom's RBAC on every supported
	// API server alike.
	baseline := baselineRights(ctx, t, cp)

	// Each identity as the base tree ships it, then the descheduler with the
	// Deployment overlay's leader-election Role added (listed last: the
	// overlay widens the same ServiceAccount).
	for _, id := range []struct{ sa, overlay, list string }{
		{"headroom-scheduler", "", "headroom-scheduler"},
		{"headroom-descheduler", "", "headroom-descheduler"},
		{"headroom-node-agent", "", "headroom-node-agent"},
		{"headroom-descheduler", "manifests/descheduler-deployment", "headroom-descheduler-deployment"},
	} {
		sa := id.sa
		t.Run(id.list, func(t *testing.T) {
			kubeconfig := shippedIdentity(ctx, t, cp, sa)
			if id.overlay != "" {
				if err := cp.ApplyShippedIdentitiesOf(ctx, id.overlay); err != nil {
					t.Fatal(err)
				}
			}
			var got strings.Builder
			for _, ns := range rightsNamespaces {
				got.WriteString("# namespace " + ns + "\n")
				for _, line := range canIList(ctx, t, cp, kubeconfig, ns) {
					if !baseline[ns][line] {
						got.WriteString(line + "\n")
					}
				}
			}
			path := filepath.Join(controlplane.RepoDir(), "test", "integration", "testdata", "rights", id.list+".txt")
			if os.Getenv("HEADROOM_UPDATE_RIGHTS") != "" {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (HEADROOM_UPDATE_RIGHTS=1 writes it for review)", err)
			}
			if got.String() != string(want) {
				t.Errorf("effective rights of %s differ from the reviewed %s:\n%s\nReview the change; HEADROOM_UPDATE_RIGHTS=1 rewrites the list.",
					sa, path, lineDiff(string(want), got.String()))
			}
		})
	}

	// The rights that matter most, by name.
	for _, tc := range []struct {
		sa, ns string
		args   []string
		want   bool
	}{
		{"headroom-descheduler", "default", []string{"create", "pods", "--subresource=eviction"}, true},
		{"headroom-descheduler", "default", []string{"delete", "pods"}, false},
		{"headroom-descheduler", "default", []string{"update", "pods"}, false},
		{"headroom-descheduler", "default", []string{"patch", "nodes"}, false},
		// The ipStarved trigger caches the kubelet's sandbox failures: one
		// List and one Watch with a field selector on the reason, instead
		// of a List per waiting pod and run.
		{"headroom-descheduler", "default", []string{"list", "events"}, true},
		{"headroom-descheduler", "default", []string{"watch", "events"}, true},
		// RelieveNodePressure's Events: created, their count patched.
		{"headroom-descheduler", "default", []string{"create", "events"}, true},
		{"headroom-descheduler", "default", []string{"patch", "events"}, true},
		{"headroom-descheduler", "default", []string{"delete", "events"}, false},
		// RelieveNodePressure's record: a merge patch of a node's key after
		// each eviction, on that ConfigMap alone; never a whole Update.
		{"headroom-descheduler", controlplane.Namespace, []string{"patch", "configmaps/" + controlplane.DeschedulerStateConfigMap}, true},
		{"headroom-descheduler", controlplane.Namespace, []string{"update", "configmaps/" + controlplane.DeschedulerStateConfigMap}, false},
		{"headroom-descheduler", controlplane.Namespace, []string{"patch", "configmaps/other"}, false},
		{"headroom-descheduler", controlplane.Namespace, []string{"create", "configmaps"}, false},
		{"headroom-scheduler", "default", []string{"create", "pods", "--subresource=binding"}, true},
		{"headroom-scheduler", controlplane.Namespace, []string{"update", "leases/headroom-scheduler"}, true},
		{"headroom-scheduler", controlplane.Namespace, []string{"update", "leases/other"}, false},
		{"headroom-scheduler", "kube-system", []string{"update", "leases/kube-scheduler"}, false},
		{"headroom-scheduler", "kube-system", []string{"get", "leases/kube-scheduler"}, false},
		{"headroom-scheduler", "kube-system", []string{"create", "leases"}, false},
		{"headroom-scheduler", "default", []string{"create", "leases"}, false},
		{"headroom-scheduler", "default", []string{"delete", "pods"}, true}, // preemption: kube-scheduler's own role
		{"headroom-scheduler", "default", []string{"patch", "nodes"}, false},
		// Deployment mode (the overlay is applied above): its own Lease only.
		{"headroom-descheduler", controlplane.Namespace, []string{"update", "leases/headroom-descheduler"}, true},
		{"headroom-descheduler", controlplane.Namespace, []string{"update", "leases/headroom-scheduler"}, false},
		{"headroom-descheduler", "kube-system", []string{"create", "leases"}, false},
		{"headroom-node-agent", "default", []string{"patch", "nodes"}, true},
		{"headroom-node-agent", "default", []string{"list", "nodes"}, false},
		{"headroom-node-agent", "default", []string{"get", "pods"}, false},
		{"headroom-node-agent", "default", []string{"patch", "nodes", "--subresource=status"}, false},
	} {
		args := append([]string{"--kubeconfig", shippedIdentity(ctx, t, cp, tc.sa), "auth", "can-i", "-n", tc.ns}, tc.args...)
		out, _ := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), args...).Output()
		if got := strings.TrimSpace(string(out)) == "yes"; got != tc.want {
			t.Errorf("%s: can-i %s in %s = %q, want %v", tc.sa, strings.Join(tc.args, " "), tc.ns, strings.TrimSpace(string(out)), tc.want)
		}
	}
}

// canIList returns kubectl auth can-i --list in ns for kubeconfig's user:
// its header, then one rule a line, columns separated by one space, sorted,
// without repeats (rules of several roles come in no fixed order).
// baselineRights returns, per namespace of rightsNamespaces, the lines of
// kubectl auth can-i --list of a ServiceAccount bound to nothing (the
// header aside).
func baselineRights(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane) map[string]map[string]bool {
	t.Helper()
	if err := cp.ApplyShippedIdentities(ctx); err != nil {
		t.Fatal(err)
	}
	const name = "headroom-rights-baseline"
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: controlplane.Namespace, Name: name}}
	if _, err := cp.Client.CoreV1().ServiceAccounts(controlplane.Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := cp.ServiceAccountKubeconfig(ctx, controlplane.Namespace, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]bool{}
	for _, ns := range rightsNamespaces {
		lines := canIList(ctx, t, cp, kubeconfig, ns)
		out[ns] = map[string]bool{}
		for _, line := range lines[1:] {
			out[ns][line] = true
		}
	}
	return out
}

func canIList(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, kubeconfig, ns string) []string {
	t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig", kubeconfig,
		"auth", "can-i", "--list", "-n", ns).Output()
	if err != nil {
		t.Fatalf("kubectl auth can-i --list -n %s: %v%s", ns, err, stderr(err))
	}
	var lines []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		line = strings.Join(strings.Fields(line), " ")
		// The verbs, the last column, in a fixed order: kubectl merges
		// them in the order the authorizer visits the bindings, which
		// varies from one API server start to the next.
		if i := strings.LastIndex(line, "["); i >= 0 && strings.HasSuffix(line, "]") {
			verbs := strings.Fields(line[i+1 : len(line)-1])
			slices.Sort(verbs)
			line = line[:i] + "[" + strings.Join(verbs, " ") + "]"
		}
		lines = append(lines, line)
	}
	rules := lines[1:]
	slices.Sort(rules)
	return append(lines[:1], slices.Compact(rules)...)
}

func stderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return "\n" + string(ee.Stderr)
	}
	return ""
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var out []string
	for _, l := range w {
		if !slices.Contains(g, l) {
			out = append(out, "- "+l)
		}
	}
	for _, l := range g {
		if !slices.Contains(w, l) {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// TestNodeAgentAnnotationRights writes Node annotations as the shipped node
// agent's pod would (the shipped identity, a token bound to its pod on
// node-a): the admission policy lets it write every headroom.dev/ key of
// nodeagent.AnnotationCaps at its cap, and refuses a key not in the list
// and a value one byte longer (or as many characters, in more bytes).
func TestNodeAgentAnnotationRights(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := cp.ApplyShippedIdentities(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := cp.CreateNode(ctx, n, resources("4", "16Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}
	pod := agentPod(ctx, t, cp.Client, "node-a")
	agent := kubernetes.NewForConfigOrDie(restConfig(t, serviceAccountKubeconfig(ctx, t, cp, controlplane.Namespace, "headroom-node-agent", pod)))
	waitPolicyActive(ctx, t, agent, "node-b")

	patch := func(annotations map[string]any) error {
		body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = agent.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType, body, metav1.PatchOptions{})
		return err
	}
	refused := func(t *testing.T, err error, want string) {
		t.Helper()
		if err == nil || !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v, want a refusal saying %q", err, want)
		}
	}
	var keys []string
	for k := range nodeagent.AnnotationCaps {
		keys = append(keys, k)
	}
	slices.Sort(keys)

	t.Run("every key at its cap", func(t *testing.T) {
		all := map[string]any{}
		for _, k := range keys {
			all[k] = strings.Repeat("9", nodeagent.AnnotationCaps[k])
		}
		if err := patch(all); err != nil {
			t.Fatalf("refused: %v", err)
		}
		node, err := cp.Client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if got := len(node.Annotations[k]); got != nodeagent.AnnotationCaps[k] {
				t.Errorf("%s holds %d bytes, want %d", k, got, nodeagent.AnnotationCaps[k])
			}
		}
		// Each key alone, at its cap, with another value.
		for _, k := range keys {
			if err := patch(map[string]any{k: strings.Repeat("1", nodeagent.AnnotationCaps[k])}); err != nil {
				t.Errorf("%s at its cap of %d bytes refused: %v", k, nodeagent.AnnotationCaps[k], err)
			}
		}
	})
	t.Run("one byte over the cap", func(t *testing.T) {
		for _, k := range keys {
			err := patch(map[string]any{k: strings.Repeat("1", nodeagent.AnnotationCaps[k]+1)})
			refused(t, err, fmt.Sprintf("%s has %d bytes, at most %d", k, nodeagent.AnnotationCaps[k]+1, nodeagent.AnnotationCaps[k]))
		}
	})
	t.Run("as many characters, more bytes", func(t *testing.T) {
		k := pidstats.AnnotationPIDPods
		refused(t, patch(map[string]any{k: strings.Repeat("é", nodeagent.AnnotationCaps[k])}), k+" has ")
	})
	t.Run("unknown key", func(t *testing.T) {
		refused(t, patch(map[string]any{"headroom.dev/foo": "1"}),
			"may only write the headroom.dev/ annotations it publishes, not headroom.dev/foo")
		// Along with a key it may write: the whole patch is refused.
		refused(t, patch(map[string]any{pidstats.AnnotationUsed: "7", "headroom.dev/pid-used-extra": "7"}), "headroom.dev/pid-used-extra")
	})
	t.Run("removals", func(t *testing.T) {
		// The agent withdraws pid-pods when it cannot measure every pod.
		if err := patch(map[string]any{pidstats.AnnotationPIDPods: nil}); err != nil {
			t.Errorf("removing %s refused: %v", pidstats.AnnotationPIDPods, err)
		}
		// Another headroom.dev/ key someone else wrote stays: the agent may
		// neither remove it nor change it, and writes its own beside it.
		if _, err := cp.Client.CoreV1().Nodes().Patch(ctx, "node-a", types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"headroom.dev/note":"set by an admin"}}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		refused(t, patch(map[string]any{"headroom.dev/note": nil}), "not headroom.dev/note")
		refused(t, patch(map[string]any{"headroom.dev/note": "x"}), "not headroom.dev/note")
		if err := patch(map[string]any{pidstats.AnnotationUsed: "8"}); err != nil {
			t.Errorf("writing %s beside headroom.dev/note refused: %v", pidstats.AnnotationUsed, err)
		}
	})
}

// TestLeaseRights: under the shipped identities (manifests/ with the
// descheduler-deployment overlay), headroom-scheduler and
// headroom-descheduler each create, get and update their own Lease in
// headroom-system, as leader election does. Their leader-election Roles
// let them create any Lease there (RBAC cannot confine create to a name);
// their admission policies refuse every other name, the other component's
// included, and would refuse updating or deleting another Lease were a
// wider role to grant it. The scheduler cannot touch the default
// scheduler's Lease kube-system/kube-scheduler, nor create Leases outside
// its namespace.
func TestLeaseRights(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The overlay brings the descheduler's Lease rights, not the namespace.
	for _, dir := range []string{"manifests", "manifests/descheduler-deployment"} {
		if err := cp.ApplyShippedIdentitiesOf(ctx, dir); err != nil {
			t.Fatal(err)
		}
	}
	lease := func(ns, name string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("lease-rights-test")}}
	}
	forbidden := func(t *testing.T, what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: err = %v, want forbidden", what, err)
		}
	}
	// refusedByPolicy: the request passed RBAC and the policy refused it.
	refusedByPolicy := func(t *testing.T, what, policy string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'") {
			t.Errorf("%s: err = %v, want a refusal by the ValidatingAdmissionPolicy %s", what, err, policy)
		}
	}

	components := []struct{ sa, other string }{
		{"headroom-scheduler", "headroom-descheduler"},
		{"headroom-descheduler", "headroom-scheduler"},
	}
	leasesOf := map[string]coordinationv1client.LeaseInterface{}
	for _, c := range components {
		client := kubernetes.NewForConfigOrDie(restConfig(t, shippedIdentity(ctx, t, cp, c.sa)))
		leasesOf[c.sa] = client.CoordinationV1().Leases(controlplane.Namespace)
		waitLeasePolicyActive(ctx, t, leasesOf[c.sa], c.sa+"-leader-election")
	}

	for _, c := range components {
		t.Run(c.sa, func(t *testing.T) {
			leases, policy := leasesOf[c.sa], c.sa+"-leader-election"
			// Its own Lease, as leader election holds it.
			if _, err := leases.Create(ctx, lease(controlplane.Namespace, c.sa), metav1.CreateOptions{}); err != nil {
				t.Fatalf("creating its own Lease: %v", err)
			}
			got, err := leases.Get(ctx, c.sa, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("getting its own Lease: %v", err)
			}
			got.Spec.LeaseTransitions = ptr.To[int32](1)
			if _, err := leases.Update(ctx, got, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("updating its own Lease: %v", err)
			}

			// Any other name of its namespace: RBAC lets the create through,
			// the policy refuses it and says which Lease it may write.
			for _, name := range []string{c.other, "other"} {
				_, err := leases.Create(ctx, lease(controlplane.Namespace, name), metav1.CreateOptions{})
				refusedByPolicy(t, "create "+controlplane.Namespace+"/"+name, policy, err)
				if want := "may only write its own Lease " + controlplane.Namespace + "/" + c.sa + ", not " + controlplane.Namespace + "/" + name; err != nil && !strings.Contains(err.Error(), want) {
					t.Errorf("create %s: %v, want it to say %q", name, err, want)
				}
			}
			generated := lease(controlplane.Namespace, "")
			generated.GenerateName = c.sa + "-"
			_, err = leases.Create(ctx, generated, metav1.CreateOptions{})
			refusedByPolicy(t, "create by generateName "+generated.GenerateName, policy, err)
			_, err = leases.Get(ctx, c.other, metav1.GetOptions{})
			forbidden(t, "get "+c.other, err)
		})
	}

	// Should a wider role grant more, the policy still confines every
	// Lease write to the component's own Lease.
	t.Run("widened role", func(t *testing.T) {
		const widened = "lease-rights-widened"
		if _, err := cp.Client.RbacV1().Roles(controlplane.Namespace).Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: widened},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{coordinationv1.GroupName}, Resources: []string{"leases"}, Verbs: []string{"get", "update", "patch", "delete"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: widened},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: widened},
		}
		for _, c := range components {
			rb.Subjects = append(rb.Subjects, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: controlplane.Namespace, Name: c.sa})
		}
		if _, err := cp.Client.RbacV1().RoleBindings(controlplane.Namespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, c := range components {
			leases, policy := leasesOf[c.sa], c.sa+"-leader-election"
			// The get shows the grant is there, once the API server's RBAC
			// cache has the new binding (its informer takes a moment).
			var theirs *coordinationv1.Lease
			err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 15*time.Second, true, func(ctx context.Context) (bool, error) {
				var err error
				theirs, err = leases.Get(ctx, c.other, metav1.GetOptions{})
				return err == nil, nil
			})
			if err != nil {
				_, err = leases.Get(ctx, c.other, metav1.GetOptions{})
				t.Fatalf("%s: get %s with the widened role: %v", c.sa, c.other, err)
			}
			theirs.Spec.HolderIdentity = ptr.To(c.sa)
			_, err = leases.Update(ctx, theirs, metav1.UpdateOptions{})
			refusedByPolicy(t, c.sa+": update "+c.other, policy, err)
			_, err = leases.Patch(ctx, c.other, types.MergePatchType, []byte(`{"spec":{"holderIdentity":"`+c.sa+`"}}`), metav1.PatchOptions{})
			refusedByPolicy(t, c.sa+": patch "+c.other, policy, err)
			err = leases.Delete(ctx, c.other, metav1.DeleteOptions{})
			refusedByPolicy(t, c.sa+": delete "+c.other, policy, err)
		}
	})

	// The default scheduler's Lease, as kube-scheduler would hold it.
	t.Run("kube-system", func(t *testing.T) {
		sched := kubernetes.NewForConfigOrDie(restConfig(t, shippedIdentity(ctx, t, cp, "headroom-scheduler")))
		theirs, err := cp.Client.CoordinationV1().Leases("kube-system").Create(ctx, lease("kube-system", "kube-scheduler"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ks := sched.CoordinationV1().Leases("kube-system")
		_, err = ks.Get(ctx, "kube-scheduler", metav1.GetOptions{})
		forbidden(t, "get kube-system/kube-scheduler", err)
		theirs.Spec.HolderIdentity = ptr.To("headroom-scheduler")
		_, err = ks.Update(ctx, theirs, metav1.UpdateOptions{})
		forbidden(t, "update kube-system/kube-scheduler", err)
		_, err = ks.Patch(ctx, "kube-scheduler", types.MergePatchType, []byte(`{"spec":{"holderIdentity":"headroom-scheduler"}}`), metav1.PatchOptions{})
		forbidden(t, "patch kube-system/kube-scheduler", err)
		_, err = ks.Create(ctx, lease("kube-system", "headroom-scheduler"), metav1.CreateOptions{})
		forbidden(t, "create a Lease in kube-system", err)
		_, err = sched.CoordinationV1().Leases("default").Create(ctx, lease("default", "x"), metav1.CreateOptions{})
		forbidden(t, "create a Lease in default", err)
	})
}

// waitLeasePolicyActive waits until the API server enforces policy on the
// Lease writes of leases' identity: a server-side dry-run create of a Lease
// not its own, which RBAC allows, is refused by the policy.
func waitLeasePolicyActive(ctx context.Context, t *testing.T, leases coordinationv1client.LeaseInterface, policy string) {
	t.Helper()
	probe := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "lease-policy-probe"}}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := leases.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'"), nil
	})
	if err != nil {
		t.Fatalf("the admission policy %s was never enforced: %v", policy, err)
	}
}

// TestShippedSchedulerRunsOnItsRights runs headroom-scheduler with the
// shipped config, leader election included, under the shipped identity:
// its ClusterRole, which leaves kube-scheduler's Lease rights out, is enough
// to take its own Lease, sync every informer of the default plugins and
// bind a pod, and the API server forbids it nothing on the way.
func TestShippedSchedulerRunsOnItsRights(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cp.CreateNode(ctx, "node-a", resources("4", "16Gi", "110"), nil); err != nil {
		t.Fatal(err)
	}
	p, err := cp.StartSchedulerWith(ctx, controlplane.SchedulerOptions{LeaderElection: true}, repoFile(t, shippedSchedulerConfig), "--v=2")
	if err != nil {
		t.Fatal(err)
	}
	pod := newPod("placed", "headroom-scheduler", nil, nil, nil)
	if _, err := cp.Client.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(ctx, t, cp.Client, pod.Namespace, pod.Name)
	if holder := leaseHolder(ctx, cp); holder == "" {
		t.Error("headroom-system/headroom-scheduler has no holder")
	}
	// Events of the binding are written asynchronously.
	time.Sleep(2 * time.Second)
	log := p.Log(1 << 22)
	if !strings.Contains(log, acquiredLease) {
		t.Errorf("the scheduler never logged %s", acquiredLease)
	}
	if lines := grepLines(log, "forbidden"); lines != "" {
		t.Errorf("the API server refused the scheduler:\n%s", lines)
	}
}

// TestKubeletEventsRights: under the shipped admission policy
// headroom-descheduler-sandbox-events, a FailedCreatePodSandBox Event, the
// ipStarved trigger's evidence, can be written only by the kubelet of the
// node it names. A tenant's ServiceAccount that may create and patch
// Events in its namespace is refused a forged one through either Events
// API, refused turning its own Event into one, and refused changing a
// kubelet's; its other Events pass. Node X (system:node:X, by
// impersonation: see nodeIdentity) may create and update one naming X, not
// one naming Y, and node Y may not take X's over.
func TestKubeletEventsRights(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := cp.ApplyShippedIdentities(ctx); err != nil {
		t.Fatal(err)
	}
	const ns, policy = "tenant", "headroom-descheduler-sandbox-events"
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "app"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "events", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{"", "events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch", "get"}}}}
	if _, err := cp.Client.RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "events", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "events"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "app"}}}
	if _, err := cp.Client.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tenant := kubernetes.NewForConfigOrDie(restConfig(t, serviceAccountKubeconfig(ctx, t, cp, ns, "app", nil))).CoreV1().Events(ns)
	nodeX, nodeY := nodeIdentity(ctx, t, cp, "node-x").CoreV1().Events(ns), nodeIdentity(ctx, t, cp, "node-y").CoreV1().Events(ns)

	now := time.Now()
	// sandboxEvent is a FailedCreatePodSandBox Event as the kubelet of node
	// writes it.
	sandboxEvent := func(name, node string) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: "web", UID: "uid-web"},
			Reason:         ipstarved.ReasonFailedCreatePodSandBox, Type: corev1.EventTypeWarning,
			Message:             `Failed to create pod sandbox: plugin type="bridge" failed (add): failed to allocate for range 0: no IP addresses available in range set: 10.88.0.1-10.88.0.14`,
			Source:              corev1.EventSource{Component: ipstarved.Kubelet, Host: node},
			ReportingController: ipstarved.Kubelet, ReportingInstance: node,
			FirstTimestamp: metav1.NewTime(now), LastTimestamp: metav1.NewTime(now), Count: 1,
		}
	}
	refusedByPolicy := func(t *testing.T, what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'") {
			t.Errorf("%s: err = %v, want a refusal by the ValidatingAdmissionPolicy %s", what, err, policy)
		}
	}
	// The policy is enforced once the API server has loaded it.
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := tenant.Create(ctx, sandboxEvent("probe", "node-x"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'"), nil
	})
	if err != nil {
		t.Fatalf("the admission policy %s was never enforced: %v", policy, err)
	}

	_, err = tenant.Create(ctx, sandboxEvent("forged", "node-x"), metav1.CreateOptions{})
	refusedByPolicy(t, "the tenant creates a FailedCreatePodSandBox Event (core/v1)", err)
	_, err = kubernetes.NewForConfigOrDie(restConfig(t, serviceAccountKubeconfig(ctx, t, cp, ns, "app", nil))).EventsV1().Events(ns).Create(ctx, &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: "forged-events-api", Namespace: ns},
		EventTime:  metav1.NewMicroTime(now), ReportingController: ipstarved.Kubelet, ReportingInstance: "node-x",
		Action: "RunPodSandbox", Reason: ipstarved.ReasonFailedCreatePodSandBox, Type: corev1.EventTypeWarning,
		Regarding: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: "web", UID: "uid-web"},
		Note:      "no IP addresses available in range set",
	}, metav1.CreateOptions{})
	refusedByPolicy(t, "the tenant creates a FailedCreatePodSandBox Event (events.k8s.io/v1)", err)

	// Other Events are not the policy's.
	own := sandboxEvent("own", "node-x")
	own.Reason = "Started"
	if _, err := tenant.Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the tenant creates a Started Event: %v", err)
	}
	_, err = tenant.Patch(ctx, "own", types.MergePatchType, []byte(`{"reason":"FailedCreatePodSandBox"}`), metav1.PatchOptions{})
	refusedByPolicy(t, "the tenant turns its Event into a FailedCreatePodSandBox Event", err)

	if _, err := nodeX.Create(ctx, sandboxEvent("genuine", "node-x"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("node-x creates a FailedCreatePodSandBox Event naming node-x: %v", err)
	}
	// The kubelet's recorder patches a repeated Event's count.
	if _, err := nodeX.Patch(ctx, "genuine", types.StrategicMergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("node-x patches its Event's count: %v", err)
	}
	_, err = nodeX.Create(ctx, sandboxEvent("other-node", "node-y"), metav1.CreateOptions{})
	refusedByPolicy(t, "node-x creates a FailedCreatePodSandBox Event naming node-y", err)
	_, err = nodeY.Patch(ctx, "genuine", types.MergePatchType, []byte(`{"reportingInstance":"node-y","source":{"host":"node-y"}}`), metav1.PatchOptions{})
	refusedByPolicy(t, "node-y takes node-x's Event over", err)
	_, err = tenant.Patch(ctx, "genuine", types.MergePatchType, []byte(`{"lastTimestamp":"2099-01-01T00:00:00Z"}`), metav1.PatchOptions{})
	refusedByPolicy(t, "the tenant changes the kubelet's Event", err)
}
