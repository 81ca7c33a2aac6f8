package oomrisk

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	fwk "k8s.io/kube-scheduler/framework"
	kubelettypes "k8s.io/kubernetes/pkg/kubelet/types"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	tf "k8s.io/kubernetes/pkg/scheduler/testing/framework"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// measuredNode returns node name of 16Gi holding three Burstable pods of
// 1Gi request and 4Gi limit, running since before a memory sample taken 30s
// ago that found the node's working set at nodeUsed and each pod at
// podUsed. The declarations are the same whatever the figures.
func measuredNode(name, nodeUsed, podUsed string, age time.Duration) ([]*corev1.Pod, *corev1.Node) {
	n := node(name, "16Gi")
	at := time.Now().Add(-age)
	var pods []*corev1.Pod
	var entries []string
	for i := range 3 {
		p := pod(fmt.Sprintf("%s-%d", name, i), name, "1Gi", "4Gi")
		p.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%s%08d", map[string]string{"busy": "aaaa", "idle": "bbbb"}[name], i))
		before := metav1.NewTime(at.Add(-time.Minute))
		p.Status.Phase = corev1.PodRunning
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: before}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: before}}}}
		pods = append(pods, p)
		entries = append(entries, string(p.UID)+"="+podUsed)
	}
	n.Annotations = map[string]string{
		memstats.AnnotationUsed:      nodeUsed,
		memstats.AnnotationSampledAt: sample.FormatTime(at),
		memstats.AnnotationPods:      strings.Join(entries, ","),
	}
	return pods, n
}

// TestScorePrefersTheNodeWhosePodsUseLess: two nodes with the same pods,
// declared alike, so that the declared model scores them alike; on "busy"
// the pods hold nearly all of their limits and the node's working set is
// within 1Gi of allocatable, on "idle" they hold little. A 1Gi pod on busy
// takes the working set 512Mi past allocatable, and the killer would take a
// pod already there (collateral, 3.9Gi ≥ the pod's 1Gi): cost (0 + 1·1e6)/4
// in the working-set view, 0 in the worst-case one (12Gi + 4Gi fit 16Gi),
// mean 125000 ppm: score 88. On idle nothing is at risk: 100.
func TestScorePrefersTheNodeWhosePodsUseLess(t *testing.T) {
	busyPods, busy := measuredNode("busy", "16642998272", "4187593113", 30*time.Second) // 15.5Gi; 3.9Gi
	idlePods, idle := measuredNode("idle", "3221225472", "536870912", 30*time.Second)   // 3Gi; 512Mi
	for _, tc := range []struct {
		name       string
		busy, idle *corev1.Node
		wantBusy   int64
	}{
		{name: "measured", busy: busy, idle: idle, wantBusy: 88},
		{name: "a stale sample is ignored", busy: staleCopy(busy), idle: idle, wantBusy: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []*corev1.Node{tc.busy, tc.idle}
			snapshot := cache.NewSnapshot(append(append([]*corev1.Pod{}, busyPods...), idlePods...), nodes)
			pl := newPlugin(t, defaultArgs(), snapshot)
			in := pod("api", "", "1Gi", "4Gi")
			state := framework.NewCycleState()
			s := pl.PreScore(context.Background(), state, in, tf.BuildNodeInfos(nodes))
			if s.IsSkip() {
				// Nothing at risk anywhere: every node scores MaxNodeScore.
				if tc.wantBusy != fwk.MaxNodeScore {
					t.Fatalf("PreScore skipped; want busy scored %d", tc.wantBusy)
				}
				return
			}
			if !s.IsSuccess() {
				t.Fatalf("PreScore: %v", s)
			}
			for name, want := range map[string]int64{"busy": tc.wantBusy, "idle": 100} {
				got, s := pl.Score(context.Background(), state, in, nodeInfo(t, snapshot, name))
				if !s.IsSuccess() || got != want {
					t.Errorf("Score(%s) = %d, %v; want %d", name, got, s, want)
				}
			}
		})
	}
}

func staleCopy(n *corev1.Node) *corev1.Node {
	c := n.DeepCopy()
	c.Annotations[memstats.AnnotationSampledAt] = sample.FormatTime(time.Now().Add(-time.Hour))
	return c
}

