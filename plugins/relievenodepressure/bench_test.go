package relievenodepressure

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	clientgotesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"
	"k8s.io/component-base/featuregate"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/descheduler/evictions"
	podutil "sigs.k8s.io/descheduler/pkg/descheduler/pod"
	"sigs.k8s.io/descheduler/pkg/features"
	frameworkfake "sigs.k8s.io/descheduler/pkg/framework/fake"
	"sigs.k8s.io/descheduler/pkg/framework/plugins/defaultevictor"
	"sigs.k8s.io/descheduler/pkg/framework/plugins/removepodsviolatingnodetaints"
	frameworktypes "sigs.k8s.io/descheduler/pkg/framework/types"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// The benchmark clusters: benchNodes nodes (each size in turn) of benchPods
// pods each. Every
// benchEvery-th node is under PID pressure (RelieveNodePressure evicts
// three of its pods) and tainted NoSchedule (RemovePodsViolatingNodeTaints
// evicts the three pods that do not tolerate it), so that both plugins walk
// every node and evict the same number of pods.
var benchNodes = []int{5000, 15000}

const (
	benchPods  = 30
	benchEvery = 100
	benchTaint = "example.com/bench"
)

type benchCluster struct {
	nodes []*v1.Node
	pods  map[string][]*v1.Pod
}

// benchClusters holds the clusters built so far, by node count: the
// benchmark and its baseline walk the same one.
var benchClusters = map[int]*benchCluster{}

func benchUID(node, pod int) types.UID {
	return types.UID(fmt.Sprintf("%08x-0000-4000-8000-%012x", node, pod))
}

func newBenchCluster(benchNodes int) *benchCluster {
	c := &benchCluster{pods: make(map[string][]*v1.Pod, benchNodes)}
	sampled := now.Add(-time.Minute)
	for n := range benchNodes {
		name := fmt.Sprintf("node-%04d", n)
		pressured := n%benchEvery == 0
		pods := make([]*v1.Pod, benchPods)
		usage := make([]pidstats.PodUsage, benchPods)
		for i := range pods {
			p := &v1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name: fmt.Sprintf("%s-pod-%02d", name, i), Namespace: fmt.Sprintf("ns-%d", i%10), UID: benchUID(n, i),
					CreationTimestamp: metav1.NewTime(now.Add(-3 * time.Hour)),
					OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet",
						Name: fmt.Sprintf("rs-%d", i%10), UID: types.UID(fmt.Sprintf("rs-%d", i%10)), Controller: ptr.To(true)}},
				},
				Spec: v1.PodSpec{NodeName: name, SchedulerName: DefaultSchedulerName, Containers: []v1.Container{{Name: "app"}}},
				Status: v1.PodStatus{Phase: v1.PodRunning, StartTime: &metav1.Time{Time: now.Add(-3 * time.Hour)},
					Conditions: []v1.PodCondition{{Type: v1.PodScheduled, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-3 * time.Hour))},
						{Type: v1.PodReady, Status: v1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-2 * time.Hour))}}},
			}
			usage[i] = pidstats.PodUsage{UID: p.UID, Value: 100}
			if i < 3 {
				usage[i].Value = 1500 // the three pods each plugin evicts
			} else {
				p.Spec.Tolerations = []v1.Toleration{{Key: benchTaint, Operator: v1.TolerationOpExists}}
			}
			pods[i] = p
		}
		used := int64(50000)
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if pressured {
			used = 97000
			node.Spec.Taints = []v1.Taint{{Key: benchTaint, Value: "x", Effect: v1.TaintEffectNoSchedule}}
		}
		node.Annotations = pidstats.NodeStats{Capacity: 100000, Used: used, SampledAt: sampled}.Annotations()
		node.Annotations[pidstats.AnnotationPIDPods] = pidstats.NewPodList(usage).String()
		c.nodes = append(c.nodes, node)
		c.pods[name] = pods
	}
	return c
}

