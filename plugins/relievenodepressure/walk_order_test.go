package relievenodepressure

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
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

// On n1 (capacity 10000, 9700 used: 97 % > 95 %) every pod frees 300 PIDs
// unless it says otherwise; reaching the default target of 90 % takes three.

func TestEvictsInDeleteOrderUntilTarget(t *testing.T) {
	// 9700 measured. The pending pod, bound before the sample but never
	// started, held nothing the sample saw: it frees nothing and is passed
	// over, though the ReplicaSet controller's order puts it second.
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	pods := []*v1.Pod{
		testPod("ready-long", "n1", pids(300)),
		testPod("ready-briefly", "n1", pids(300), readyFor(2*time.Minute)),
		testPod("not-ready", "n1", pids(300), notReady),
		testPod("pending", "n1", pids(300), pending),
		testPod("restarting", "n1", pids(300), restarts(5)),
		// The highest deletion cost, but delete priority ranks first.
		testPod("prioritised", "n1", pids(300), deletionCost("100"), priority("3")),
		testPod("cheap", "n1", pids(300), deletionCost("-5")),
	}
	order := []string{"prioritised", "not-ready", "cheap", "ready-briefly", "restarting", "ready-long"}

	e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, pods)...)
	// 9700 − 3×300 = 8800 ≤ 9000: the first three suffice.
	if got, want := e.run(t, n1, n2), order[:3]; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}

	// With a target of 0 every pod goes, showing the whole order.
	e = newEnv(t, setup{args: RelieveNodePressureArgs{PIDs: &PIDsTrigger{TargetPercent: ptr.To[int64](0)}}},
		objects([]*v1.Node{n1, n2}, pods)...)
	if got := e.run(t, n1, n2); !equal(got, order) {
		t.Fatalf("evicted %v, want the whole order %v", got, order)
	}
}

func TestRanksComeFromControllerOwners(t *testing.T) {
	// 9600 − 2×300 = 9000: two evictions. The three pods of "big" on one node
	// are doubled up and go before the lone pod of "small", all else equal.
	n1, n2 := pidNode("n1", 10000, 9600), spareNode("n2")
	pods := []*v1.Pod{
		testPod("a-small", "n1", pids(300), ownedBy("small")),
		testPod("big-1", "n1", pids(300), ownedBy("big")),
		testPod("big-2", "n1", pids(300), ownedBy("big")),
		testPod("big-3", "n1", pids(300), ownedBy("big")),
	}
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, pods)...)
	got := e.run(t, n1, n2)
	if len(got) != 2 || !strings.HasPrefix(got[0], "big-") || !strings.HasPrefix(got[1], "big-") {
		t.Fatalf("evicted %v, want two pods of ReplicaSet big", got)
	}
}

func TestLowerPriorityFirst(t *testing.T) {
	// A tenant's pod at high priority asks to go first; the batch pod at
	// priority 0 goes first anyway, as the kubelet would rank them.
	tenant := testPod("tenant", "n1", pids(1000), podPriority(1000), priority("100"), deletionCost("-100"))
	batch := testPod("batch", "n1", pids(1000), podPriority(0))
	n1 := pidNode("n1", 10000, 9700)
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{tenant, batch})...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"batch"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	e = newEnv(t, setup{args: RelieveNodePressureArgs{LowerPriorityFirst: ptr.To(false)}},
		objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{tenant, batch})...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"tenant"}; !equal(got, want) {
		t.Fatalf("with lowerPriorityFirst false evicted %v, want %v", got, want)
	}
}

// A pod of another namespace whose ownerReference claims a ReplicaSet's UID
// is not one of its pods: it does not take the ReplicaSet's turns. Here the
// intruder holds the most PIDs, so the kubelet's ranking takes it, and its
// delete-priority puts it last in the group it claims to belong to; were it
// one of web's pods, web's own order would evict web-1 in its place.
func TestAnOwnerIsItsNamespaceAndUID(t *testing.T) {
	web1 := testPod("web-1", "n1", ownedBy("web"), inNamespace("team-a"))
	web2 := testPod("web-2", "n1", ownedBy("web"), inNamespace("team-a"))
	intruder := testPod("intruder", "n1", ownedBy("web"), inNamespace("team-b"), priority("-2147483648"))
	pods := []*v1.Pod{web1, web2, intruder}
	n1 := listed(pidNode("n1", 10000, 9700), map[*v1.Pod]int64{intruder: 800, web1: 750, web2: 100})
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"intruder"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func TestMalformedDeletePriorityCountsAsZero(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	pods := []*v1.Pod{
		testPod("not-a-number", "n1", pids(300), priority("high")),
		testPod("out-of-range", "n1", pids(300), priority("99999999999")),
		testPod("prioritised", "n1", pids(300), priority("1")),
		testPod("x", "n1", pids(300), restarts(5)),
		testPod("y", "n1", pids(300), restarts(4)),
	}
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, pods)...)
	// As 0, the malformed pods come after x and y (no restarts): not needed.
	if got, want := e.run(t, n1, n2), []string{"prioritised", "x", "y"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	warnings := e.warningEvents()
	if len(warnings) != 2 {
		t.Fatalf("Warning Events %q, want one for each malformed pod", warnings)
	}
	for i, pod := range []string{"not-a-number", "out-of-range"} {
		found := false
		for _, w := range warnings {
			found = found || strings.Contains(w, "default/"+pod+":") && strings.HasPrefix(w, "Warning "+ReasonMalformedDeletePriority+" ")
		}
		if !found {
			t.Errorf("no %s Warning Event names pod %s (#%d): %q", ReasonMalformedDeletePriority, pod, i, warnings)
		}
	}
}

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

func describe(pods []*v1.Pod, held map[*v1.Pod]int64) string {
	var s string
	for _, p := range pods {
		s += fmt.Sprintf(" %s(priority %d, holds %d, requests %s)", p.Name, ptr.Deref(p.Spec.Priority, 0), held[p],
			p.Spec.Containers[0].Resources.Requests.Memory())
	}
	return s
}
