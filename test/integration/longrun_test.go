package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// The long run's cluster and model. Every node has 10000 PIDs; the shipped
// policy relieves a node above 95 % (9500) down to 90 % (9000), and never
// evicts a pod freeing less than 1 % (100 PIDs).
const (
	lrSeed      = 20261201
	lrTicks     = 40
	lrNodes     = 8
	lrCapacity  = 10000
	lrThreshold = 9500
	lrTarget    = 9000
	lrFloor     = 100 // minPodPIDsPercent 1 % of 10000
	lrMinFree   = 512 // NodePIDs' floor: max(minFreePIDs 512, 5 % of 10000)
	lrDeclared  = 400 // headroom.dev/pids of every pod
	lrMaxPerRun = 5   // maxNoOfPodsToEvictPerNode, and per namespace
	lrHeadroom  = 30  // PIDs a full node keeps: its use never reaches capacity
	// One tick stands for one run of the shipped CronJob: 5 minutes. The
	// policy's minPodAge of 10 minutes is two ticks.
	lrTickLength = 5 * time.Minute
	lrMinAgeTick = 2
)

// lrPod is the simulated node agent's view of one pod: what it holds.
type lrPod struct {
	uid         types.UID
	key         string // namespace/name
	node        string
	owner       types.UID // its ReplicaSet
	workload    string
	born        int   // tick it was first seen running
	seq         int   // its number among its workload's pods, in the order they were seen
	pids        int64 // PIDs it holds now
	plateau     int64 // a steady pod grows to this and stays
	leak        int64 // a leaking pod grows by this each tick, without end
	burst       int64 // PIDs of a one-sample burst (a fork storm), this tick only
	replacement bool  // created by its ReplicaSet in place of an evicted pod
}

// lrSample is what the simulated node agent wrote on a node at one tick.
type lrSample struct {
	at     time.Time
	used   int64
	listed map[types.UID]int64
}

