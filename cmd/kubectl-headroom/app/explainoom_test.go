package app

import (
	"context"
	"fmt"
	"github.com/headroom-k8s/headroom/test/kubectlout"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/headroom-k8s/headroom/apis/kubectl/v1alpha1"
	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// workedExampleCluster is the cluster of the README's worked example (and of
// pkg/oomkill's): worker-1 with 16Gi of memory, 15Gi allocatable, holding
// web (Burstable, 1Gi request, 8Gi limit), batch (BestEffort) and db
// (Guaranteed, 4Gi); a pod on another node and a finished pod on worker-1
// must not count.
func workedExampleCluster() *fake.Clientset {
	mem := resource.MustParse
	container := func(req, lim corev1.ResourceList) []corev1.Container {
		return []corev1.Container{{Name: "app", Image: "app", Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}}
	}
	p := func(name, nodeName string, phase corev1.PodPhase, containers []corev1.Container) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
			Spec:       corev1.PodSpec{NodeName: nodeName, Containers: containers},
			Status:     corev1.PodStatus{Phase: phase},
		}
	}
	guaranteed := corev1.ResourceList{corev1.ResourceCPU: mem("1"), corev1.ResourceMemory: mem("4Gi")}
	return fake.NewClientset(
		&corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "worker-1"},
			Status: corev1.NodeStatus{
				Capacity:    corev1.ResourceList{corev1.ResourceMemory: mem("16Gi")},
				Allocatable: corev1.ResourceList{corev1.ResourceMemory: mem("15Gi")},
			},
		},
		p("web", "worker-1", corev1.PodRunning, container(
			corev1.ResourceList{corev1.ResourceMemory: mem("1Gi")},
			corev1.ResourceList{corev1.ResourceMemory: mem("8Gi")})),
		p("batch", "worker-1", corev1.PodRunning, container(nil, nil)),
		p("db", "worker-1", corev1.PodRunning, container(guaranteed, guaranteed)),
		p("done", "worker-1", corev1.PodSucceeded, container(nil, corev1.ResourceList{corev1.ResourceMemory: mem("64Gi")})),
		p("elsewhere", "worker-2", corev1.PodRunning, container(nil, corev1.ResourceList{corev1.ResourceMemory: mem("64Gi")})),
	)
}

// runExplain runs explain-oom with args against client.
func runExplain(t *testing.T, client kubernetes.Interface, args ...string) (string, error) {
	t.Helper()
	return run(t, client, append([]string{"explain-oom"}, args...)...)
}

// readmeBlock returns the fenced block that follows the marker comment
// <!-- name --> in the README.
func readmeBlock(t *testing.T, name string) string {
	t.Helper()
	readme, err := os.ReadFile("../../../plugins/oomrisk/README.md")
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile("(?s)<!-- " + regexp.QuoteMeta(name) + " -->\n```[a-z]*\n(.*?)```\n")
	m := re.FindSubmatch(readme)
	if m == nil {
		t.Fatalf("README.md has no block marked %q", name)
	}
	return string(m[1])
}

// TestREADMEWorkedExample runs the command line the README shows, with the
// pod file it shows, on the cluster it describes, and compares the output
// with the README's: the doc cannot drift from the code.
func TestREADMEWorkedExample(t *testing.T) {
	podFile := writeFile(t, "api.yaml", readmeBlock(t, "worked-example-pod"))
	block := readmeBlock(t, "worked-example-output")
	commandLine, want, ok := strings.Cut(block, "\n")
	if !ok {
		t.Fatal("worked example output has no command line")
	}
	args := strings.Fields(strings.TrimPrefix(commandLine, "$ kubectl headroom explain-oom"))
	for i := range args {
		if args[i] == "api.yaml" {
			args[i] = podFile
		}
	}
	if len(args) == 0 || args[len(args)-1] != podFile {
		t.Fatalf("command line %q does not end in --pod-file api.yaml", commandLine)
	}
	got, err := runExplain(t, workedExampleCluster(), args...)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Errorf("explain-oom prints\n%s\nREADME.md shows\n%s", got, want)
	}
}

// TestExplainReadOnly checks that explain-oom only gets the node and lists
// the pods bound to it.
func TestExplainReadOnly(t *testing.T) {
	client := workedExampleCluster()
	client.ClearActions()
	out, err := runExplain(t, client, "worker-1")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"node worker-1: capacity 16Gi, allocatable 15Gi", "default/web", "default/batch", "default/db"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, absent := range []string{"elsewhere", "done", "incoming", "score"} {
		if strings.Contains(out, absent) {
			t.Errorf("output mentions %q:\n%s", absent, out)
		}
	}
	var verbs []string
	for _, a := range client.Actions() {
		verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource)
		if l, ok := a.(k8stesting.ListAction); ok {
			if sel := l.GetListRestrictions().Fields.String(); sel != "spec.nodeName=worker-1,status.phase!=Failed,status.phase!=Succeeded" {
				t.Errorf("pods listed with field selector %q", sel)
			}
		}
	}
	// The scheduler's Deployment is looked up for its configuration (the
	// fake cluster has none), then the node and its pods.
	if got, want := strings.Join(verbs, ", "), "get deployments, get nodes, list pods"; got != want {
		t.Errorf("API calls: %s; want %s", got, want)
	}
	// --node, deprecated, names the node as the argument does.
	if out2, err := runExplain(t, workedExampleCluster(), "--node", "worker-1"); err != nil || out2 != out {
		t.Errorf("--node worker-1: err %v, output\n%s\nwant\n%s", err, out2, out)
	}
}