// benchHandle is a descheduler handle over the cluster held in memory, with
// the real DefaultEvictor and PodEvictor; the API server accepts every
// eviction without changing the cluster, so every iteration does the same
// work.
func benchHandle(b *testing.B, ctx context.Context, c *benchCluster) (*frameworkfake.HandleImpl, *int) {
	// The simple tracker, as the descheduler's own dry-run sandbox: the
	// benchmark counts the descheduler's CPU, and NewClientset's
	// field-managed tracker does the API server's field management in this
	// process on every write (a REST mapper rebuilt per write), the
	// server's cost, not the plugin's (docs/performance.md).
	client := fake.NewSimpleClientset()
	evicted := new(int)
	var mu sync.Mutex
	client.PrependReactor("create", "pods", func(action clientgotesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "eviction" {
			mu.Lock()
			*evicted++
			mu.Unlock()
			return true, nil, nil
		}
		return false, nil, nil
	})
	factory := informers.NewSharedInformerFactory(client, 0)
	podsOn := func(node string, filter podutil.FilterFunc) ([]*v1.Pod, error) {
		var out []*v1.Pod
		for _, p := range c.pods[node] {
			if filter == nil || filter(p) {
				out = append(out, p)
			}
		}
		return out, nil
	}
	gates := featuregate.NewFeatureGate()
	if err := gates.Add(map[featuregate.Feature]featuregate.FeatureSpec{features.EvictionsInBackground: {Default: false, PreRelease: featuregate.Alpha}}); err != nil {
		b.Fatal(err)
	}
	podEvictor, err := evictions.NewPodEvictor(ctx, client, &events.FakeRecorder{}, factory.Core().V1().Pods().Informer(), gates, evictions.NewOptions())
	if err != nil {
		b.Fatal(err)
	}
	handle := &frameworkfake.HandleImpl{ClientsetImpl: client, GetPodsAssignedToNodeFuncImpl: podsOn, SharedInformerFactoryImpl: factory, PodEvictorImpl: podEvictor}
	evictor, err := defaultevictor.New(ctx, &defaultevictor.DefaultEvictorArgs{}, handle)
	if err != nil {
		b.Fatal(err)
	}
	handle.EvictorFilterImpl = evictor.(frameworktypes.EvictorPlugin)
	return handle, evicted
}

// processCPU is the CPU time the process used so far, user and system.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchDeschedule(b *testing.B, build func(context.Context, frameworktypes.Handle) (frameworktypes.DeschedulePlugin, error)) {
	for _, benchNodes := range benchNodes {
		benchC := benchClusters[benchNodes]
		if benchC == nil {
			benchC = newBenchCluster(benchNodes)
			benchClusters[benchNodes] = benchC
		}
		benchDescheduleOn(b, benchC, benchNodes, build)
	}
}

func benchDescheduleOn(b *testing.B, benchC *benchCluster, benchNodes int, build func(context.Context, frameworktypes.Handle) (frameworktypes.DeschedulePlugin, error)) {
	b.Run(fmt.Sprintf("nodes=%d,pods=%d", benchNodes, benchPods), func(b *testing.B) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		handle, evicted := benchHandle(b, ctx, benchC)
		pl, err := build(ctx, handle)
		if err != nil {
			b.Fatal(err)
		}
		handle.SharedInformerFactory().Start(ctx.Done())
		handle.SharedInformerFactory().WaitForCacheSync(ctx.Done())
		b.ReportAllocs()
		b.ResetTimer()
		cpu := processCPU(b)
		for b.Loop() {
			if st := pl.Deschedule(ctx, benchC.nodes); st != nil && st.Err != nil {
				b.Fatal(st.Err)
			}
		}
		// CPU time, the garbage collector's included: on a busy machine the
		// wall time (ns/op) also counts waiting for a core.
		b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N), "cpu-ns/op")
		b.StopTimer()
		if want := 3 * benchNodes / benchEvery * b.N; *evicted != want {
			b.Fatalf("%d evictions in %d passes, want %d", *evicted, b.N, want)
		}
	})
}

// BenchmarkDeschedule is one RelieveNodePressure pass over the cluster with
// the shipped defaults, but for the debounce: every pass acts on the same
// sample (pressureSamples 1), reading and writing its record as a run does.
func BenchmarkDeschedule(b *testing.B) {
	benchDeschedule(b, func(ctx context.Context, h frameworktypes.Handle) (frameworktypes.DeschedulePlugin, error) {
		p, err := newPlugin(ctx, &RelieveNodePressureArgs{PressureSamples: ptr.To[int32](1)}, h, nil)
		if err != nil {
			return nil, err
		}
		p.now = func() time.Time { return now }
		return p, nil
	})
}

// BenchmarkDescheduleBaselineRemovePodsViolatingNodeTaints is upstream's
// own Deschedule plugin over the same cluster, evicting as many pods.
func BenchmarkDescheduleBaselineRemovePodsViolatingNodeTaints(b *testing.B) {
	benchDeschedule(b, func(ctx context.Context, h frameworktypes.Handle) (frameworktypes.DeschedulePlugin, error) {
		args := &removepodsviolatingnodetaints.RemovePodsViolatingNodeTaintsArgs{}
		removepodsviolatingnodetaints.SetDefaults_RemovePodsViolatingNodeTaintsArgs(args)
		p, err := removepodsviolatingnodetaints.New(ctx, args, h)
		if err != nil {
			return nil, err
		}
		return p.(frameworktypes.DeschedulePlugin), nil
	})
}