// TestRelieveNodePressureLongRun drives RelieveNodePressure through a long
// run with churn, in compressed time: each of its 40 ticks is one run of
// the shipped CronJob (5 minutes).
//
// Eight kwok nodes of 10000 PIDs with headroom-scheduler (shipped config,
// shipped identity) and four Deployments, one per tenant namespace, placed
// by it. The test is the node agent: each tick it writes a fresh PID
// sample, with a complete headroom.dev/pid-pods list, on every node from a
// model (node use = the node's base of 6000–7500 + what its pods hold; a
// steady pod grows to a plateau of 20–300 PIDs, one pod in four leaks
// 50–400 PIDs a tick until it is evicted, a new pod starts with 10–40; now
// and then a tenant's traffic grows and its pods settle 150–350 PIDs
// higher, and a pod bursts over the threshold for one sample only; a full
// node's forks fail, so its use stays below its capacity). It sets every
// pod's status so that its start time is its age in model time (the
// policy's minPodAge of 10m is two ticks). Deployments scale and roll out
// now and then. Then it runs the built headroom-descheduler once with the
// shipped policy and identity, as the CronJob does, and checks the run
// against the model:
//
//  1. evictions made vs needed: per relief (a node and a run), needed is
//     the fewest pods evictable at that tick (two ticks old, not their
//     ReplicaSet's only pod, at least 100 PIDs, listed in the sample)
//     whose sampled PIDs bring the node's estimate to 9000 or below
//     (lrFewest); made must equal the plan the plugin promises, the
//     kubelet's PID ranking walked over the pods whose replacement, at
//     what the pod held, another node has room for (lrKubeletPlan), which
//     can exceed needed where the big pod has nowhere to go;
//  2. no replacement of an evicted pod is evicted again unless it leaks
//     itself (evictedTwice), and no workload loses pods on a node on two
//     consecutive ticks;
//  3. no node is relieved unless its last two samples were both above the
//     threshold, and not on the tick after a relief (a relief spends the
//     count);
//  4. no pod placed between two samples (a replacement, or a new pod of the
//     churn) takes its node's estimate above the threshold
//     (nodesOverThreshold).
//
// The model's draws are seeded (a pod's by its workload and its number
// there), but placement is the scheduler's and pod names the API server's,
// so the figures vary a little from run to run. It logs one line,
// LONGRUN ticks=… evictions=… needed=… evictedTwice=… nodesOverThreshold=…,
// which the plugin's README quotes.
func TestRelieveNodePressureLongRun(t *testing.T) {
	started := time.Now()
	cp := controlplane.StartForTest(t, controlplane.Options{ControllerManager: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c := cp.Client
	rng := rand.New(rand.NewPCG(lrSeed, 0))
	policy := lrPolicy(t)

	if _, err := cp.StartScheduler(ctx, repoFile(t, "manifests/scheduler/scheduler-config.yaml")); err != nil {
		t.Fatal(err)
	}
	nodes := make([]string, lrNodes)
	base := map[string]int64{}
	for i := range nodes {
		nodes[i] = fmt.Sprintf("lr-node-%d", i)
		base[nodes[i]] = 6000 + rng.Int64N(1500)
		first := pidstats.NodeStats{Capacity: lrCapacity, Used: base[nodes[i]], SampledAt: time.Now()}.Annotations()
		if _, err := cp.CreateNode(ctx, nodes[i], resources("8", "32Gi", "110"), first); err != nil {
			t.Fatal(err)
		}
	}
	workloads := []string{"shop", "search", "billing", "chat"}
	replicas := map[string]int32{}
	for _, w := range workloads {
		ns := "tenant-" + w
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		replicas[w] = 5 + rng.Int32N(4)
		if _, err := c.AppsV1().Deployments(ns).Create(ctx, lrDeployment(w, replicas[w]), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	model := map[types.UID]*lrPod{}
	seq := map[string]int{}                           // workload → pods seen
	samples := make([]map[string]lrSample, lrTicks+1) // by tick, by node
	evictedAt := map[string]map[string]int{}          // node → workload → last tick it lost a pod there
	relievedAt := map[string]int{}                    // node → last tick it was relieved
	pendingReplacements := map[types.UID]int{}        // ReplicaSet → evicted pods not yet replaced
	var (
		made, needed, episodes, missed, bursts           int
		evictedTwice, churned, debounceBroken, overThres int
		overNeeded                                       int
		failures                                         []string
	)
	fail := func(format string, args ...any) {
		failures = append(failures, fmt.Sprintf(format, args...))
		t.Errorf(format, args...)
	}

	for tick := 1; tick <= lrTicks; tick++ {
		// Churn: now and then a tenant scales or rolls out.
		if tick > 1 && rng.Float64() < 0.3 {
			w := workloads[rng.IntN(len(workloads))]
			var patch map[string]any
			if rng.Float64() < 0.5 {
				replicas[w] = min(max(replicas[w]+int32(rng.IntN(5))-2, 3), 10)
				patch = map[string]any{"spec": map[string]any{"replicas": replicas[w]}}
			} else {
				patch = map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{
					"annotations": map[string]string{"longrun/rollout": fmt.Sprint(tick)}}}}}
			}
			data, _ := json.Marshal(patch)
			if _, err := c.AppsV1().Deployments("tenant-"+w).Patch(ctx, w, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			t.Logf("tick %d: churn %s %s", tick, w, data)
		}

		// The cluster settles: every pod bound and running, the rollouts
		// through the steps that the new pods' readiness allows.
		pods := lrSettle(ctx, t, c, tick, model)

		// The placements since the last sample, judged against it the way
		// the scheduler and the plugin estimate a node (safeguard 4).
		if prev := samples[tick-1]; prev != nil {
			placed := map[string]int64{}
			for i := range pods {
				p := &pods[i]
				if s, ok := prev[p.Spec.NodeName]; ok && sample.PlacedAfter(p, s.at) {
					placed[p.Spec.NodeName] += lrDeclared
				}
			}
			for node, add := range placed {
				s := prev[node]
				est := s.used + add
				for uid, n := range s.listed {
					if !slices.ContainsFunc(pods, func(p corev1.Pod) bool { return p.UID == uid }) {
						est -= n // gone since the sample
					}
				}
				if est > lrThreshold {
					overThres++
					fail("tick %d: pods placed on %s after its sample take its estimate to %d > %d", tick, node, est, lrThreshold)
				}
			}
		}

		// The model: pods that left are dropped, the others grow, new pods
		// start small; their status gets their age in model time.
		live := map[types.UID]bool{}
		for i := range pods {
			p := &pods[i]
			live[p.UID] = true
			m := model[p.UID]
			if m == nil {
				m = &lrPod{uid: p.UID, key: p.Namespace + "/" + p.Name, node: p.Spec.NodeName,
					owner: lrOwner(p), workload: p.Labels["app"], born: tick, seq: seq[p.Labels["app"]]}
				seq[m.workload]++
				if tick == 1 {
					m.born = -6 // the cluster ran for half an hour before
				}
				// The pod's own draws depend on its workload and its
				// number there, not on names the API server makes up.
				prng := rand.New(rand.NewPCG(lrSeed, uint64(slices.Index(workloads, m.workload))<<32|uint64(m.seq)))
				m.plateau = 20 + prng.Int64N(281)
				if prng.Float64() < 0.25 {
					m.leak = 50 + prng.Int64N(351)
				}
				m.pids = 10 + prng.Int64N(31)
				if tick == 1 {
					m.pids = m.plateau + m.leak*prng.Int64N(4)
				}
				if pendingReplacements[m.owner] > 0 {
					pendingReplacements[m.owner]--
					m.replacement = true
				}
				model[p.UID] = m
			} else {
				m.pids = min(m.pids+max(m.plateau/2, m.leak), max(m.plateau, m.pids+m.leak))
			}
			m.burst = 0
			lrSetAge(ctx, t, c, p, time.Duration(tick-m.born)*lrTickLength)
		}
		for uid := range model {
			if !live[uid] {
				delete(model, uid)
			}
		}
		// A node's PIDs run out: a leak stops where forks start failing.
		for _, node := range nodes {
			lrCapLeaks(node, base, model)
		}
		// Now and then a tenant's traffic grows for good: each of its pods
		// settles at a higher plateau, and pressure builds on nodes from
		// many mid-sized pods rather than one leaking pod.
		if rng.Float64() < 0.15 {
			w := workloads[rng.IntN(len(workloads))]
			add := 150 + rng.Int64N(201)
			for _, m := range model {
				if m.workload == w {
					m.plateau += add
				}
			}
			t.Logf("tick %d: %s's traffic grows: its pods settle %d PIDs higher", tick, w, add)
		}
		// Now and then a pod bursts (a build's fork storm) and takes its
		// node over the threshold in this sample only.
		if rng.Float64() < 0.25 {
			node := nodes[rng.IntN(len(nodes))]
			used := lrNodeUse(node, base, model)
			var onNode []*lrPod
			for _, m := range model {
				if m.node == node {
					onNode = append(onNode, m)
				}
			}
			if used <= lrThreshold-200 && len(onNode) > 0 && (samples[tick-1] == nil || samples[tick-1][node].used <= lrThreshold) {
				sort.Slice(onNode, func(i, j int) bool {
					return onNode[i].workload < onNode[j].workload || onNode[i].workload == onNode[j].workload && onNode[i].seq < onNode[j].seq
				})
				onNode[rng.IntN(len(onNode))].burst = min(lrThreshold-used+100+rng.Int64N(400), lrCapacity-lrHeadroom-used)
				bursts++
			}
		}

		// The node agent's sample: a new second, so a new sampled-at.
		time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
		at := time.Now().Truncate(time.Second)
		samples[tick] = map[string]lrSample{}
		for _, node := range nodes {
			s := lrSample{at: at, used: lrNodeUse(node, base, model) + rng.Int64N(41) - 20, listed: map[types.UID]int64{}}
			var usage []pidstats.PodUsage
			for _, m := range model {
				if m.node == node {
					s.listed[m.uid] = m.pids + m.burst
					usage = append(usage, pidstats.PodUsage{UID: m.uid, Value: m.pids + m.burst})
				}
			}
			ann := pidstats.NodeStats{Capacity: lrCapacity, Used: s.used, SampledAt: at}.Annotations()
			ann[pidstats.AnnotationPIDPods] = pidstats.NewPodList(usage).String()
			data, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
			if _, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			samples[tick][node] = s
		}

		// What a run needs, per node above its threshold in this sample
		// and the one before, from the model alone.
		pods = lrListPods(ctx, t, c)
		ownerCount := map[types.UID]int{}
		for i := range pods {
			ownerCount[lrOwner(&pods[i])]++
		}
		need := map[string]int{}        // node → the fewest evictions that relieve it
		orderPlan := map[string][]int{} // node → evictions of the kubelet ranking's plan, with and without the other nodes' reliefs
		kubeletPlan := map[string]func(held, reserved map[string]int64) int{}
		// What each node holds as a destination sees it: the sample, and
		// the declared PIDs of the pods placed after it.
		held := map[string]int64{}
		for _, node := range nodes {
			held[node] = samples[tick][node].used
			for i := range pods {
				if p := &pods[i]; p.Spec.NodeName == node && sample.PlacedAfter(p, samples[tick][node].at) {
					held[node] += lrDeclared
				}
			}
		}
		// room finds another node than self that takes need within the
		// threshold and NodePIDs' floor, by what it holds and after
		// reserved, and reserves it.
		room := func(held map[string]int64, self string, reserved map[string]int64) func(int64) bool {
			return func(need int64) bool {
				for _, m := range nodes {
					if u := held[m] + reserved[m]; m != self && u+need <= lrThreshold && lrCapacity-u-need >= lrMinFree {
						reserved[m] += need
						return true
					}
				}
				return false
			}
		}
		cycleReserved := map[string]int64{}
		for _, node := range nodes {
			s := samples[tick][node]
			prev, ok := samples[tick-1][node]
			if r, relieved := relievedAt[node]; !ok || s.used <= lrThreshold || prev.used <= lrThreshold || relieved && r == tick-1 {
				continue
			}
			// The trigger's figure is what the sample measured: a pod placed
			// after it holds nothing there, whatever it declares (it counts
			// for room only, in held).
			est := s.used
			evictable := func(p *corev1.Pod) int64 {
				m := model[p.UID]
				n, listed := s.listed[p.UID]
				if m == nil || !listed || tick-m.born < lrMinAgeTick || ownerCount[m.owner] < 2 || n < lrFloor {
					return 0
				}
				return n
			}
			var onNode []*corev1.Pod
			for i := range pods {
				if pods[i].Spec.NodeName == node {
					onNode = append(onNode, &pods[i])
				}
			}
			need[node] = lrFewest(onNode, est, evictable)
			kubeletPlan[node] = func(held, reserved map[string]int64) int {
				return lrKubeletPlan(onNode, est, func(p *corev1.Pod) int64 { return s.listed[p.UID] }, evictable, room(held, node, reserved))
			}
			orderPlan[node] = []int{kubeletPlan[node](held, cycleReserved), kubeletPlan[node](held, map[string]int64{})}
		}

		// One run of the CronJob.
		failedBefore := len(failures)
		log := rnpRunPolicy(t, cp, policy)
		// The destinations as the run read them: between the sample and
		// the run, a rollout's old pods go once its new ones are Ready,
		// and new pods are placed. A listed pod gone by then no longer
		// counts; one placed after the sample counts what it declares.
		evicted := rnpEvicted(log)
		evictedUIDs := map[types.UID]bool{}
		for _, m := range model {
			if slices.Contains(evicted, m.key) {
				evictedUIDs[m.uid] = true
			}
		}
		heldAtRun := lrHeldAtRun(ctx, t, c, nodes, samples[tick], evictedUIDs)
		resAtRun := map[string]int64{}
		for _, node := range nodes {
			if plan := kubeletPlan[node]; plan != nil {
				orderPlan[node] = append(orderPlan[node], plan(heldAtRun, resAtRun), plan(heldAtRun, map[string]int64{}))
			}
		}
		byNode := map[string][]*lrPod{}
		for _, key := range evicted {
			var victim *lrPod
			for _, m := range model {
				if m.key == key {
					victim = m
				}
			}
			if victim == nil {
				fail("tick %d: evicted %s, which the model does not know", tick, key)
				continue
			}
			byNode[victim.node] = append(byNode[victim.node], victim)
		}

		for _, node := range nodes {
			victims := byNode[node]
			if len(victims) == 0 {
				if need[node] > 0 {
					missed++
					t.Logf("tick %d: %s above its threshold in two samples (%d, %d), %d evictions needed, none made",
						tick, node, samples[tick-1][node].used, samples[tick][node].used, need[node])
					t.Logf("%s", lrLinesOf(log, node))
				}
				continue
			}
			episodes++
			made += len(victims)
			needed += need[node]
			var desc []string
			for _, v := range victims {
				desc = append(desc, fmt.Sprintf("%s(%d PIDs, age %d ticks)", v.key, samples[tick][node].listed[v.uid], tick-v.born))
			}
			t.Logf("tick %d: relieved %s at %d PIDs (before: %d): evicted %d, needed %d: %s",
				tick, node, samples[tick][node].used, samples[tick-1][node].used, len(victims), need[node], strings.Join(desc, ", "))

			// 3. The debounce, and a relief spends it.
			if prev, ok := samples[tick-1][node]; !ok || prev.used <= lrThreshold || samples[tick][node].used <= lrThreshold {
				debounceBroken++
				fail("tick %d: %s relieved though not above its threshold in two consecutive samples (%d, %d)",
					tick, node, prev.used, samples[tick][node].used)
			} else if r, relieved := relievedAt[node]; relieved && r == tick-1 {
				debounceBroken++
				fail("tick %d: %s relieved again on the next sample, for the same pressure", tick, node)
			}
			// 1. Made vs needed, and vs what the kubelet's ranking allows.
			if want := orderPlan[node]; !slices.Contains(want, len(victims)) {
				fail("tick %d: %s: %d evictions, the kubelet ranking's plan has %v (the fewest: %d)", tick, node, len(victims), want, need[node])
			}
			if len(victims) > need[node] {
				overNeeded++
			}
			// 2. Evicted twice, and a workload's churn.
			for _, v := range victims {
				if v.replacement && v.leak == 0 {
					evictedTwice++
					fail("tick %d: %s, a replacement of an earlier eviction, evicted again", tick, v.key)
				}
				if tick-v.born < lrMinAgeTick {
					fail("tick %d: %s evicted %d ticks after it started, younger than minPodAge", tick, v.key, tick-v.born)
				}
				if last, ok := evictedAt[node][v.workload]; ok && last == tick-1 {
					churned++
					fail("tick %d: workload %s lost pods on %s on two consecutive ticks", tick, v.workload, node)
				}
			}
			relievedAt[node] = tick
			for _, v := range victims {
				if evictedAt[node] == nil {
					evictedAt[node] = map[string]int{}
				}
				evictedAt[node][v.workload] = tick
				pendingReplacements[v.owner]++
				delete(model, v.uid)
			}
		}
		if len(failures) > failedBefore {
			t.Logf("tick %d: %s", tick, rnpPluginLines(log))
		}
	}

	summary := fmt.Sprintf("LONGRUN ticks=%d evictions=%d needed=%d evictedTwice=%d nodesOverThreshold=%d reliefs=%d overNeeded=%d missed=%d bursts=%d debounceBroken=%d workloadChurn=%d wall=%s",
		lrTicks, made, needed, evictedTwice, overThres, episodes, overNeeded, missed, bursts, debounceBroken, churned, time.Since(started).Round(time.Second))
	t.Log(summary)
	if episodes == 0 {
		t.Errorf("no relief in %d ticks: the model never put a node under pressure", lrTicks)
	}
	if bursts == 0 {
		t.Errorf("no one-sample burst in %d ticks: the debounce was not exercised", lrTicks)
	}
}

// lrFewest is the fewest pods whose gains (evictable returns 0 for a pod
// that cannot go) bring est to lrTarget within the per-node limit: the
// largest first. Where no set within the limit brings the node to its
// threshold it is 0 (unrelievable); where only to its threshold, the limit.
func lrFewest(pods []*corev1.Pod, est int64, evictable func(*corev1.Pod) int64) int {
	var gains []int64
	for _, p := range pods {
		if g := evictable(p); g > 0 {
			gains = append(gains, g)
		}
	}
	slices.Sort(gains)
	slices.Reverse(gains)
	k, freed := 0, int64(0)
	for k < len(gains) && k < lrMaxPerRun && est-freed > lrTarget {
		freed += gains[k]
		k++
	}
	if est-freed > lrThreshold {
		return 0
	}
	return k
}

// lrKubeletPlan is how many evictions the plugin's plan for a node holds:
// the kubelet's PID ranking (every pod here has priority 0: the most PIDs
// sampled first) walked until the node is at its target or the per-node
// limit is spent; a pod that frees less than the floor is passed over; the
// walk ends at the first pod that would free enough but cannot go, because
// it is not evictable (too young, its ReplicaSet's only pod) or its
// replacement, counted at what the pod held or declares, whichever is more,
// fits on no other node (room): the pods after it are not the cause. 0
// where the plan does not bring the node to its threshold. The plan is a
// prefix of the ranking: it is not pruned.
func lrKubeletPlan(pods []*corev1.Pod, est int64, sampled, evictable func(*corev1.Pod) int64, room func(need int64) bool) int {
	order := slices.Clone(pods)
	slices.SortStableFunc(order, func(a, b *corev1.Pod) int { return cmp.Compare(sampled(b), sampled(a)) })
	n, projected := 0, est
	for _, p := range order {
		if projected <= lrTarget || n == lrMaxPerRun {
			break
		}
		if sampled(p) < lrFloor {
			continue
		}
		g := evictable(p)
		if g == 0 || !room(max(g, lrDeclared)) {
			// The kubelet's next victim cannot go: the pods after it
			// are bystanders.
			break
		}
		n++
		projected -= g
	}
	if projected > lrThreshold {
		return 0
	}
	return n
}

// lrHeldAtRun is what each node holds as a destination after a run, as
// the run's estimate counts it: the sample, less the listed pods gone
// since, plus the declared PIDs of pods placed after it; the pods the run
// evicted (evicted) still count, as the run counted them.
func lrHeldAtRun(ctx context.Context, t *testing.T, c kubernetes.Interface, nodes []string, samples map[string]lrSample, evicted map[types.UID]bool) map[string]int64 {
	t.Helper()
	list, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "longrun=true"})
	if err != nil {
		t.Fatal(err)
	}
	present := map[types.UID]bool{}
	for uid := range evicted {
		present[uid] = true
	}
	held := map[string]int64{}
	for i := range list.Items {
		p := &list.Items[i]
		present[p.UID] = true
		if s, ok := samples[p.Spec.NodeName]; ok && sample.PlacedAfter(p, s.at) {
			held[p.Spec.NodeName] += lrDeclared
		}
	}
	for _, node := range nodes {
		held[node] += samples[node].used
		for uid, n := range samples[node].listed {
			if !present[uid] {
				held[node] -= n
			}
		}
	}
	return held
}