// TestInvalidMemoryAnnotationIsIgnored: a malformed figure leaves the node
// declared-only, with an Event saying so; it never fails scoring.
func TestInvalidMemoryAnnotationIsIgnored(t *testing.T) {
	pods, busy := measuredNode("busy", "16642998272", "4187593113", 30*time.Second)
	busy.Annotations[memstats.AnnotationUsed] = "lots"
	snapshot := cache.NewSnapshot(pods, []*corev1.Node{busy})
	pl := newPlugin(t, defaultArgs(), snapshot)
	in := pod("api", "", "1Gi", "4Gi")
	got, s := pl.Score(context.Background(), framework.NewCycleState(), in, nodeInfo(t, snapshot, "busy"))
	if !s.IsSuccess() || got != 100 {
		t.Errorf("Score = %d, %v; want 100, the declared-only score", got, s)
	}
	e := pl.cache.Stored("busy")
	if ig := e.ignored(); ig.Key != memstats.AnnotationUsed || ig.Err == nil {
		t.Errorf("ignored annotation = %+v; want %s reported", ig, memstats.AnnotationUsed)
	}
}

// TestInvalidSwapAnnotationIsIgnored: a malformed swap figure leaves the
// node measured, without swap, and is reported.
func TestInvalidSwapAnnotationIsIgnored(t *testing.T) {
	pods, busy := measuredNode("busy", "16642998272", "4187593113", 30*time.Second)
	busy.Annotations[memstats.AnnotationSwapTotal] = "lots"
	snapshot := cache.NewSnapshot(pods, []*corev1.Node{busy})
	pl := newPlugin(t, defaultArgs(), snapshot)
	if _, s := pl.Score(context.Background(), framework.NewCycleState(), pod("api", "", "1Gi", "4Gi"), nodeInfo(t, snapshot, "busy")); !s.IsSuccess() {
		t.Fatalf("Score: %v", s)
	}
	e := pl.cache.Stored("busy")
	if ig := e.ignored(); ig.Key != memstats.AnnotationSwapTotal || ig.Err == nil || !e.node.Measured() {
		t.Errorf("ignored annotation = %+v, measured %v; want %s reported and the node measured", ig, e.node.Measured(), memstats.AnnotationSwapTotal)
	}
}

// TestASampleThatAgesIsDroppedWithoutANodeUpdate: a sample ages while the
// node and its pods stay as they are (a stopped node agent); once past
// maxSampleAge Score judges the node on declarations alone, though the
// cached model was built while the sample was fresh.
func TestASampleThatAgesIsDroppedWithoutANodeUpdate(t *testing.T) {
	pods, busy := measuredNode("busy", "16642998272", "4187593113", 58*time.Second)
	snapshot := cache.NewSnapshot(pods, []*corev1.Node{busy})
	args := defaultArgs()
	args.MaxSampleAge = metav1.Duration{Duration: 59500 * time.Millisecond}
	pl := newPlugin(t, args, snapshot)
	in := pod("api", "", "1Gi", "4Gi")
	state := framework.NewCycleState()
	if got, s := pl.Score(context.Background(), state, in, nodeInfo(t, snapshot, "busy")); !s.IsSuccess() || got != 88 {
		t.Fatalf("fresh sample: Score = %d, %v; want 88", got, s)
	}
	// A cycle with PreScore keeps the node's score for the pod's shape
	// beside its summary; the kept score must age with the sample.
	cycle := framework.NewCycleState()
	if s := pl.PreScore(context.Background(), cycle, in, nil); !s.IsSuccess() {
		t.Fatalf("PreScore: %v", s)
	}
	for range 2 {
		if got, s := pl.Score(context.Background(), cycle, in, nodeInfo(t, snapshot, "busy")); !s.IsSuccess() || got != 88 {
			t.Fatalf("fresh sample, scored in a cycle: Score = %d, %v; want 88", got, s)
		}
	}
	time.Sleep(2 * time.Second)
	if got, s := pl.Score(context.Background(), state, in, nodeInfo(t, snapshot, "busy")); !s.IsSuccess() || got != 100 {
		t.Errorf("stale sample: Score = %d, %v; want 100, the declared-only score", got, s)
	}
	cycle = framework.NewCycleState()
	pl.PreScore(context.Background(), cycle, in, nil)
	if got, s := pl.Score(context.Background(), cycle, in, nodeInfo(t, snapshot, "busy")); !s.IsSuccess() || got != 100 {
		t.Errorf("stale sample, a cycle after the score was kept: Score = %d, %v; want 100, the declared-only score", got, s)
	}
}

