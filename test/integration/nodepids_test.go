package integration

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/nodepids"
	"github.com/headroom-k8s/headroom/test/controlplane"
	"github.com/headroom-k8s/headroom/test/realnode"
)

// Profiles of manifests/samples/nodepids-scheduler-config.yaml: the default
// plugins plus NodePIDs, and NodePIDs as the only score plugin.
const (
	nodePIDsProfile     = "headroom-nodepids"
	nodePIDsOnlyProfile = "headroom-nodepids-only"
	nodePIDsSample      = "manifests/samples/nodepids-scheduler-config.yaml"
)

// The sample's NodePIDs args (the v1 defaults).
var (
	defaultPodPIDs = configv1.DefaultPodPIDs
	floorOf        = func(allocatable int64) int64 {
		return max(configv1.DefaultMinFreePIDs, allocatable*configv1.DefaultMinFreePercent/100)
	}
)

// pidNode is a kwok node with room for plenty of pods and the given PID
// figures; stats nil leaves its PID headroom unknown.
func pidNode(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, name string, stats *pidstats.NodeStats) {
	t.Helper()
	var ann map[string]string
	if stats != nil {
		ann = stats.Annotations()
	}
	if _, err := cp.CreateNode(ctx, name, resources("64", "256Gi", "250"), ann); err != nil {
		t.Fatal(err)
	}
}

func pidPod(name, profile, pids string) *corev1.Pod {
	var ann map[string]string
	if pids != "" {
		ann = map[string]string{pidstats.AnnotationPodPIDs: pids}
	}
	return newPod(name, profile, ann, nil, nil)
}

// podPIDs is what NodePIDs counts for a pod: its declaration, or the default.
func podPIDs(p *corev1.Pod) int64 {
	n, _ := pidstats.PodPIDs(p, defaultPodPIDs)
	return n
}

// waitAllBound waits until every pod of the default namespace is bound and
// returns them.
func waitAllBound(ctx context.Context, t *testing.T, c kubernetes.Interface, want int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := c.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		pods = list.Items
		bound := 0
		for _, p := range pods {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return len(pods) == want && bound == want, nil
	})
	if err != nil {
		t.Fatalf("waiting for %d bound pods (have %d): %v", want, len(pods), err)
	}
	return pods
}

// checkNoNodeOverFloor checks NodePIDs' guarantee on every node with known
// stats: no node is over its allocatable, and on a node that received pods
// the reported use plus the PIDs of the pods bound there since the sample
// leaves at least the floor free. It returns the estimated free PIDs per
// node.
func checkNoNodeOverFloor(t *testing.T, stats map[string]pidstats.NodeStats, pods []corev1.Pod) map[string]int64 {
	t.Helper()
	placed := map[string]int64{}
	for i := range pods {
		placed[pods[i].Spec.NodeName] += podPIDs(&pods[i])
	}
	free := map[string]int64{}
	for name, s := range stats {
		used := s.Used + placed[name]
		free[name] = s.Allocatable() - used
		if used > s.Allocatable() {
			t.Errorf("node %s: estimated use %d exceeds its allocatable %d", name, used, s.Allocatable())
		} else if placed[name] > 0 && free[name] < floorOf(s.Allocatable()) {
			t.Errorf("node %s: %d free PIDs left, under the floor of %d", name, free[name], floorOf(s.Allocatable()))
		}
	}
	return free
}