// lrPolicy is the shipped DeschedulerPolicy; its RelieveNodePressure args
// say pressureSamples: 2. One thing changes with the compressed time: the
// eviction budget's window, which counts the descheduler's real clock, is
// the least it may be (1s) instead of 4m. A tick is a CronJob run of 5
// minutes in the model but a few seconds here, so 4 minutes would span
// the whole run; 1 s (counted up to 2 s, with its bucket) keeps each tick
// in a window of its own, as 4 minutes under the CronJob's 5 keep each run
// in a real cluster, and within a run the budget's 20, and 5 per node and
// namespace, are the policy's per-run limits.
func lrPolicy(t *testing.T) []byte {
	t.Helper()
	policy := repoFile(t, "manifests/descheduler/policy.yaml")
	if !strings.Contains(string(policy), "pressureSamples: 2") {
		t.Fatalf("the shipped policy no longer says pressureSamples: 2")
	}
	const window = "        window: 4m\n"
	if strings.Count(string(policy), window) != 1 {
		t.Fatalf("the shipped policy's eviction budget window is not 4m")
	}
	return []byte(strings.Replace(string(policy), window, "        window: 1s\n", 1))
}

// lrDeployment is a tenant's workload: placed by headroom-scheduler,
// statuses set by the test (kwok leaves them), each pod declaring 400 PIDs.
func lrDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name, "longrun": "true"}
	spec := rnpPodSpec()
	spec.NodeName = ""
	spec.SchedulerName = relievenodepressure.DefaultSchedulerName
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant-" + name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels: labels,
					Annotations: map[string]string{
						controlplane.KwokCustomStatusAnnotation: "custom",
						pidstats.AnnotationPodPIDs:              fmt.Sprint(lrDeclared),
					},
				},
				Spec: spec,
			},
		},
	}
}

