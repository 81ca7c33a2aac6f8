package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

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
					got.WriteString(line + "\n")
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
		{"headroom-scheduler", "default", []string{"create", "pods", "--subresource=binding"}, true},
		{"headroom-scheduler", controlplane.Namespace, []string{"update", "leases/headroom-scheduler"}, true},
		{"headroom-scheduler", controlplane.Namespace, []string{"update", "leases/other"}, false},
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