// TestNodePIDsKeepsPodsOffShortNodes schedules pods with and without
// headroom.dev/pids through the sample's default-plugins profile. Every pod
// prefers, by node affinity, the two nodes that are short of PIDs, which
// outweighs NodePIDs' own score; only its Filter keeps them off.
func TestNodePIDsKeepsPodsOffShortNodes(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	sample := time.Now().Add(-30 * time.Second).UTC().Truncate(time.Second)
	const capacity = 32768
	floor := floorOf(capacity) // 1638
	stats := map[string]pidstats.NodeStats{
		"roomy": {Capacity: capacity, Reserved: 0, Used: 8000, SampledAt: sample},
		"mid":   {Capacity: capacity, Reserved: 2000, Used: 18000, SampledAt: sample},
		// Room for 150 PIDs above the floor: one undeclared pod, not two.
		"tight": {Capacity: capacity, Used: capacity - floor - 150, SampledAt: sample},
		// Under the floor before any pod.
		"starved": {Capacity: capacity, Used: capacity - floor + 100, SampledAt: sample},
	}
	for name, s := range stats {
		pidNode(ctx, t, cp, name, &s)
	}
	pidNode(ctx, t, cp, "unknown", nil)
	if _, err := cp.StartScheduler(ctx, repoFile(t, nodePIDsSample)); err != nil {
		t.Fatal(err)
	}

	preferShort := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"starved", "tight"},
			}}},
		}},
	}}
	declarations := []string{"", "50", "", "300", "", "2000", "", "1", "lots"}
	for i := range 18 {
		p := pidPod(fmt.Sprintf("p%02d", i), nodePIDsProfile, declarations[i%len(declarations)])
		p.Spec.Affinity = preferShort
		if _, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := waitAllBound(ctx, t, cp.Client, 18)

	perNode := map[string][]string{}
	for _, p := range pods {
		perNode[p.Spec.NodeName] = append(perNode[p.Spec.NodeName], p.Name+"("+p.Annotations[pidstats.AnnotationPodPIDs]+")")
	}
	t.Logf("placement: %v", perNode)
	if got := perNode["starved"]; len(got) > 0 {
		t.Errorf("pods on the PID-starved node: %v", got)
	}
	checkNoNodeOverFloor(t, stats, pods)
	// The affinity is strong enough to fill tight up to its floor.
	if len(perNode["tight"]) == 0 {
		t.Errorf("no pod on tight, which had room for one pod and was preferred by all")
	}

	// The malformed declaration counted as the default, with a warning on
	// the pod.
	var bad string
	for _, p := range pods {
		if p.Annotations[pidstats.AnnotationPodPIDs] == "lots" {
			bad = p.Name
			break
		}
	}
	waitEvent(ctx, t, cp.Client, bad, nodepids.EventReasonInvalidPIDs, `headroom.dev/pids="lots"`)
}