func lrOwner(p *corev1.Pod) types.UID {
	if ref := metav1.GetControllerOf(p); ref != nil {
		return ref.UID
	}
	return ""
}

func lrNodeUse(node string, base map[string]int64, model map[types.UID]*lrPod) int64 {
	used := base[node]
	for _, m := range model {
		if m.node == node {
			used += m.pids + m.burst
		}
	}
	return used
}

// lrCapLeaks trims the node's pods, leaking ones first and the largest
// first, so that the node's use stays lrHeadroom below its capacity: a
// pod's forks fail when the node has no PID left, so it holds no more.
func lrCapLeaks(node string, base map[string]int64, model map[types.UID]*lrPod) {
	var pods []*lrPod
	for _, m := range model {
		if m.node == node {
			pods = append(pods, m)
		}
	}
	sort.Slice(pods, func(i, j int) bool {
		a, b := pods[i], pods[j]
		if (a.leak > 0) != (b.leak > 0) {
			return a.leak > 0
		}
		return a.pids > b.pids || a.pids == b.pids && a.key < b.key
	})
	for _, m := range pods {
		over := lrNodeUse(node, base, model) - (lrCapacity - lrHeadroom)
		if over <= 0 {
			return
		}
		m.pids -= min(over, m.pids)
	}
}

