package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/headroom-k8s/headroom/test/kubectlout"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/apis/kubectl/v1alpha1"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// kubectlHeadroom runs `kubectl headroom ARGS` against the control plane:
// kubectl finds bin/kubectl-headroom on PATH, as it finds any plugin, and
// passes it the arguments. It returns what the plugin printed on stdout.
func kubectlHeadroom(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, args ...string) string {
	t.Helper()
	out, _ := kubectlHeadroomStreams(ctx, t, cp, args...)
	return out
}

// kubectlHeadroomStreams is kubectlHeadroom, returning stderr too (where
// the plugin says which configuration it used).
func kubectlHeadroomStreams(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, args ...string) (string, string) {
	t.Helper()
	args = append(append([]string{"headroom"}, args...), "--kubeconfig", cp.KubeconfigPath)
	return runKubectl(ctx, t, cp, args...)
}

// runKubectl runs bin/kubectl with bin/ first on PATH (for its plugins)
// and returns its stdout and stderr.
func runKubectl(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, args ...string) (string, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "PATH="+cp.BinDir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
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

// TestKubectlHeadroomReadsTheClusterConfiguration applies the shipped
// manifests (kubectl apply -k manifests/; nothing runs without a
// controller manager, the objects are what matters) and shows that kubectl
// headroom judges with the configuration the cluster's headroom-scheduler
// and headroom-descheduler mount, not the one built into it: raising
// NodePIDs' minFreePercent from 5 to 10 in the scheduler's ConfigMap turns
// "tight" from passing Filter to failing it, and raising
// RelieveNodePressure's PID threshold from 95 to 96 % in the descheduler's
// ConfigMap takes "starved" (95.3 % used) out of its plan. Before the
// manifests are applied it says it falls back to the built-in default. The
// typed output (-o json, -o name, -l) and kubectl's own completion of the
// plugin (kubectl_complete-headroom) work through kubectl.
func TestKubectlHeadroomReadsTheClusterConfiguration(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	sample := time.Now().Add(-30 * time.Second).UTC().Truncate(time.Second)
	const capacity = 32768
	floor := floorOf(capacity) // 5 % of capacity: 1638
	for name, s := range map[string]pidstats.NodeStats{
		"roomy":   {Capacity: capacity, Used: 8000, SampledAt: sample},
		"tight":   {Capacity: capacity, Used: capacity - floor - 150, SampledAt: sample},
		"starved": {Capacity: capacity, Used: capacity - floor + 100, SampledAt: sample},
	} {
		pidNode(ctx, t, cp, name, &s)
	}
	probe := newPod("probe", "headroom-scheduler", nil, nil, nil)
	probe.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
	podFile := writeYAML(t, probe)

	// Nothing installed: the built-in default, and a note that says why.
	out, stderr := kubectlHeadroomStreams(ctx, t, cp, "explain", "node", "tight", "--pod-file", podFile)
	if !strings.Contains(stderr, `Note: the running headroom-scheduler's configuration could not be read (deployments.apps "headroom-scheduler" not found)`) ||
		!strings.Contains(out, "Filter: passes") {
		t.Errorf("without Headroom installed:\nstderr: %s\n%s", stderr, out)
	}

	runKubectl(ctx, t, cp, "--kubeconfig", cp.KubeconfigPath, "apply", "-k", repoPath(t, "manifests"))
	// The ConfigMaps the shipped workloads mount, found as an operator
	// would: through the workloads' volumes.
	d, err := cp.Client.AppsV1().Deployments("headroom-system").Get(ctx, "headroom-scheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	schedCM := d.Spec.Template.Spec.Volumes[0].ConfigMap.Name
	cj, err := cp.Client.BatchV1().CronJobs("headroom-system").Get(ctx, "headroom-descheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var policyCM string
	for _, v := range cj.Spec.JobTemplate.Spec.Template.Spec.Volumes {
		if v.Name == "policy" {
			policyCM = v.ConfigMap.Name
		}
	}
	if !strings.HasPrefix(schedCM, "headroom-scheduler-config-") || !strings.HasPrefix(policyCM, "headroom-descheduler-policy-") {
		t.Fatalf("mounted ConfigMaps %q and %q", schedCM, policyCM)
	}

	// The shipped configuration, now read from the cluster: the same
	// verdict, and the output names the ConfigMap.
	out, stderr = kubectlHeadroomStreams(ctx, t, cp, "explain", "node", "tight", "--pod-file", podFile)
	source := "ConfigMap headroom-system/" + schedCM + " (key scheduler-config.yaml, mounted by Deployment headroom-system/headroom-scheduler)"
	if !strings.Contains(stderr, `Using profile "headroom-scheduler" of `+source) || strings.Contains(stderr, "Note:") ||
		!strings.Contains(out, "of "+source) || !strings.Contains(out, "Filter: passes") {
		t.Errorf("with the shipped ConfigMap:\nstderr: %s\n%s", stderr, out)
	}
	out, stderr = kubectlHeadroomStreams(ctx, t, cp, "evictions", "starved")
	policySource := "ConfigMap headroom-system/" + policyCM + " (key policy.yaml, mounted by CronJob headroom-system/headroom-descheduler)"
	if !strings.Contains(stderr, "Using the DeschedulerPolicy of "+policySource) || !strings.Contains(out, "above threshold") {
		t.Errorf("evictions starved with the shipped policy:\nstderr: %s\n%s", stderr, out)
	}
	// -o json is the documented NodeEvictionPlan and says what the table
	// says: no run has seen starved's pressure yet, so the descheduler waits.
	plan := kubectlout.DecodeStrict[v1alpha1.NodeEvictionPlan](t, kubectlHeadroom(ctx, t, cp, "evictions", "starved", "-o", "json"))
	if plan.Kind != "NodeEvictionPlan" || plan.APIVersion != "kubectl.headroom.dev/v1alpha1" || plan.Name != "starved" ||
		plan.Policy != policySource || plan.Decision != v1alpha1.DecisionWaiting || plan.PressureSeen == "" {
		t.Errorf("evictions starved -o json: %+v", plan)
	}
	for _, want := range []string{
		"now: " + figureList(plan.Now),
		"above threshold (" + figureList(plan.Thresholds) + ")",
		"waiting: seen above threshold in " + plan.PressureSeen + "; nothing is evicted until the pressure lasts",
		"plan if the pressure lasts, by the figures of now: ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("evictions starved prints\n%s\nlacking %q of its -o json", out, want)
		}
	}
	for _, pod := range plan.Pods {
		if !strings.Contains(out, pod.Namespace+"/"+pod.Name) || !strings.Contains(out, pod.Reason) {
			t.Errorf("evictions starved prints\n%s\nlacking pod %s/%s: %s", out, pod.Namespace, pod.Name, pod.Reason)
		}
	}

	// A value changed in the cluster's ConfigMaps: the verdicts follow.
	editConfigMap(ctx, t, cp, schedCM, "scheduler-config.yaml", "minFreePercent: 5\n", "minFreePercent: 10\n")
	editConfigMap(ctx, t, cp, policyCM, "policy.yaml", "thresholdPercent: 95\n", "thresholdPercent: 96\n")
	out = kubectlHeadroom(ctx, t, cp, "explain", "node", "tight", "--pod-file", podFile)
	if !strings.Contains(out, "Filter: fails: NodePIDs: node(s) had too few free PIDs") {
		t.Errorf("tight with the cluster's minFreePercent 10:\n%s", out)
	}
	out = kubectlHeadroom(ctx, t, cp, "nodes", "--pod-file", podFile, "-o", `jsonpath={range .items[*]}{.metadata.name}={.verdict.filter} {end}`)
	if want := "roomy=passes starved=fails tight=fails "; out != want {
		t.Errorf("nodes -o jsonpath: %q, want %q", out, want)
	}
	if out := kubectlHeadroom(ctx, t, cp, "evictions", "starved"); !strings.Contains(out, "within thresholds: nothing to evict") {
		t.Errorf("evictions starved with the cluster's threshold 96 %%:\n%s", out)
	}
	// --config still overrides the cluster's: the shipped file passes tight.
	file := filepath.Join(t.TempDir(), "scheduler-config.yaml")
	if err := os.WriteFile(file, repoFile(t, "manifests/scheduler/scheduler-config.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := kubectlHeadroom(ctx, t, cp, "explain", "node", "tight", "--pod-file", podFile, "--config", file); !strings.Contains(out, "Filter: passes") {
		t.Errorf("--config of the shipped file:\n%s", out)
	}

	// -o json decodes as a NodeHeadroomList; -l selects by the Node's labels.
	list := &v1alpha1.NodeHeadroomList{}
	if err := json.Unmarshal([]byte(kubectlHeadroom(ctx, t, cp, "nodes", "-o", "json", "--sort-by", "pid-free")), list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 3 || list.Items[0].Name != "starved" || list.Items[0].PIDs.EstimatedFree == nil ||
		*list.Items[0].PIDs.EstimatedFree != floor-100 || list.SchedulerConfiguration != source {
		t.Errorf("nodes -o json: %+v", list)
	}
	if out := kubectlHeadroom(ctx, t, cp, "nodes", "-l", corev1.LabelHostname+" in (roomy,tight)", "-o", "name"); out != "node/roomy\nnode/tight\n" {
		t.Errorf("nodes -l ... -o name: %q", out)
	}
	// kubectl completes the plugin's arguments through
	// kubectl_complete-headroom, which hack/build.sh puts beside it.
	out, _ = runKubectl(ctx, t, cp, "__complete", "headroom", "explain", "node", "--kubeconfig", cp.KubeconfigPath, "t")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || lines[0] != "tight" || lines[1] != ":4" {
		t.Errorf("kubectl __complete headroom explain node t: %q, want tight and :4", out)
	}

	// With pods on starved and the shipped policy (threshold 95 %), every
	// row of the evictions table is a pod of its -o json, the same decision
	// and reason: here the plan that runs if the pressure lasts.
	for _, name := range []string{"held-1", "held-2"} {
		p := newPod(name, "headroom-scheduler", nil, nil, nil)
		p.Spec.NodeName = "starved"
		if _, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		waitRunning(ctx, t, cp, name)
	}
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, repoFile(t, "manifests/descheduler/policy.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	table := kubectlHeadroom(ctx, t, cp, "evictions", "starved", "--policy", policy)
	plan = kubectlout.DecodeStrict[v1alpha1.NodeEvictionPlan](t, kubectlHeadroom(ctx, t, cp, "evictions", "starved", "--policy", policy, "-o", "json"))
	if plan.Decision != v1alpha1.DecisionWaiting || len(plan.Pods) != 2 {
		t.Errorf("evictions starved -o json with two pods: decision %s, %d pods, want Waiting and 2", plan.Decision, len(plan.Pods))
	}
	rows, want := kubectlout.EvictionRows(t, table), kubectlout.PlanRows(plan)
	if !slices.Equal(rows, want) {
		t.Errorf("evictions starved table rows\n%s\n-o json pods\n%s\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"), table)
	}
}

// figureList renders figures as kubectl headroom evictions prints them.
func figureList(fs []v1alpha1.Figure) string {
	parts := make([]string, 0, len(fs))
	for _, f := range fs {
		parts = append(parts, f.Name+" "+f.Value)
	}
	return strings.Join(parts, ", ")
}

// editConfigMap replaces old with new in the ConfigMap's key, once.
func editConfigMap(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, name, key, old, new string) {
	t.Helper()
	cm, err := cp.Client.CoreV1().ConfigMaps("headroom-system").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data[key], old) {
		t.Fatalf("ConfigMap %s key %s lacks %q", name, key, old)
	}
	cm.Data[key] = strings.Replace(cm.Data[key], old, new, 1)
	if _, err := cp.Client.CoreV1().ConfigMaps("headroom-system").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestKubectlHeadroomCleanAnnotations removes Headroom's annotations from
// Nodes on a real API server, as the last step of an uninstall: a dry run
// by default changes nothing; --yes removes the headroom.dev/ keys and
// only them, with a merge patch guarded by each Node's resourceVersion.
func TestKubectlHeadroomCleanAnnotations(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sample := time.Now().UTC().Truncate(time.Second)
	for _, name := range []string{"a", "b"} {
		ann := pidstats.NodeStats{Capacity: 32768, Used: 1000, SampledAt: sample}.Annotations()
		ann["example.com/keep"] = "yes"
		if _, err := cp.CreateNode(ctx, name, resources("4", "8Gi", "110"), ann); err != nil {
			t.Fatal(err)
		}
	}
	headroomKeys := func(node string) (keys []string, kept bool) {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k := range n.Annotations {
			if strings.HasPrefix(k, "headroom.dev/") {
				keys = append(keys, k)
			}
		}
		return keys, n.Annotations["example.com/keep"] == "yes"
	}
	before, _ := headroomKeys("a")
	if len(before) != 4 {
		t.Fatalf("node a's headroom.dev/ annotations: %v", before)
	}

	out, stderr := kubectlHeadroomStreams(ctx, t, cp, "clean-annotations")
	if !strings.Contains(out, "node/a: would remove "+strings.Join(before, ", ")) && !strings.Contains(out, "node/a: would remove headroom.dev/") ||
		!strings.Contains(stderr, "Dry run: 8 annotation(s) on 2 node(s) would be removed") {
		t.Errorf("dry run:\n%s%s", out, stderr)
	}
	if keys, _ := headroomKeys("a"); len(keys) != 4 {
		t.Errorf("the dry run changed node a: %v", keys)
	}

	out = kubectlHeadroom(ctx, t, cp, "clean-annotations", "--yes")
	t.Logf("kubectl headroom clean-annotations --yes:\n%s", out)
	for _, node := range []string{"a", "b"} {
		if keys, kept := headroomKeys(node); len(keys) != 0 || !kept {
			t.Errorf("node %s after --yes: headroom.dev/ keys %v, example.com/keep kept %v", node, keys, kept)
		}
	}
	if _, stderr := kubectlHeadroomStreams(ctx, t, cp, "clean-annotations", "--yes"); !strings.Contains(stderr, "No node carries headroom.dev/ annotations") {
		t.Errorf("second run: %s", stderr)
	}
}