// TestSignPodSeesOverhead: the pod overhead is part of what a pod counts on
// a measured node, so pods that differ only in it do not share a score.
func TestSignPodSeesOverhead(t *testing.T) {
	a, b := pod("a", "", "1Gi", "4Gi"), pod("b", "", "1Gi", "4Gi")
	b.Spec.Overhead = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("512Mi")}
	if shapeKey(a) == shapeKey(b) {
		t.Errorf("pods differing in overhead share the memory shape %s", shapeKey(a))
	}
	if c := pod("c", "", "1Gi", "4Gi"); shapeKey(a) != shapeKey(c) {
		t.Errorf("pods alike sign differently: %s, %s", shapeKey(a), shapeKey(c))
	}
}

// TestShapeKeyTellsShapesApart: two pods share a key exactly when their
// memory shapes, as SignPod hands them to the scheduler, are equal.
func TestShapeKeyTellsShapesApart(t *testing.T) {
	withInit := func(p *corev1.Pod, sidecar bool, request string) *corev1.Pod {
		c := corev1.Container{Name: "init", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(request)}}}
		if sidecar {
			always := corev1.ContainerRestartPolicyAlways
			c.RestartPolicy = &always
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
		return p
	}
	twoContainers := pod("two", "", "1Gi", "4Gi")
	twoContainers.Spec.Containers = append(twoContainers.Spec.Containers, corev1.Container{Name: "second",
		Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}}})
	podLevel := pod("pod-level", "", "1Gi", "4Gi")
	podLevel.Spec.Resources = &corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("8Gi")}}
	critical := pod("critical", "", "1Gi", "4Gi")
	nodeCritical := int32(2000001000) // scheduling.SystemCriticalPriority + 1000
	critical.Namespace, critical.Spec.Priority, critical.Spec.PriorityClassName = "kube-system", &nodeCritical, "system-node-critical"
	pods := []*corev1.Pod{
		pod("a", "", "1Gi", "4Gi"),
		pod("same-value", "", "1073741824", "4Gi"),
		pod("fraction", "", "1.5", "4Gi"),
		pod("two-bytes", "", "2", "4Gi"),
		pod("zero", "", "0", "4Gi"),
		pod("no-request", "", "", "4Gi"),
		pod("no-limit", "", "1Gi", ""),
		pod("huge", "", "1Gi", "10E"),
		pod("milli", "", "1500m", "4Gi"),
		withInit(pod("init", "", "1Gi", "4Gi"), false, "1Gi"),
		withInit(pod("sidecar", "", "1Gi", "4Gi"), true, "1Gi"),
		twoContainers,
		podLevel,
		critical,
		guaranteedPod("guaranteed", "", "1Gi"),
	}
	for _, a := range pods {
		for _, b := range pods {
			if same, want := shapeKey(a) == shapeKey(b), equalShapes(shapeOf(a), shapeOf(b)); same != want {
				t.Errorf("%s and %s: keys %q and %q equal %v; shapes %+v and %+v equal %v", a.Name, b.Name, shapeKey(a), shapeKey(b), same, shapeOf(a), shapeOf(b), want)
			}
		}
	}
	if !kubelettypes.IsNodeCriticalPod(critical) {
		t.Fatal("the node-critical pod is not node-critical")
	}
	if shapeKey(pods[0]) != shapeKey(pods[1]) {
		t.Errorf("1Gi and 1073741824 bytes are one request: %q, %q", shapeKey(pods[0]), shapeKey(pods[1]))
	}
}

// equalShapes compares memory shapes by value: quantities by Cmp, not by
// how they were written.
func equalShapes(a, b memoryShape) bool {
	equalQuantities := func(x, y *resource.Quantity) bool {
		return (x == nil) == (y == nil) && (x == nil || x.Cmp(*y) == 0)
	}
	equalPairs := func(x, y []memoryPair) bool {
		return slices.EqualFunc(x, y, func(p, q memoryPair) bool {
			return equalQuantities(p.Request, q.Request) && equalQuantities(p.Limit, q.Limit) && p.Sidecar == q.Sidecar
		})
	}
	podsEqual := (a.Pod == nil) == (b.Pod == nil) && (a.Pod == nil || equalPairs([]memoryPair{*a.Pod}, []memoryPair{*b.Pod}))
	return a.QOS == b.QOS && a.NodeCritical == b.NodeCritical && equalPairs(a.Containers, b.Containers) &&
		equalPairs(a.InitContainers, b.InitContainers) && podsEqual && equalQuantities(a.Overhead, b.Overhead)
}
