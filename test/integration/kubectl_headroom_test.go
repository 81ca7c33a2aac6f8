package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// kubectlHeadroom runs `kubectl headroom ARGS` against the control plane:
// kubectl finds bin/kubectl-headroom on PATH, as it finds any plugin, and
// passes it the arguments. It returns the plugin's output.
func kubectlHeadroom(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, args ...string) string {
	t.Helper()
	args = append(append([]string{"headroom"}, args...), "--kubeconfig", cp.KubeconfigPath)
	cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "PATH="+cp.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestKubectlHeadroomAgreesWithScheduler runs headroom-scheduler with the
// shipped configuration on three kwok nodes: roomy, tight (room for one
// default pod above NodePIDs' floor) and starved (under the floor). `kubectl
// headroom nodes` must show the PID figures NodePIDs works from, and
// `kubectl headroom explain node` must say that a pod fails Filter on
// starved and passes on roomy; the scheduler must then decide the same: a
// pod that prefers starved lands elsewhere, and one that may only go to
// starved is refused with NodePIDs' reason.
func TestKubectlHeadroomAgreesWithScheduler(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	sample := time.Now().Add(-30 * time.Second).UTC().Truncate(time.Second)
	const capacity = 32768
	floor := floorOf(capacity)
	stats := map[string]pidstats.NodeStats{
		"roomy":   {Capacity: capacity, Used: 8000, SampledAt: sample},
		"tight":   {Capacity: capacity, Reserved: 1000, Used: capacity - 1000 - floor - 150, SampledAt: sample},
		"starved": {Capacity: capacity, Used: capacity - floor + 100, SampledAt: sample},
	}
	for name, s := range stats {
		pidNode(ctx, t, cp, name, &s)
	}
	if _, err := cp.StartScheduler(ctx, repoFile(t, "manifests/scheduler/scheduler-config.yaml")); err != nil {
		t.Fatal(err)
	}

	// nodes: the least PID headroom first, with NodePIDs' figures.
	out := kubectlHeadroom(ctx, t, cp, "nodes", "--sort-by", "pid-free")
	t.Logf("kubectl headroom nodes --sort-by pid-free:\n%s", out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 {
		t.Fatalf("nodes printed %d lines, want a header and 3 rows:\n%s", len(lines), out)
	}
	for i, name := range []string{"starved", "tight", "roomy"} {
		cells := strings.Fields(lines[i+1])
		s := stats[name]
		want := []string{name, strconv.FormatInt(s.Capacity, 10), strconv.FormatInt(s.Allocatable(), 10),
			strconv.FormatInt(s.Used, 10), strconv.FormatInt(s.Allocatable()-s.Used, 10)}
		if len(cells) < len(want) || strings.Join(cells[:len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("row %d: %v, want it to start with %v\n%s", i, cells, want, out)
		}
	}

	// explain node: the verdicts of NodePIDs' Filter for a pod without a
	// PIDs annotation (the default 100 PIDs).
	probe := newPod("probe", "headroom-scheduler", nil, nil, nil)
	probe.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	podFile := writeYAML(t, probe)
	for node, want := range map[string]string{
		"starved": "Filter: fails: NodePIDs: node(s) had too few free PIDs",
		"tight":   "Filter: passes",
		"roomy":   "Filter: passes",
	} {
		if out := kubectlHeadroom(ctx, t, cp, "explain", "node", node, "--pod-file", podFile); !strings.Contains(out, want) {
			t.Errorf("explain node %s lacks %q:\n%s", node, want, out)
		}
	}
	out = kubectlHeadroom(ctx, t, cp, "explain", "node", "roomy", "--pod-file", podFile)
	t.Logf("kubectl headroom explain node roomy --pod-file probe.yaml:\n%s", out)
	if !strings.Contains(out, "nodes that pass Filter: 2 of 3") || !strings.Contains(out, "rank 1 of 2 (best: roomy,") {
		t.Errorf("explain node roomy: want roomy ranked first of the 2 nodes that pass:\n%s", out)
	}

	// nodes with the pod: the same verdicts, roomy's score the highest.
	out = kubectlHeadroom(ctx, t, cp, "nodes", "--pod-file", podFile, "--sort-by", "score", "--no-headers")
	t.Logf("kubectl headroom nodes --pod-file probe.yaml --sort-by score:\n%s", out)
	var verdicts []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		cells := strings.Fields(line)
		verdicts = append(verdicts, cells[0]+" "+cells[len(cells)-2])
	}
	if got, want := strings.Join(verdicts, ", "), "roomy passes, tight passes, starved fails(NodePIDs)"; got != want {
		t.Errorf("nodes --pod-file: %s, want %s\n%s", got, want, out)
	}

	// The scheduler decides the same. A pod preferring starved lands on a
	// node that passes...
	prefers := probe.DeepCopy()
	prefers.Name = "prefers-starved"
	prefers.Spec.Affinity = nodeAffinity(false, "starved")
	// ...and a pod that may only go to starved is refused with NodePIDs'
	// reason.
	only := probe.DeepCopy()
	only.Name = "only-starved"
	only.Spec.Affinity = nodeAffinity(true, "starved")
	for _, p := range []*corev1.Pod{prefers, only} {
		if _, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, prefers.Name); node == "starved" {
		t.Errorf("pod preferring starved bound to starved, which kubectl headroom says fails Filter")
	}
	waitEvent(ctx, t, cp.Client, only.Name, "FailedScheduling", "too few free PIDs")
	// explain node --pod, on the pending pod itself, gives the same reason.
	if out := kubectlHeadroom(ctx, t, cp, "explain", "node", "starved", "--pod", only.Name, "-n", metav1.NamespaceDefault); !strings.Contains(out, "Filter: fails: NodePIDs: node(s) had too few free PIDs") {
		t.Errorf("explain node starved --pod %s:\n%s", only.Name, out)
	}
}

// nodeAffinity requires (or, with weight 100, prefers) the named nodes.
func nodeAffinity(required bool, nodes ...string) *corev1.Affinity {
	term := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
		Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: nodes,
	}}}
	if required {
		return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term}},
		}}
	}
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: term}},
	}}
}

// writeYAML writes obj to a temporary YAML file and returns its path.
func writeYAML(t *testing.T, obj any) string {
	t.Helper()
	data, err := yaml.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "object.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
