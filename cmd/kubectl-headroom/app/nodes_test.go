package app

import (
	"maps"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

func pidNode(name string, pid *pidstats.NodeStats, memory string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	if pid != nil {
		maps.Copy(n.Annotations, pid.Annotations())
	}
	if memory != "" {
		n.Status.Capacity = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memory)}
		n.Status.Allocatable = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(memory)}
	}
	return n
}

// boundPod is a Burstable pod on node with a memory request and limit;
// pids, when not empty, is its headroom.dev/pids annotation.
func boundPod(name, node, request, limit, pids string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(request)},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)},
			}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if pids != "" {
		p.Annotations = map[string]string{pidstats.AnnotationPodPIDs: pids}
	}
	return p
}

// headroomCluster: "short" has 4000 allocatable PIDs, 3000 used when
// sampled and a 500-PID pod placed since (no PodScheduled condition), so
// 500 free; its pods' memory limits (8Gi + 12Gi + 1Gi) exceed its 16Gi by
// 5Gi. "roomy" has 31768 free PIDs and nothing running. "blank" reports
// nothing; "broken" has a malformed PID annotation, an incomplete pod-IP
// sample and no memory figures. Pod IPs: "short" has 13, 10 used when
// sampled and its three pods placed since (no PodScheduled condition), so
// none free; "roomy"'s pod-IP sample is stale (an hour old).
func headroomCluster() *fake.Clientset {
	sampled := time.Now().Add(-time.Minute).Truncate(time.Second)
	broken := pidNode("broken", nil, "")
	broken.Annotations[pidstats.AnnotationCapacity] = "lots"
	broken.Annotations[ipstats.AnnotationCapacity] = "13"
	short := pidNode("short", &pidstats.NodeStats{Capacity: 4096, Reserved: 96, Used: 3000, SampledAt: sampled}, "16Gi")
	maps.Copy(short.Annotations, ipstats.NewNodeStats(13, 10, sampled).WithLeaked(2).Annotations())
	// A working set of 10Gi at the sample; the three pods count their
	// requests on top (their status says nothing of when they were bound).
	maps.Copy(short.Annotations, memstats.NodeStats{Used: 10 << 30, SampledAt: sampled}.Annotations())
	roomy := pidNode("roomy", &pidstats.NodeStats{Capacity: 32768, Used: 1000, SampledAt: sampled.Add(-time.Minute)}, "16Gi")
	maps.Copy(roomy.Annotations, ipstats.NewNodeStats(253, 1, sampled.Add(-time.Hour)).Annotations())
	objs := []runtime.Object{
		short,
		roomy,
		pidNode("blank", nil, ""),
		broken,
		boundPod("web", "short", "1Gi", "8Gi", "0"),
		boundPod("hog", "short", "1Gi", "12Gi", "0"),
		boundPod("forker", "short", "1Gi", "1Gi", "500"),
	}
	return fake.NewClientset(objs...)
}

