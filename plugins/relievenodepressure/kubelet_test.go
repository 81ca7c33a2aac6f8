package relievenodepressure

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
)

// kubeletStats is a kubelet's Summary API as the eviction manager reads it:
// the node's figures and each pod's.
type kubeletStats struct{ summary *statsapi.Summary }

func (s kubeletStats) Get(context.Context, bool) (*statsapi.Summary, error) { return s.summary, nil }
func (s kubeletStats) GetCPUAndMemoryStats(context.Context) (*statsapi.Summary, error) {
	return s.summary, nil
}

// noGC has nothing to collect: the manager must evict.
type noGC struct{}

func (noGC) DeleteUnusedImages(context.Context) error        { return nil }
func (noGC) DeleteAllUnusedContainers(context.Context) error { return nil }

type noDedicatedFs struct{}

func (noDedicatedFs) HasDedicatedImageFs(context.Context) (bool, error)     { return false, nil }
func (noDedicatedFs) HasDedicatedContainerFs(context.Context) (bool, error) { return false, nil }

// kubeletVictim runs the kubelet's own eviction manager (k8s.io/kubernetes
// v1.36 pkg/kubelet/eviction, NewManager and Start, as the kubelet starts
// it) on a node whose Summary API reports summary, with one hard eviction
// threshold that summary meets, and returns the pod it kills first. The
// manager's loop then waits, on a fake clock that never moves, for the pod
// to be cleaned up: it kills nothing more.
func kubeletVictim(t *testing.T, threshold evictionapi.Threshold, summary *statsapi.Summary, pods []*v1.Pod) string {
	t.Helper()
	killed := make(chan string, 1)
	kill := func(pod *v1.Pod, _ bool, _ *int64, _ func(*v1.PodStatus)) error {
		killed <- pod.Name
		return nil
	}
	manager, _ := eviction.NewManager(kubeletStats{summary}, eviction.Config{
		PressureTransitionPeriod: 5 * time.Minute,
		Thresholds:               []evictionapi.Threshold{threshold},
	}, kill, noGC{}, noGC{}, &record.FakeRecorder{}, &v1.ObjectReference{Kind: "Node", Name: "n1"},
		testingclock.NewFakeClock(now), false)
	active := func() []*v1.Pod { return append([]*v1.Pod(nil), pods...) }
	manager.Start(t.Context(), noDedicatedFs{}, active, func(*v1.Pod) bool { return true }, time.Hour)
	select {
	case name := <-killed:
		return name
	case <-time.After(30 * time.Second):
		t.Fatal("the kubelet's eviction manager killed no pod")
		return ""
	}
}

