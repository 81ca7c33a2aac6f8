package perf

import (
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	inTree "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
)

// BenchmarkTightCycle runs the scheduling cycles of TightFleet without the
// API server: each profile's framework, built as kube-scheduler builds it,
// on a snapshot of 5,000 tight nodes (node-tight.yaml) holding a pod each,
// Filter over every node from a turning start, PreScore and Score over the
// first 500 feasible ones (kube-scheduler's share at 5,000 nodes), and the
// pod assumed onto the best. What it reports per cycle is the scheduler's
// own work, in which a CPU profile (-cpuprofile) shows Headroom's share
// without kube-apiserver's.
func BenchmarkTightCycle(b *testing.B) {
	// HeadroomTightFloor: the framework's own cost of the three plugins
	// (stand-ins that do nothing, noop_test.go).
	for _, p := range profiles(b, b.TempDir(), []string{"Default", "Headroom", "HeadroomTightFloor"}) {
		b.Run(p.Name, func(b *testing.B) {
			const nodes, toScore = 5000, 500
			snapshot := tightSnapshot(nodes)
			fw := newFramework(b, p.Config, snapshot)
			infos, err := snapshot.NodeInfos().List()
			if err != nil {
				b.Fatal(err)
			}
			ctx := b.Context()
			start := 0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				pod := tightPod(fmt.Sprintf("incoming-%d", i), fw.ProfileName())
				state := framework.NewCycleState()
				if _, s, _ := fw.RunPreFilterPlugins(ctx, state, pod); !s.IsSuccess() && !s.IsSkip() {
					b.Fatal(s)
				}
				feasible := make([]fwk.NodeInfo, 0, toScore)
				for j := 0; j < len(infos) && len(feasible) < toScore; j++ {
					ni := infos[(start+j)%len(infos)]
					if s := fw.RunFilterPlugins(ctx, state, pod, ni); s.IsSuccess() {
						feasible = append(feasible, ni)
					}
				}
				start = (start + toScore) % len(infos)
				if s := fw.RunPreScorePlugins(ctx, state, pod, feasible); !s.IsSuccess() {
					b.Fatal(s)
				}
				scores, s := fw.RunScorePlugins(ctx, state, pod, feasible)
				if !s.IsSuccess() {
					b.Fatal(s)
				}
				best := 0
				for k := range scores {
					if scores[k].TotalScore > scores[best].TotalScore {
						best = k
					}
				}
				pod.Spec.NodeName = scores[best].Name
				feasible[best].(*framework.NodeInfo).AddPod(pod)
			}
		})
	}
}

// newFramework builds the first profile of the configuration in path as
// kube-scheduler does, on snapshot.
func newFramework(b *testing.B, path string, snapshot *cache.Snapshot) framework.Framework {
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(raw, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	cfg := obj.(*schedconfig.KubeSchedulerConfiguration)
	// DynamicResources needs the scheduler's DRA manager, and no pod here
	// claims a device.
	if p := cfg.Profiles[0].Plugins; p != nil {
		p.MultiPoint.Enabled = slices.DeleteFunc(p.MultiPoint.Enabled, func(pl schedconfig.Plugin) bool { return pl.Name == names.DynamicResources })
	}
	schedmetrics.Register()
	all := inTree.NewInTreeRegistry()
	if err := all.Merge(registry()); err != nil {
		b.Fatal(err)
	}
	client := fake.NewClientset()
	fw, err := frameworkruntime.NewFramework(b.Context(), all, &cfg.Profiles[0],
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(client, 0)),
		frameworkruntime.WithSnapshotSharedLister(snapshot))
	if err != nil {
		b.Fatal(err)
	}
	return fw
}

// tightSnapshot is a snapshot of n nodes as node-tight.yaml, each with one
// pod placed long before its sample.
func tightSnapshot(n int) *cache.Snapshot {
	sampledAt := time.Now().UTC().Format(time.RFC3339)
	var nodes []*corev1.Node
	var pods []*corev1.Pod
	for i := range n {
		name := fmt.Sprintf("tight-%d", i)
		nodes = append(nodes, st.MakeNode().Name(name).
			Capacity(map[corev1.ResourceName]string{corev1.ResourcePods: "110", corev1.ResourceCPU: "4", corev1.ResourceMemory: "1536Mi"}).
			Annotation("headroom.dev/pid-capacity", "65536").Annotation("headroom.dev/pid-reserved", "1000").
			Annotation("headroom.dev/pid-used", "40000").Annotation("headroom.dev/pid-sampled-at", sampledAt).
			Annotation("headroom.dev/ip-capacity", "253").Annotation("headroom.dev/ip-used", "200").
			Annotation("headroom.dev/ip-sampled-at", sampledAt).Obj())
		p := tightPod(fmt.Sprintf("placed-%d", i), "")
		p.Spec.NodeName = name
		pods = append(pods, p)
	}
	return cache.NewSnapshot(pods, nodes)
}

// tightPod is pod.yaml's pod.
func tightPod(name, schedulerName string) *corev1.Pod {
	p := st.MakePod().Namespace("perf").Name(name).UID(name).SchedulerName(schedulerName).
		Annotation("headroom.dev/pids", "200").
		Req(map[corev1.ResourceName]string{corev1.ResourceCPU: "100m", corev1.ResourceMemory: "500Mi"}).Obj()
	p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")}
	p.UID = types.UID(name)
	return p
}