func TestExplainGuaranteedPod(t *testing.T) {
	podFile := writeFile(t, "pod.json", `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "cache"},
 "spec": {"containers": [{"name": "app", "image": "app", "resources": {"limits": {"cpu": "1", "memory": "2Gi"}}}]}}`)
	out, err := runExplain(t, workedExampleCluster(), "worker-1", "--pod-file", podFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"with default/cache (Guaranteed)", "OOMRisk skips Guaranteed pods"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestExplainWeightsFromFlags(t *testing.T) {
	podFile := writeFile(t, "api.yaml", readmeBlock(t, "worked-example-pod"))
	// Own risk only: api itself is safe on worker-1.
	out, err := runExplain(t, workedExampleCluster(), "worker-1", "--pod-file", podFile, "--collateral-weight", "0")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "score 100 of 100: own risk 0 ppm × weight 3, collateral 1000000 ppm × weight 0") {
		t.Errorf("unexpected score line:\n%s", out)
	}
}

func TestExplainErrors(t *testing.T) {
	notAPod := writeFile(t, "svc.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc\n")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no node", nil, "a NODE is required"},
		{"two nodes", []string{"worker-1", "--node", "worker-2"}, "give one"},
		{"unknown node", []string{"worker-9"}, `"worker-9" not found`},
		{"invalid weight", []string{"worker-1", "--own-risk-weight", "1001"}, "ownRiskWeight"},
		{"both weights 0", []string{"worker-1", "--own-risk-weight", "0", "--collateral-weight", "0"}, "must not both be 0"},
		{"not a pod", []string{"worker-1", "--pod-file", notAPod}, "want a Pod"},
		{"missing pod file", []string{"worker-1", "--pod-file", filepath.Join(t.TempDir(), "nope.yaml")}, "no such file"},
		{"arguments", []string{"worker-1", "extra"}, "accepts at most 1 arg(s)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := runExplain(t, workedExampleCluster(), tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// A pod that fits every node's slack: OOMRisk's PreScore skips Score, and
// the score line says so.
func TestExplainSkippedScore(t *testing.T) {
	podFile := writeFile(t, "small.json", `{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "small"},
 "spec": {"containers": [{"name": "app", "image": "app", "resources": {"requests": {"memory": "32Mi"}, "limits": {"memory": "64Mi"}}}]}}`)
	out, err := runExplain(t, workedExampleCluster(), "worker-1", "--pod-file", podFile)
	if err != nil {
		t.Fatal(err)
	}
	want := "score 100 of 100: own risk 0 ppm × weight 3, collateral 0 ppm × weight 1 (Score skipped: the pod fits every node's memory slack, so every node scores 100)"
	if !strings.Contains(out, want) {
		t.Errorf("output lacks %q:\n%s", want, out)
	}
}

// TestExplainOOMMeasured: on a node with a memory sample explain-oom shows
// what each pod holds next to its worst case, and both views of the
// placement, with the figures of the README's measured worked example.
func TestExplainOOMMeasured(t *testing.T) {
	client := workedExampleCluster()
	ctx := context.Background()
	held := map[string]string{"web": "6Gi", "batch": "3Gi", "db": "4Gi"}
	var figures []sample.PodFigure
	for i, name := range []string{"web", "batch", "db"} {
		p, err := client.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
		if _, err := client.CoreV1().Pods("default").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		q := resource.MustParse(held[name])
		figures = append(figures, sample.PodFigure{UID: p.UID, Value: q.Value()})
	}
	n, err := client.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations = memstats.NodeStats{Used: 14*1<<30 + 768*1<<20, SampledAt: time.Now(), Pods: memstats.PodListFormat.New(figures)}.Annotations()
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	podFile := writeFile(t, "api.yaml", readmeBlock(t, "worked-example-pod"))
	out, err := runExplain(t, client, "worker-1", "--pod-file", podFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"measured: working set 15104Mi, shortfall now 0, at risk now 0",
		"USED",
		"now (measured): shortfall 0 before, 256Mi after; own risk 0 ppm of 512Mi; collateral 6Gi",
		"score 75 of 100",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// -o json holds the same measured figures and rows.
	jsonOut, err := runExplain(t, client, "worker-1", "--pod-file", podFile, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	k := kubectlout.DecodeStrict[v1alpha1.OOMKillOrder](t, jsonOut)
	if m := k.Order.Measured; m == nil || quantity(m.UsedBytes) != "15104Mi" || k.Placement == nil || k.Placement.Now == nil || quantity(k.Placement.Now.CollateralBytes) != "6Gi" {
		t.Fatalf("measured figures missing or wrong:\n%s", jsonOut)
	}
	if blocks, want := tableBlocks(out), [][]string{killOrderRows(k.Order), killOrderRows(k.Placement.Order)}; !slices.EqualFunc(blocks, want, slices.Equal) {
		t.Errorf("table rows\n%q\nJSON rows\n%q", blocks, want)
	}
}
