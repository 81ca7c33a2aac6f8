package integration

import (
	"context"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// TestRelieveNodePressureRelievesMemoryByMeasuredGain runs the built
// headroom-descheduler, as its CronJob does, with the shipped policy and its
// memory trigger turned on (the policy ships it commented out), on kwok
// nodes of 10Gi whose memory samples the test writes as headroom-node-agent
// would:
//
//   - mem-node, at 9.5Gi of working set (95 % > the threshold of 90 %): web's
//     three pods (300Mi each) lead the delete order, doubled up on the node;
//     then hog's two, the one with restarts (2Gi) before the other (100Mi).
//     The plan walks web's pods first and then takes the big hog pod, which
//     brings the node to 7.5Gi on its own (the target is 8.5Gi): pruned, the
//     plan evicts the big hog pod alone;
//   - stuck-node, at 9.5Gi, 9Gi of it held by a bare pod the evictor keeps:
//     unrelievable, a Warning Event on the Node names it;
//   - spare, without a sample, takes the replacement.
//
// The first run waits for a second sample (pressureSamples: 2); the second
// relieves; the third, before the node agent samples again, evicts nothing:
// the big hog pod was listed, so the estimate no longer counts it.
func TestRelieveNodePressureRelievesMemoryByMeasuredGain(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{ControllerManager: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := cp.Client
	ns := metav1.NamespaceDefault
	const memNode, stuckNode = "mem-node", "stuck-node"
	for name, mem := range map[string]string{memNode: "10Gi", stuckNode: "10Gi", "spare": "32Gi"} {
		if _, err := cp.CreateNode(ctx, name, resources("8", mem, "110"), nil); err != nil {
			t.Fatal(err)
		}
	}

	web := rnpWorkload("web", 3, memNode, relievenodepressure.DefaultSchedulerName, nil)
	hog := rnpWorkload("hog", 2, memNode, relievenodepressure.DefaultSchedulerName, nil)
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, hog, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	culprit := rnpBarePod()
	culprit.Name, culprit.Spec.NodeName = "culprit", stuckNode
	if _, err := c.CoreV1().Pods(ns).Create(ctx, culprit, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	webPods := rnpPodsOf(ctx, t, c, "web", 3)
	hogPods := rnpPodsOf(ctx, t, c, "hog", 2)
	rnpRunning(ctx, t, c, webPods)
	big, small := hogPods[0], hogPods[1]
	// More restarts first: the big hog pod leads its workload's pods.
	rnpApplyRole(ctx, t, c, &big, rnpRole{name: "big", phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour, restarts: 3})
	rnpApplyRole(ctx, t, c, &small, rnpRole{name: "small", phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour})
	rnpApplyRole(ctx, t, c, culprit, rnpRole{name: "culprit", phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour})
	cur, err := c.CoreV1().Pods(ns).Get(ctx, culprit.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The samples, after every pod started, as the node agent writes them.
	const mi, gi = int64(1) << 20, int64(1) << 30
	held := map[types.UID]int64{big.UID: 2 * gi, small.UID: 100 * mi}
	for _, p := range webPods {
		held[p.UID] = 300 * mi
	}
	rnpMemorySample(ctx, t, c, memNode, 9728*mi, held)
	rnpMemorySample(ctx, t, c, stuckNode, 9728*mi, map[types.UID]int64{cur.UID: 9 * gi})

	policy := rnpMemoryPolicy(t)
	rnpWaits(t, rnpRunPolicy(t, cp, policy))
	for _, node := range []string{memNode, stuckNode} {
		rnpMemoryResample(ctx, t, c, node)
	}

	log := rnpRunPolicy(t, cp, policy)
	if evicted, want := rnpEvicted(log), []string{ns + "/" + big.Name}; !slices.Equal(evicted, want) {
		t.Fatalf("evicted %v, want the big hog pod %v alone\n%s", evicted, want, rnpPluginLines(log))
	}
	reason := regexp.MustCompile(`"Evicted pod" pod="` + ns + "/" + big.Name + `" reason="([^"]*)"`).FindStringSubmatch(log)
	if want := "RelieveNodePressure: node " + memNode + " memory 95.0% used > threshold 90%"; reason == nil || reason[1] != want {
		t.Errorf("eviction reason %q, want %q", reason, want)
	}
	if !regexp.MustCompile(`"Evicted pod to relieve node" .*beforeMemoryUsed="9728Mi/10Gi \(95.0%\)" afterMemoryUsed="7680Mi/10Gi \(75.0%\)"`).MatchString(log) {
		t.Errorf("the eviction's log line does not show the memory figures before and after\n%s", rnpPluginLines(log))
	}
	for _, p := range append(append([]corev1.Pod{small}, webPods...), *cur) {
		if got, err := c.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{}); err != nil || got.DeletionTimestamp != nil {
			t.Errorf("pod %s was removed: %v", p.Name, err)
		}
	}
	if got, err := c.CoreV1().Pods(ns).Get(ctx, big.Name, metav1.GetOptions{}); err == nil && got.DeletionTimestamp == nil {
		t.Errorf("the big hog pod %s is still there", big.Name)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	// Read right after the process exited: the Event must be written.
	notes := rnpUnrelievableNotes(ctx, t, c, metav1.NamespaceDefault, stuckNode)
	if want := ns + "/culprit (9Gi of memory): the evictor's filter keeps it"; len(notes) != 1 || !strings.Contains(notes[0], want) ||
		!strings.Contains(notes[0], "(memory 9728Mi/10Gi used (95.0%) > threshold 90%)") {
		t.Errorf("%s Events on %s: %q, want one naming %q", relievenodepressure.ReasonNodePressureUnrelievable, stuckNode, notes, want)
	}

	// The next run, before the node agent samples again: the big hog pod's
	// listed 2Gi no longer count (its replacement, if already there, counts
	// what it requests).
	log = rnpRunPolicy(t, cp, policy)
	if evicted := rnpEvicted(log); len(evicted) != 0 {
		t.Fatalf("the run before a new sample evicted %v, want none\n%s", evicted, rnpPluginLines(log))
	}
	if !regexp.MustCompile(`"Node within thresholds" .*node="` + memNode + `" memoryUsed="(7680|7696)Mi/10Gi`).MatchString(log) {
		t.Errorf("the run before a new sample did not see %s at 7.5Gi\n%s", memNode, rnpPluginLines(log))
	}
}

// rnpMemoryPolicy is the shipped policy with its memory trigger, which it
// ships commented out, uncommented as its comment says.
func rnpMemoryPolicy(t *testing.T) []byte {
	t.Helper()
	var out []string
	in := false
	for _, line := range strings.Split(string(repoFile(t, "manifests/descheduler/policy.yaml")), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		indent := line[:len(line)-len(trimmed)]
		switch {
		case trimmed == "# memory:":
			in = true
			line = indent + "memory:"
		case in && strings.HasPrefix(trimmed, "#   "):
			line = indent + strings.TrimPrefix(trimmed, "# ")
		default:
			in = false
		}
		out = append(out, line)
	}
	policy := strings.Join(out, "\n")
	if !strings.Contains(policy, "\n      memory:\n        thresholdPercent: 90\n") {
		t.Fatalf("the shipped policy has no commented memory trigger to turn on:\n%s", policy)
	}
	return []byte(policy)
}

// rnpMemorySample writes a memory sample, taken now, on node: a working set
// of used bytes, with the pods' measured working sets as
// headroom.dev/memory-pods.
func rnpMemorySample(ctx context.Context, t *testing.T, c kubernetes.Interface, node string, used int64, pods map[types.UID]int64) {
	t.Helper()
	var figures []sample.PodFigure
	for uid, b := range pods {
		figures = append(figures, sample.PodFigure{UID: uid, Value: b})
	}
	s := memstats.NodeStats{Used: used, SampledAt: time.Now(), Pods: memstats.PodListFormat.New(figures)}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": s.Annotations()}})
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rnpMemoryResample stamps node's memory sample with a new time, a second
// later at least: the node agent's next sample of the same figures.
func rnpMemoryResample(ctx context.Context, t *testing.T, c kubernetes.Interface, node string) {
	t.Helper()
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		memstats.AnnotationSampledAt: sample.FormatTime(time.Now())}}})
	if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// rnpUnrelievableNotes returns the notes of the plugin's
// NodePressureUnrelievable Warning Events on node, listed in namespace ns.
func rnpUnrelievableNotes(ctx context.Context, t *testing.T, c kubernetes.Interface, ns, node string) []string {
	t.Helper()
	list, err := c.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var notes []string
	for _, e := range list.Items {
		if e.Regarding.Kind == "Node" && e.Regarding.Name == node && e.Type == corev1.EventTypeWarning &&
			e.Reason == relievenodepressure.ReasonNodePressureUnrelievable && e.ReportingController == relievenodepressure.EventReportingController {
			notes = append(notes, e.Note)
		}
	}
	return notes
}