// waitEvent waits for an event on the pod with the reason and a message
// containing text.
func waitEvent(ctx context.Context, t *testing.T, c kubernetes.Interface, pod, reason, text string) corev1.Event {
	t.Helper()
	var found corev1.Event
	var seen []string
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		events, err := c.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, e := range events.Items {
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && strings.Contains(e.Message, text) {
				found = e
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no %s event containing %q on pod %s; events: %q", reason, text, pod, seen)
	}
	return found
}

// TestNodePIDsPendingUntilNodeShowsRoom: a pod that fits on no node stays
// Pending with NodePIDs' reason, and is scheduled as soon as a node's
// annotations show room. Nothing but NodePIDs' queueing hint for the
// annotation update requeues it within the test's wait: the scheduler's
// periodic flush of unschedulable pods comes after 5 minutes.
func TestNodePIDsPendingUntilNodeShowsRoom(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	sample := time.Now().Add(-30 * time.Second).UTC().Truncate(time.Second)
	pidNode(ctx, t, cp, "a", &pidstats.NodeStats{Capacity: 32768, Used: 30000, SampledAt: sample})
	pidNode(ctx, t, cp, "b", &pidstats.NodeStats{Capacity: 32768, Used: 31000, SampledAt: sample})
	if _, err := cp.StartScheduler(ctx, repoFile(t, nodePIDsSample)); err != nil {
		t.Fatal(err)
	}
	pods := cp.Client.CoreV1().Pods(metav1.NamespaceDefault)
	if _, err := pods.Create(ctx, pidPod("big", nodePIDsProfile, "4000"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Pending, with the reason aggregated over both nodes.
	cond := waitUnschedulable(ctx, t, cp.Client, metav1.NamespaceDefault, "big", "which has no room for 4000 PIDs")
	if cond.Reason != corev1.PodReasonUnschedulable || !strings.Contains(cond.Message, "2 "+nodepids.ErrReasonTooFewPIDs) {
		t.Errorf("PodScheduled condition %s: %q, want %q", cond.Reason, cond.Message, "2 "+nodepids.ErrReasonTooFewPIDs)
	}
	ev := waitEvent(ctx, t, cp.Client, "big", "FailedScheduling", "too few free PIDs")
	t.Logf("FailedScheduling: %s", ev.Message)

	// The reporter of b writes a fresh sample with room.
	room := pidstats.NodeStats{Capacity: 32768, Used: 20000, SampledAt: time.Now().UTC()}
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}}}`,
		pidstats.AnnotationUsed, strconv.FormatInt(room.Used, 10),
		pidstats.AnnotationSampledAt, room.SampledAt.Format(time.RFC3339))
	if _, err := cp.Client.CoreV1().Nodes().Patch(ctx, "b", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, "big"); node != "b" {
		t.Fatalf("bound to %s, want b", node)
	}
}

// TestNodePIDsBurstSpreadsByFreePIDs creates 100 pods of 150 PIDs at once
// (15000 PIDs, more than any node has free) through the profile in which
// NodePIDs alone scores. All land within one reporting interval, so only
// NodePIDs' estimate — reported use plus the pods placed since — keeps them
// apart.
//
// "In proportion to their free PIDs" means water-filling, which is what
// placing each pod on a node with the most free PIDs produces:
//   - a node with more free PIDs at the start never receives fewer pods;
//   - every node that received a pod ends with at least as many free PIDs
//     as any other node, less one pod's PIDs (it had the most when it got
//     its last pod);
//   - no node ends under its floor, let alone over its allocatable; the
//     starved node gets nothing.
func TestNodePIDsBurstSpreadsByFreePIDs(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	sample := time.Now().Add(-30 * time.Second).UTC().Truncate(time.Second)
	stats := map[string]pidstats.NodeStats{
		"free-12000":  {Capacity: 32768, Used: 32768 - 12000, SampledAt: sample},
		"free-9000":   {Capacity: 32768, Reserved: 1000, Used: 32768 - 1000 - 9000, SampledAt: sample},
		"free-6000":   {Capacity: 16384, Used: 16384 - 6000, SampledAt: sample},
		"starved-800": {Capacity: 32768, Used: 32768 - 800, SampledAt: sample},
	}
	for name, s := range stats {
		pidNode(ctx, t, cp, name, &s)
	}
	if _, err := cp.StartScheduler(ctx, repoFile(t, nodePIDsSample)); err != nil {
		t.Fatal(err)
	}

	const n, each = 100, 150
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			p := pidPod(fmt.Sprintf("burst-%03d", i), nodePIDsOnlyProfile, strconv.Itoa(each))
			if _, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	pods := waitAllBound(ctx, t, cp.Client, n)

	count := map[string]int{}
	for _, p := range pods {
		count[p.Spec.NodeName]++
	}
	free := checkNoNodeOverFloor(t, stats, pods)
	names := make([]string, 0, len(stats))
	for name := range stats {
		names = append(names, name)
	}
	sort.Slice(names, func(i, j int) bool { return stats[names[i]].Free() > stats[names[j]].Free() })
	var report []string
	for _, name := range names {
		report = append(report, fmt.Sprintf("%s: %d pods, %d → %d free", name, count[name], stats[name].Free(), free[name]))
	}
	t.Logf("burst of %d × %d PIDs: %s", n, each, strings.Join(report, "; "))

	if count["starved-800"] != 0 {
		t.Errorf("%d pods on the starved node", count["starved-800"])
	}
	for i := 1; i < len(names); i++ {
		if count[names[i-1]] < count[names[i]] {
			t.Errorf("%s (more free PIDs) got %d pods, fewer than %s with %d", names[i-1], count[names[i-1]], names[i], count[names[i]])
		}
	}
	for _, j := range names {
		if count[j] == 0 {
			continue
		}
		for _, k := range names {
			if free[j] < free[k]-each {
				t.Errorf("%s ends with %d free PIDs, more than one pod (%d) under %s's %d: not water-filled", j, free[j], each, k, free[k])
			}
		}
	}
}

// watchThreads reads the task total of /proc/loadavg in a loop until the
// returned function is called, which returns the least and most seen.
func watchThreads(t *testing.T) func() (lo, hi int64) {
	t.Helper()
	first := readTasks(t)
	lo, hi := first, first
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if n, err := realnode.HostTasks(); err == nil {
				lo, hi = min(lo, n), max(hi, n)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	return func() (int64, int64) {
		close(stop)
		<-done
		last := readTasks(t)
		return min(lo, last), max(hi, last)
	}
}

func readTasks(t *testing.T) int64 {
	t.Helper()
	n, err := realnode.HostTasks()
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func readProcInt(t *testing.T, path string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return n
}
