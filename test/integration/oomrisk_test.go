package integration

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/headroom-k8s/headroom/test/controlplane"
)

// TestOOMRiskPrefersLessOvercommittedNode runs headroom-scheduler with the
// shipped OOMRisk-only profile. Two kwok nodes have the same 16Gi; on node-a
// Burstable pods have limits adding up to 32Gi, on node-b to 2Gi. A Burstable
// pod with a 12Gi limit must land on node-b, and the scheduler's -v=4 log must
// show why: OOMRisk scored node-a 25 (the pod would be the first to be killed,
// all of it needed to cover the shortfall) and node-b 100, as `kubectl
// headroom explain-oom` shows. A Guaranteed pod is scheduled without OOMRisk
// scoring it at all.
func TestOOMRiskPrefersLessOvercommittedNode(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	for _, name := range []string{"node-a", "node-b"} {
		if _, err := cp.CreateNode(ctx, name, resources("4", "16Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}
	pods := cp.Client.CoreV1().Pods(metav1.NamespaceDefault)
	bound := map[string]string{
		"a-1": "node-a", "a-2": "node-a", "a-3": "node-a", "a-4": "node-a",
		"b-1": "node-b", "b-2": "node-b",
	}
	for name, node := range bound {
		p := newPod(name, "", nil, memory("1Gi"), memory("8Gi"))
		if node == "node-b" {
			p = newPod(name, "", nil, memory("512Mi"), memory("1Gi"))
		}
		p.Spec.NodeName = node
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The scheduler lists them when it starts, before it schedules anything.
	for name := range bound {
		waitRunning(ctx, t, cp, name)
	}
	sched, err := cp.StartScheduler(ctx, repoFile(t, "manifests/samples/oomrisk-scheduler-config.yaml"), "-v=4")
	if err != nil {
		t.Fatal(err)
	}

	if _, err := pods.Create(ctx, newPod("big", "headroom-oomrisk", nil, memory("256Mi"), memory("12Gi")), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, "big"); node != "node-b" {
		t.Errorf("Burstable pod with a 12Gi limit bound to %s, want node-b", node)
	}
	for node, score := range map[string]string{"node-a": "25", "node-b": "100"} {
		re := regexp.MustCompile(`"OOMRisk score" .*pod="default/big" node="` + node + `" .*rank=0 .* score=` + score + `\b`)
		waitLog(ctx, t, sched, re)
	}

	// kubectl headroom explain-oom, run as operators would with the
	// scheduler's profile, agrees with the scheduler.
	dir := t.TempDir()
	podFile := filepath.Join(dir, "big.yaml")
	spec := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: big\nspec:\n  containers:\n  - name: app\n    image: app\n" +
		"    resources:\n      requests:\n        memory: 256Mi\n      limits:\n        memory: 12Gi\n"
	configFile := filepath.Join(dir, "oomrisk-scheduler-config.yaml")
	for path, data := range map[string][]byte{podFile: []byte(spec), configFile: repoFile(t, "manifests/samples/oomrisk-scheduler-config.yaml")} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := kubectlHeadroom(ctx, t, cp, "explain-oom", "--node", "node-a", "--pod-file", podFile,
		"--config", configFile, "--scheduler-name", "headroom-oomrisk")
	for _, want := range []string{"node node-a: capacity 16Gi, allocatable 16Gi, worst case 32Gi, shortfall 16Gi", "default/a-4", "score 25 of 100"} {
		if !strings.Contains(out, want) {
			t.Errorf("explain-oom output lacks %q:\n%s", want, out)
		}
	}

	guaranteed := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("1Gi")}
	if _, err := pods.Create(ctx, newPod("steady", "headroom-oomrisk", nil, guaranteed, guaranteed), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, "steady")
	// With PreScore's Skip the framework never calls Score for it.
	if log := readLog(t, sched); regexp.MustCompile(`"OOMRisk score" .*pod="default/steady"`).MatchString(log) {
		t.Errorf("OOMRisk scored the Guaranteed pod:\n%s", grepLines(log, `"OOMRisk score"`))
	}
}

func memory(q string) corev1.ResourceList {
	return corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(q)}
}

// waitRunning waits until kwok reports the pod Running.
func waitRunning(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, name string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod %s not running: %v", name, err)
	}
}

func readLog(t *testing.T, p *controlplane.Process) string {
	t.Helper()
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// waitLog waits until the process's log has a line matching re.
func waitLog(ctx context.Context, t *testing.T, p *controlplane.Process, re *regexp.Regexp) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return re.MatchString(readLog(t, p)), nil
	})
	if err != nil {
		t.Errorf("scheduler log has no line matching %s; OOMRisk's lines:\n%s", re, grepLines(readLog(t, p), `"OOMRisk score"`))
	}
}

func grepLines(log, substr string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