// The first pod the plan evicts is the kubelet's own victim: for random
// nodes under PID or memory pressure, with pods of several workloads and
// priorities, the kubelet's eviction manager, fed the node agent's per-pod
// figures as its Summary API, kills the pod the plugin evicts first. Every
// pod may be evicted and frees more than the floor, and no two pods tie in
// the kubelet's ranking (it sorts unstably, so a tie has no one victim).
func TestKubeletRanksAsThePlan(t *testing.T) {
	victims := map[string]int{}
	notLargest := 0
	for seed := range uint64(120) {
		r := rand.New(rand.NewPCG(seed, 36))
		memory := seed%2 == 1
		var pods []*v1.Pod
		held := map[*v1.Pod]int64{}
		taken := map[int64]bool{}
		for i := range 3 + r.IntN(5) {
			owner := fmt.Sprintf("w%d", r.IntN(3))
			opts := []podOption{ownedBy(owner), podPriority([]int32{0, 0, 100, 1000}[r.IntN(4)]), restarts(int32(r.IntN(3)))}
			var figure, key int64
			for {
				if memory {
					request := []int64{0, 128 * mib, 512 * mib, gib}[r.IntN(4)]
					figure = int64(200+r.IntN(1300)) * mib
					key = figure - request
					opts = append(opts, memoryRequest(request))
				} else {
					figure = int64(150 + r.IntN(1350))
					key = figure
				}
				if !taken[key] {
					taken[key] = true
					break
				}
				opts = opts[:3]
			}
			p := testPod(fmt.Sprintf("%s-%d", owner, i), "n1", opts...)
			pods = append(pods, p)
			held[p] = figure
		}

		var n1 *v1.Node
		var threshold evictionapi.Threshold
		summary := &statsapi.Summary{Node: statsapi.NodeStats{NodeName: "n1"}}
		sampled := metav1.NewTime(now.Add(-time.Minute))
		args := RelieveNodePressureArgs{}
		if memory {
			// 9.5Gi of 10Gi: 95 % > the plugin's 90 %, and 512Mi available
			// < the kubelet's 1Gi.
			used := 95 * gib / 10
			n1 = measuredNode("n1", used, held)
			args.Memory = &MemoryTrigger{}
			threshold = evictionapi.Threshold{Signal: evictionapi.SignalMemoryAvailable, Operator: evictionapi.OpLessThan,
				Value: evictionapi.ThresholdValue{Quantity: ptr.To(resource.MustParse("1Gi"))}}
			summary.Node.Memory = &statsapi.MemoryStats{Time: sampled,
				AvailableBytes: ptr.To(uint64(10*gib - used)), WorkingSetBytes: ptr.To(uint64(used))}
		} else {
			// 9700 of 10000: 97 % > 95 %, and 300 available < 1000.
			n1 = listed(pidNode("n1", 10000, 9700), held)
			args.PIDs = &PIDsTrigger{}
			threshold = evictionapi.Threshold{Signal: evictionapi.SignalPIDAvailable, Operator: evictionapi.OpLessThan,
				Value: evictionapi.ThresholdValue{Quantity: ptr.To(resource.MustParse("1000"))}}
			summary.Node.Rlimit = &statsapi.RlimitStats{Time: sampled, MaxPID: ptr.To[int64](10000), NumOfRunningProcesses: ptr.To[int64](9700)}
		}
		for _, p := range pods {
			ps := statsapi.PodStats{PodRef: statsapi.PodReference{Name: p.Name, Namespace: p.Namespace, UID: string(p.UID)}}
			if memory {
				ps.Memory = &statsapi.MemoryStats{Time: sampled, WorkingSetBytes: ptr.To(uint64(held[p]))}
			} else {
				ps.ProcessStats = &statsapi.ProcessStats{ProcessCount: ptr.To(uint64(held[p]))}
			}
			summary.Pods = append(summary.Pods, ps)
		}

		nodes := []*v1.Node{n1, spareNode("n2")}
		e := newEnv(t, setup{args: args}, objects(nodes, pods)...)
		p, evict, _ := planned(t, e, nodes, n1)
		if !p.Relieves || len(evict) == 0 {
			t.Fatalf("seed %d: the plan relieves %v, evicts %v", seed, p.Relieves, evict)
		}
		kubelet := kubeletVictim(t, threshold, summary, pods)
		if evict[0] != kubelet {
			t.Fatalf("seed %d (memory %v): the plan evicts %v first, the kubelet %s; pods %v", seed, memory, evict, kubelet, describe(pods, held))
		}
		victims[kubelet]++
		largest := pods[0]
		for _, p := range pods {
			if held[p] > held[largest] {
				largest = p
			}
		}
		if kubelet != largest.Name {
			notLargest++
		}
	}
	// Not vacuous: the victims vary, and priority or requests often make
	// the victim another pod than the largest user.
	if len(victims) < 5 || notLargest == 0 {
		t.Fatalf("victims %v, %d not the largest user: the cases exercise too little", victims, notLargest)
	}
	t.Logf("%d cases; the victim was not the largest user in %d", 120, notLargest)
}

func describe(pods []*v1.Pod, held map[*v1.Pod]int64) string {
	var s string
	for _, p := range pods {
		s += fmt.Sprintf(" %s(priority %d, holds %d, requests %s)", p.Name, ptr.Deref(p.Spec.Priority, 0), held[p],
			p.Spec.Containers[0].Resources.Requests.Memory())
	}
	return s
}
