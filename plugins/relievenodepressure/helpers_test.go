package relievenodepressure

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	policylisters "k8s.io/client-go/listers/policy/v1"
	clientgotesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/descheduler/evictions"
	"sigs.k8s.io/descheduler/pkg/framework/plugins/defaultevictor"
	frameworktesting "sigs.k8s.io/descheduler/pkg/framework/testing"
	"sigs.k8s.io/descheduler/test"

	"github.com/headroom-k8s/headroom/pkg/ipstarved"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

func hotNodePods(node string, n int) []*v1.Pod {
	var pods []*v1.Pod
	for i := range n {
		pods = append(pods, testPod(node+"-"+string(rune('a'+i)), node, pids(300), restarts(int32(n-i))))
	}
	return pods
}

// memoryNode has 10Gi of memory, all allocatable, and PID use of 50 %.
func memoryNode(name string) *v1.Node {
	return test.BuildTestNode(name, 64000, 10<<30, 110, func(n *v1.Node) {
		n.Annotations = pidstats.NodeStats{Capacity: 10000, Used: 5000, SampledAt: now.Add(-time.Minute)}.Annotations()
	})
}

// listed sets node's headroom.dev/pid-pods to the pods' measured PIDs.
func listed(node *v1.Node, usage map[*v1.Pod]int64) *v1.Node {
	var u []pidstats.PodUsage
	for pod, n := range usage {
		u = append(u, pidstats.PodUsage{UID: pod.UID, Value: n})
	}
	node.Annotations[pidstats.AnnotationPIDPods] = pidstats.NewPodList(u).String()
	return node
}

// holding is every pod of pods but those named, each holding n.
func holding(n int64, pods []*v1.Pod, except ...string) map[*v1.Pod]int64 {
	usage := map[*v1.Pod]int64{}
	for _, p := range pods {
		if !slices.Contains(except, p.Name) {
			usage[p] = n
		}
	}
	return usage
}

func ownedByDaemonSet(p *v1.Pod) {
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "ds", UID: "ds-uid", Controller: ptr.To(true)}}
}

func scheduledBy(name string) podOption { return func(p *v1.Pod) { p.Spec.SchedulerName = name } }

func podPriority(v int32) podOption { return func(p *v1.Pod) { p.Spec.Priority = ptr.To(v) } }

func terminatingPod(p *v1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }

func nodeCount(t *testing.T, result string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(NodesTotal.WithLabelValues(result))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func evictionCount(t *testing.T, reason string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(EvictionsTotal.WithLabelValues(reason))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func withOpts(p *v1.Pod, opts ...podOption) *v1.Pod {
	p = p.DeepCopy()
	for _, o := range opts {
		o(p)
	}
	return p
}

func cordoned(n *v1.Node) *v1.Node { n.Spec.Unschedulable = true; return n }

func tainted(n *v1.Node, key string) *v1.Node {
	n.Spec.Taints = append(n.Spec.Taints, v1.Taint{Key: key, Effect: v1.TaintEffectNoSchedule})
	return n
}

// now is the clock of every unit test.
var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// pidNode is a ready node with room for any test pod whose PID sample, a
// minute old, reports used of capacity PIDs.
func pidNode(name string, capacity, used int64) *v1.Node {
	return test.BuildTestNode(name, 64000, 64<<30, 110, func(n *v1.Node) {
		n.Annotations = pidstats.NodeStats{Capacity: capacity, Used: used, SampledAt: now.Add(-time.Minute)}.Annotations()
	})
}

// spareNode is a ready node without PID annotations, where evicted pods fit.
func spareNode(name string) *v1.Node {
	return test.BuildTestNode(name, 64000, 64<<30, 110, nil)
}

type podOption func(*v1.Pod)

// testPod is a Running pod on node, Ready for 2h, scheduled before any
// sample, controlled by ReplicaSet "rs".
func testPod(name, node string, opts ...podOption) *v1.Pod {
	pod := test.BuildTestPod(name, 100, 0, node, nil)
	pod.Spec.Containers[0].Name = "app"
	pod.Spec.SchedulerName = DefaultSchedulerName
	pod.CreationTimestamp = metav1.NewTime(now.Add(-3 * time.Hour))
	pod.Status.Phase = v1.PodRunning
	pod.Status.StartTime = &metav1.Time{Time: now.Add(-3 * time.Hour)}
	pod.Status.Conditions = []v1.PodCondition{
		{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-3 * time.Hour))},
		{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Hour))},
	}
	pod.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", Ready: true}}
	ownedBy("rs")(pod)
	for _, o := range opts {
		o(pod)
	}
	return pod
}

