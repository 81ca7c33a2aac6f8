package oomrisk

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/headroom-k8s/headroom/apis/config"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
)

func defaultArgs() *config.OOMRiskArgs {
	return &config.OOMRiskArgs{
		OwnRiskWeight:              configv1.DefaultOwnRiskWeight,
		CollateralWeight:           configv1.DefaultCollateralWeight,
		NoLimitRequestPercent:      configv1.DefaultNoLimitRequestPercent,
		NoLimitAllocatablePermille: configv1.DefaultNoLimitAllocatablePermille,
		MaxSampleAge:               metav1.Duration{Duration: configv1.DefaultMaxSampleAge},
	}
}

func node(name, memory string) *corev1.Node {
	return st.MakeNode().Name(name).Capacity(map[corev1.ResourceName]string{
		corev1.ResourceCPU:    "8",
		corev1.ResourceMemory: memory,
	}).Obj()
}

// pod returns a pod of one container "app" with the given memory request
// and limit ("" leaves it unset), bound to nodeName ("" for an incoming pod).
func pod(name, nodeName, request, limit string) *corev1.Pod {
	c := st.MakeContainer().Name("app").Obj()
	if request != "" {
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(request)}
	}
	if limit != "" {
		c.Resources.Limits = corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(limit)}
	}
	p := st.MakePod().Namespace("default").Name(name).UID(name).Containers([]corev1.Container{c})
	if nodeName != "" {
		p = p.Node(nodeName)
	}
	return p.Obj()
}

// guaranteedPod returns a Guaranteed pod: CPU and memory limits equal to
// requests.
func guaranteedPod(name, nodeName, memory string) *corev1.Pod {
	c := st.MakeContainer().Name("app").Resources(map[corev1.ResourceName]string{
		corev1.ResourceCPU:    "1",
		corev1.ResourceMemory: memory,
	}).Obj()
	p := st.MakePod().Namespace("default").Name(name).UID(name).Containers([]corev1.Container{c})
	if nodeName != "" {
		p = p.Node(nodeName)
	}
	return p.Obj()
}

// crowdedAndLight returns two 16Gi nodes: "crowded" holds four Burstable
// pods of 1Gi request and 8Gi limit (limits at twice the node), "light" two
// of 512Mi request and 1Gi limit.
func crowdedAndLight() ([]*corev1.Pod, []*corev1.Node) {
	var pods []*corev1.Pod
	for _, name := range []string{"c1", "c2", "c3", "c4"} {
		pods = append(pods, pod(name, "crowded", "1Gi", "8Gi"))
	}
	for _, name := range []string{"l1", "l2"} {
		pods = append(pods, pod(name, "light", "512Mi", "1Gi"))
	}
	return pods, []*corev1.Node{node("crowded", "16Gi"), node("light", "16Gi")}
}

// newPlugin builds the plugin on a framework whose snapshot is snapshot.
func newPlugin(t testing.TB, args *config.OOMRiskArgs, snapshot *cache.Snapshot) *OOMRisk {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	fh, err := runtime.NewFramework(ctx, nil, nil, runtime.WithSnapshotSharedLister(snapshot))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		waitForShutdown(fh)
	})
	pl, err := New(ctx, args, fh)
	if err != nil {
		t.Fatal(err)
	}
	return pl.(*OOMRisk)
}

func nodeInfo(t testing.TB, snapshot *cache.Snapshot, name string) fwk.NodeInfo {
	t.Helper()
	ni, err := snapshot.NodeInfos().Get(name)
	if err != nil {
		t.Fatal(err)
	}
	return ni
}

// bigPodCycle builds the plugin on the crowded and light nodes and runs
// PreScore for a Burstable 256Mi/12Gi pod, the case most tests score.
func bigPodCycle(t *testing.T) (*OOMRisk, *cache.Snapshot, *corev1.Pod, fwk.CycleState) {
	t.Helper()
	pods, nodes := crowdedAndLight()
	snapshot := cache.NewSnapshot(pods, nodes)
	pl := newPlugin(t, defaultArgs(), snapshot)
	p := pod("big", "", "256Mi", "12Gi")
	state := framework.NewCycleState()
	if s := pl.PreScore(context.Background(), state, p, nil); !s.IsSuccess() {
		t.Fatalf("PreScore: %v", s)
	}
	return pl, snapshot, p, state
}