// lrListPods lists the long run's pods that are not being deleted.
func lrListPods(ctx context.Context, t *testing.T, c kubernetes.Interface) []corev1.Pod {
	t.Helper()
	list, err := c.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "longrun=true"})
	if err != nil {
		t.Fatal(err)
	}
	var pods []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			pods = append(pods, p)
		}
	}
	// Oldest first, so that a workload's pods are numbered in the order they came.
	sort.SliceStable(pods, func(i, j int) bool {
		a, b := &pods[i], &pods[j]
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	return pods
}

// lrSettle waits until every pod of the long run is bound and running and
// the set of pods stayed the same for a moment, making each new pod
// Running and Ready (age 0) as it is bound; it returns the bound pods.
func lrSettle(ctx context.Context, t *testing.T, c kubernetes.Interface, tick int, model map[types.UID]*lrPod) []corev1.Pod {
	t.Helper()
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for {
		pods := lrListPods(ctx, t, c)
		var bound []corev1.Pod
		var uids []string
		settled := true
		for i := range pods {
			p := &pods[i]
			uids = append(uids, string(p.UID))
			if p.Spec.NodeName == "" {
				settled = false
				continue
			}
			if p.Status.Phase != corev1.PodRunning {
				settled = false
				lrSetAge(ctx, t, c, p, 0)
			}
			bound = append(bound, *p)
		}
		set := strings.Join(uids, ",")
		if settled && set == last {
			return bound
		}
		if time.Now().After(deadline) {
			t.Logf("tick %d: the cluster did not settle in 30 s; going on with %d bound pods of %d", tick, len(bound), len(pods))
			return bound
		}
		last = set
		time.Sleep(300 * time.Millisecond)
	}
}

// lrSetAge makes the pod Running and Ready since age ago, keeping its
// PodScheduled condition: the descheduler's minPodAge reads the start time,
// the delete order the readiness time, the estimate the binding time.
func lrSetAge(ctx context.Context, t *testing.T, c kubernetes.Interface, pod *corev1.Pod, age time.Duration) {
	t.Helper()
	pods := c.CoreV1().Pods(pod.Namespace)
	cur := pod
	for attempt := 0; ; attempt++ {
		since := metav1.NewTime(time.Now().Add(-age).Truncate(time.Second))
		upd := cur.DeepCopy()
		upd.Status.Phase = corev1.PodRunning
		upd.Status.StartTime = &since
		var conds []corev1.PodCondition
		for _, cond := range upd.Status.Conditions {
			if cond.Type == corev1.PodScheduled {
				conds = append(conds, cond)
			}
		}
		for _, typ := range []corev1.PodConditionType{corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
			conds = append(conds, corev1.PodCondition{Type: typ, Status: corev1.ConditionTrue, LastTransitionTime: since})
		}
		upd.Status.Conditions = conds
		upd.Status.ContainerStatuses = []corev1.ContainerStatus{{
			Name: "app", Image: "registry.k8s.io/pause:3.10", Ready: true, Started: ptr.To(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: since}},
		}}
		out, err := pods.UpdateStatus(ctx, upd, metav1.UpdateOptions{})
		switch {
		case err == nil:
			*pod = *out
			return
		case apierrors.IsNotFound(err):
			return
		case apierrors.IsConflict(err) && attempt < 5:
			if cur, err = pods.Get(ctx, pod.Name, metav1.GetOptions{}); err != nil {
				if apierrors.IsNotFound(err) {
					return
				}
				t.Fatal(err)
			}
		default:
			t.Fatalf("status of %s/%s: %v", pod.Namespace, pod.Name, err)
		}
	}
}

// lrLinesOf picks the plugin's log lines about node out of a run's log.
func lrLinesOf(log, node string) string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `node="`+node+`"`) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