func ownedBy(rs string) podOption {
	return func(p *v1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs, UID: types.UID(rs + "-uid"), Controller: ptr.To(true),
		}}
	}
}

func annotate(key, value string) podOption {
	return func(p *v1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[key] = value
	}
}

func pids(n int64) podOption { return annotate(pidstats.AnnotationPodPIDs, fmt.Sprint(n)) }
func priority(v string) podOption {
	return annotate("controller.alpha.kubernetes.io/delete-priority", v)
}
func deletionCost(v string) podOption {
	return annotate("controller.kubernetes.io/pod-deletion-cost", v)
}

func inNamespace(ns string) podOption { return func(p *v1.Pod) { p.Namespace = ns } }

func withLabels(kv ...string) podOption {
	return func(p *v1.Pod) {
		p.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func notReady(p *v1.Pod) {
	p.Status.Conditions[1].Status = v1.ConditionFalse
	p.Status.ContainerStatuses[0].Ready = false
}

func pending(p *v1.Pod) {
	notReady(p)
	p.Status.Phase = v1.PodPending
}

func readyFor(d time.Duration) podOption {
	return func(p *v1.Pod) { p.Status.Conditions[1].LastTransitionTime = metav1.NewTime(now.Add(-d)) }
}

func restarts(n int32) podOption {
	return func(p *v1.Pod) { p.Status.ContainerStatuses[0].RestartCount = n }
}

func noOwner(p *v1.Pod) { p.OwnerReferences = nil }

// specPriority sets spec.priority, as the priority admission plugin does.
func specPriority(v int32) podOption {
	return func(p *v1.Pod) { p.Spec.Priority = ptr.To(v) }
}

func systemCritical(p *v1.Pod) {
	p.Spec.PriorityClassName = "system-node-critical"
	p.Spec.Priority = ptr.To[int32](2000001000)
}

// memoryLimit makes the pod Burstable with a memory limit of limit bytes.
func memoryLimit(limit int64) podOption {
	return func(p *v1.Pod) {
		p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = *resource.NewQuantity(limit/4, resource.BinarySI)
		p.Spec.Containers[0].Resources.Limits[v1.ResourceMemory] = *resource.NewQuantity(limit, resource.BinarySI)
	}
}

// env is a descheduler framework handle on a fake clientset, with the real
// DefaultEvictor and PodEvictor, as upstream's plugin tests build it.
type env struct {
	client   *fake.Clientset
	evictor  *evictions.PodEvictor
	plugin   *RelieveNodePressure
	warnings *events.FakeRecorder

	mu      sync.Mutex
	evicted []string          // pod names in the order their evictions were requested
	reasons map[string]string // the eviction's reason annotation, by pod name
}

type setup struct {
	args        RelieveNodePressureArgs
	evictions   *evictions.Options
	evictorArgs defaultevictor.DefaultEvictorArgs
	// refuse makes the API server refuse these pods' evictions with 429, as
	// a PodDisruptionBudget does.
	refuse []string
	// unanswered makes the API server evict these pods but the client see
	// the error instead of the answer (a timeout, a dropped connection).
	unanswered map[string]error
	// ips replaces the pod-IP source the args name (a live source that
	// ipSource CalicoIPAM would watch).
	ips ipstats.Source
}

func newEnv(t *testing.T, s setup, objs ...runtime.Object) *env {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	e := &env{client: fake.NewClientset(objs...), reasons: map[string]string{}, warnings: events.NewFakeRecorder(100)}
	e.client.PrependReactor("create", "pods", func(action clientgotesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		ev := action.(clientgotesting.CreateAction).GetObject().(*policyv1.Eviction)
		for _, name := range s.refuse {
			if ev.Name == name {
				return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
			}
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		e.evicted = append(e.evicted, ev.Name)
		e.reasons[ev.Name] = ev.Annotations["reason"]
		if err, ok := s.unanswered[ev.Name]; ok {
			return true, nil, err
		}
		return false, nil, nil
	})
	if s.evictions == nil {
		s.evictions = evictions.NewOptions()
	}
	// One sample above a threshold is enough here; the debounce has tests
	// of its own, which set pressureSamples.
	if s.args.PressureSamples == nil {
		s.args.PressureSamples = ptr.To[int32](1)
	}
	handle, podEvictor, err := frameworktesting.InitFrameworkHandle(ctx, e.client, s.evictions, s.evictorArgs, nil)
	if err != nil {
		t.Fatalf("framework handle: %v", err)
	}
	e.evictor = podEvictor
	p, err := newPlugin(ctx, &s.args, handle, e.warnings)
	if err != nil {
		t.Fatalf("newPlugin: %v", err)
	}
	p.now = func() time.Time { return now }
	if s.ips != nil {
		p.ips = s.ips
	}
	e.plugin = p
	// The informers the plugin requested in New, as the descheduler starts
	// them after building its plugins.
	handle.SharedInformerFactory().Start(ctx.Done())
	handle.SharedInformerFactory().WaitForCacheSync(ctx.Done())
	return e
}

// run runs one Deschedule over nodes and returns the evicted pods' names in
// the order the plugin requested their evictions.
func (e *env) run(t *testing.T, nodes ...*v1.Node) []string {
	t.Helper()
	if st := e.plugin.Deschedule(context.Background(), nodes); st != nil && st.Err != nil {
		t.Fatalf("Deschedule: %v", st.Err)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.evicted...)
}

// warningEvents drains the plugin's Warning Events.
func (e *env) warningEvents() []string {
	var out []string
	for {
		select {
		case ev := <-e.warnings.Events:
			out = append(out, ev)
		default:
			return out
		}
	}
}

func objects(nodes []*v1.Node, pods []*v1.Pod) []runtime.Object {
	var objs []runtime.Object
	for _, n := range nodes {
		objs = append(objs, n)
	}
	for _, p := range pods {
		objs = append(objs, p)
	}
	return objs
}

func equal(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

// ipNode is a ready node whose pod-IP sample, a minute old, reports used of
// capacity pod IPs allocated.
func ipNode(name string, capacity, used int64) *v1.Node {
	return test.BuildTestNode(name, 64000, 64<<30, 110, func(n *v1.Node) {
		n.Annotations = ipstats.NodeStats{Capacity: capacity, Used: used, SampledAt: now.Add(-time.Minute)}.Annotations()
	})
}

// waitingForSandbox makes the pod Pending with its sandbox not made, as the
// kubelet reports a pod whose RunPodSandbox fails: PodReadyToStartContainers
// False, its container waiting in ContainerCreating.
func waitingForSandbox(p *v1.Pod) {
	p.Status.Phase = v1.PodPending
	p.Status.Conditions = []v1.PodCondition{
		{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-3 * time.Hour))},
		{Type: v1.PodReadyToStartContainers, Status: v1.ConditionFalse, LastTransitionTime: metav1.NewTime(now.Add(-3 * time.Hour))},
		{Type: v1.PodReady, Status: v1.ConditionFalse, LastTransitionTime: metav1.NewTime(now.Add(-3 * time.Hour))},
	}
	p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app",
		State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
}

// pullingImage makes the pod Pending with its sandbox made and its
// container waiting for its image.
func pullingImage(p *v1.Pod) {
	waitingForSandbox(p)
	p.Status.Conditions[1].Status = v1.ConditionTrue
	p.Status.ContainerStatuses[0].State.Waiting.Reason = "ErrImagePull"
}

// hostLocalExhausted is the kubelet's FailedCreatePodSandBox message when
// host-local has no address left (test/integration TestRealNodeIPsRunOut).
const hostLocalExhausted = `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "0123": plugin type="bridge" failed (add): failed to allocate for range 0: no IP addresses available in range set: 10.88.0.1-10.88.0.14`

// sandboxFailure is the kubelet's FailedCreatePodSandBox Event on pod,
// first reported at first (when the API server created it) and last at
// last.
func sandboxFailure(pod *v1.Pod, first, last time.Time, message string) *v1.Event {
	return &v1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%d", pod.Name, first.UnixNano()), Namespace: pod.Namespace,
			CreationTimestamp: metav1.NewTime(first)},
		InvolvedObject: v1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID},
		Reason:         ipstarved.ReasonFailedCreatePodSandBox, Message: message, Type: v1.EventTypeWarning,
		Source:              v1.EventSource{Component: ipstarved.Kubelet, Host: pod.Spec.NodeName},
		ReportingController: ipstarved.Kubelet, ReportingInstance: pod.Spec.NodeName,
		FirstTimestamp: metav1.NewTime(first), LastTimestamp: metav1.NewTime(last),
	}
}

// failingPDBLister fails every lookup, as a broken cache would.
type failingPDBLister struct {
	policylisters.PodDisruptionBudgetLister
}

func (failingPDBLister) GetPodPodDisruptionBudgets(*v1.Pod) ([]*policyv1.PodDisruptionBudget, error) {
	return nil, errors.New("cache broken")
}