// table runs nodes with args and returns its rows, split into cells.
func table(t *testing.T, client *fake.Clientset, args ...string) [][]string {
	t.Helper()
	out, err := run(t, client, append([]string{"nodes"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		rows = append(rows, strings.Fields(line))
	}
	return rows
}

func TestNodesTable(t *testing.T) {
	rows := table(t, headroomCluster(), "--sort-by", "pid-free")
	want := [][]string{
		{"NAME", "PIDS-CAPACITY", "PIDS-ALLOCATABLE", "PIDS-USED", "PIDS-FREE(EST)", "SAMPLE-AGE", "POD-IPS", "POD-IPS-FREE(EST)", "POD-IPS-LEAKED", "MEM-ALLOCATABLE", "MEM-USED", "MEM-WORST-CASE", "OOM-SHORTFALL", "OOM-AT-RISK"},
		{"short", "4096", "4000", "3000", "500", "*", "13", "0", "2", "16Gi", "13Gi", "21Gi", "5Gi", "13Gi"},
		{"roomy", "32768", "32768", "1000", "31768", "*", "253(stale)", "252(stale)", "-", "16Gi", "<unknown>", "0", "0", "0"},
		{"blank", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>"},
		{"broken", "<invalid>", "<invalid>", "<invalid>", "<invalid>", "<invalid>", "<invalid>", "<invalid>", "<invalid>", "<unknown>", "<unknown>", "<unknown>", "<unknown>", "<unknown>"},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows:\n%v\nwant\n%v", rows, want)
	}
	for i := range want {
		if len(rows[i]) != len(want[i]) {
			t.Fatalf("row %d: %v, want %v", i, rows[i], want[i])
		}
		for j := range want[i] {
			if want[i][j] != "*" && rows[i][j] != want[i][j] {
				t.Errorf("row %d column %s: %q, want %q", i, want[0][j], rows[i][j], want[i][j])
			}
		}
	}
	if age := rows[1][5]; !strings.HasSuffix(age, "s") && !strings.HasSuffix(age, "m") {
		t.Errorf("sample age %q", age)
	}
}

func TestNodesSortBy(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want string
	}{
		{"name", "blank broken roomy short"},
		{"pid-free", "short roomy blank broken"},
		{"pid-used", "short roomy blank broken"},
		{"sample-age", "roomy short blank broken"},
		{"oom-shortfall", "short roomy blank broken"},
		{"ip-leaked", "short blank broken roomy"},
	} {
		rows := table(t, headroomCluster(), "--sort-by", tc.key, "--no-headers")
		var names []string
		for _, r := range rows {
			names = append(names, r[0])
		}
		if got := strings.Join(names, " "); got != tc.want {
			t.Errorf("--sort-by %s: %s, want %s", tc.key, got, tc.want)
		}
	}
	if _, err := run(t, headroomCluster(), "nodes", "--sort-by", "cpu"); err == nil || !strings.Contains(err.Error(), "pid-free") {
		t.Errorf("--sort-by cpu: error %v, want one listing the columns", err)
	}
}

// TestNodesReadOnly: nodes gets the scheduler's Deployment (for its
// configuration; the fake cluster has none), lists nodes and pods, and
// does nothing else.
func TestNodesReadOnly(t *testing.T) {
	client := headroomCluster()
	client.ClearActions()
	table(t, client)
	var verbs []string
	for _, a := range client.Actions() {
		verbs = append(verbs, a.GetVerb()+" "+a.GetResource().Resource)
	}
	if got, want := strings.Join(verbs, ", "), "get deployments, list nodes, list pods"; got != want {
		t.Errorf("API calls: %s; want %s", got, want)
	}
}

// TestNodesWithPod: with a pod, the table adds Filter's verdict and the
// score per node, from the plugins (see TestExplainNode for the figures).
func TestNodesWithPod(t *testing.T) {
	pod := writeFile(t, "pod.yaml", podYAML)
	rows := table(t, headroomCluster(), "--pod-file", pod, "--sort-by", "score")
	header := strings.Join(rows[0], " ")
	if !strings.HasSuffix(header, "OOM-AT-RISK FILTER SCORE") {
		t.Fatalf("header %q lacks FILTER SCORE", header)
	}
	var got []string
	for _, r := range rows[1:] {
		got = append(got, r[0]+" "+strings.Join(r[len(r)-2:], " "))
	}
	// roomy scores 100 on both; the nodes without figures get NodePIDs'
	// mean (100) and OOMRisk's neutral 50; short fails Filter.
	want := "roomy passes 300, blank passes 200, broken passes 200, short fails(NodePIDs) -"
	if strings.Join(got, ", ") != want {
		t.Errorf("rows %q, want %q", strings.Join(got, ", "), want)
	}
	if _, err := run(t, headroomCluster(), "nodes", "--sort-by", "score"); err == nil || !strings.Contains(err.Error(), "--sort-by") {
		t.Errorf("--sort-by score without a pod: error %v", err)
	}
}

// Sorted by estimated free pod IPs: the fewest first, nodes without the
// figure last.
func TestNodesSortByIPFree(t *testing.T) {
	rows := table(t, headroomCluster(), "--sort-by", "ip-free", "--no-headers")
	var names []string
	for _, r := range rows {
		names = append(names, r[0])
	}
	if got := strings.Join(names, ","); got != "short,roomy,blank,broken" {
		t.Fatalf("order %s, want short,roomy,blank,broken", got)
	}
}
