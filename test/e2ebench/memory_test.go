//go:build e2ebench

package e2ebench

import (
	"context"
	"flag"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/headroom-k8s/headroom/test/controlplane"
	"github.com/headroom-k8s/headroom/test/realnode"
)

// The memory part: a memory hog beside innocent Burstable pods on a
// miniature node. The machine (24 GiB, shared with other work) is never
// pushed toward an OOM: the kubelet reserves all of it but memBudget for
// the system (systemReserved.memory), and with enforceNodeAllocatable
// [pods] kubepods' memory limit is that budget. When the pods together
// reach it, the kernel's OOM killer acts inside kubepods, ranked by its
// badness (what a task holds + oom_score_adj): a node-level OOM in
// miniature.
const (
	memBudget = 1280 << 20
	// Three "web" pods hold webMemory each; the "hog" grows to hogMemory
	// over hogMemRamp, beyond the pods' budget.
	memWebReplicas = 3
	webMemory      = "128Mi"
	hogMemory      = "1536Mi"
	hogMemRamp     = 60 * time.Second
	// Both request little and set no limit: Burstable, as most pods are.
	memRequest = "64Mi"
	// The pressure line, in percent of the node's allocatable memory:
	// Headroom's memory trigger fires above it (thresholdPercent), and
	// every stack is measured against it.
	memLinePercent   = 80
	memTargetPercent = 75
	// The other real node, where the hog's replacement goes: a budget that
	// holds the whole hog far under the line, so that no stack's relief
	// of the first node presses the second.
	otherMemBudget = 4 << 30
	// B's sampling chain, scaled to the hog's pace: the agent samples every
	// second, the descheduler runs every 5 s and acts on one sample above
	// the line.
	agentInterval      = "1s"
	agentMemHysteresis = "16Mi"
)

var (
	memModes = []mode{
		{name: "A: kube-scheduler (default profile) + kubelet eviction + kernel OOM killer", scheduler: corev1.DefaultSchedulerName},
		{name: "A′: kube-scheduler (default profile) + kubelet tuned to Headroom's line + kernel OOM killer", scheduler: corev1.DefaultSchedulerName, tuned: true},
		{name: "B: headroom-scheduler + headroom-descheduler (memory trigger) + node agent (the kubelet of A)", scheduler: "headroom-scheduler", headroom: true},
	}
	memWatch = flag.Duration("memory-watch", 180*time.Second, "how long each memory run watches the node after the hog starts")
)

// memResult is what one memory run measured.
type memResult struct {
	mode                      string
	deschedulerPeriod         string // B's --descheduling-interval: the shipped Deployment's
	budget, allocatable, line int64
	baseline                  int64 // pods' working set before the hog
	peak                      int64 // highest pods' working set seen
	firstCross                time.Duration
	crossed                   bool
	firstRelief               time.Duration // -1: still above the line at the end
	// lastingRelief: from the first crossing to the last return under the
	// line, under it since; -1 when above the line at the end.
	lastingRelief   time.Duration
	episodes        int // times the pods' working set went above the line
	secondsAbove    int
	secondsAtBudget int // seconds kubepods' usage was within 1 % of its limit
	// log is every stress pod's fate: terminations of containers by app
	// and reason (OOMKilled, Error…), evictions by app and by whom.
	log *podLog
	// pods still running on the real node at the end, and hog pods elsewhere
	webAtEnd, hogElsewhere int
	// relief are the descheduler's lines about its evictions (B).
	relief []string
	// kubelet is the first node's kubelet version; tuned A′'s settings per
	// node ("" in A and B).
	kubelet, tuned string
	pdb            pdbResult
}

func runMemory(t *testing.T, m mode) memResult {
	reserved, err := realnode.MemoryReservedFor(memBudget)
	if err != nil {
		t.Fatal(err)
	}
	otherReserved, err := realnode.MemoryReservedFor(otherMemBudget)
	if err != nil {
		t.Fatal(err)
	}
	first := realnode.Options{ReservedMemory: reserved, EvictionHard: defaultEvictionHard()}
	other := realnode.Options{Name: otherNode, ReservedMemory: otherReserved, EvictionHard: defaultEvictionHard()}
	var tuned []string
	if m.tuned {
		for _, o := range []struct {
			opts   *realnode.Options
			budget int64
		}{{&first, memBudget}, {&other, otherMemBudget}} {
			k, err := tunedMemory(o.budget, memoryThreshold(t))
			if err != nil {
				t.Fatal(err)
			}
			k.apply(o.opts)
			tuned = append(tuned, fmt.Sprintf("%s: %s", nodeName(*o.opts), k))
		}
	}
	cp, nodes := realnode.StartNodesForTest(t, controlplane.Options{}, first, other)
	node := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if node.MemoryBudget != memBudget {
		t.Fatalf("pods' memory budget (kubepods' limit) %d bytes, want %d: systemReserved.memory %d of %d", node.MemoryBudget, memBudget, reserved, reserved+memBudget)
	}
	n, err := cp.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alloc := n.Status.Allocatable[corev1.ResourceMemory]
	r := memResult{mode: m.name, budget: node.MemoryBudget, allocatable: alloc.Value(), kubelet: n.Status.NodeInfo.KubeletVersion, tuned: strings.Join(tuned, "; ")}
	r.line = lineOf(r.allocatable, memLinePercent)
	if want := int64(memBudget - memoryHardAvailable); r.allocatable != want {
		t.Fatalf("allocatable memory %d, want the budget less the kubelet's memory.available threshold (100Mi): %d", r.allocatable, want)
	}
	var desched *controlplane.Process
	if m.headroom {
		if _, err := realnode.DeployShippedNodeAgentOnNodes(ctx, nodes,
			"--interval="+agentInterval,
			"--memory-hysteresis-bytes="+agentMemHysteresis, "--memory-hysteresis-percent=0"); err != nil {
			t.Fatal(err)
		}
		startScheduler(ctx, t, cp)
		r.deschedulerPeriod = shippedDeschedulingInterval(t)
		desched = startDescheduler(ctx, t, cp, r.deschedulerPeriod, memoryPolicy)
	}

	createPDBs(ctx, t, cp, "web", "hog")
	// Every stress pod is followed from before the first is made.
	r.log = followPods(ctx, cp)
	// The pods start on the first node: the other is cordoned until they
	// run there.
	cordon(ctx, t, cp, otherNode, true)
	memDeploy(ctx, t, cp, "web", m.scheduler, memWebReplicas, "--memory", webMemory)
	waitRunning(ctx, t, cp, "app=web", memWebReplicas)
	waitMemoryHeld(ctx, t, cp, node, "app=web", webMemory)
	// Settled: the pods' working set with the web pods (and in B the
	// agent) and nothing else.
	time.Sleep(5 * time.Second)
	if r.baseline, err = node.PodsWorkingSet(); err != nil {
		t.Fatal(err)
	}
	if r.baseline >= r.line {
		t.Fatalf("the pods' working set is %d before the hog, above the line %d: the bench's sizes do not fit this node", r.baseline, r.line)
	}
	start := time.Now()
	r.log.restart(start)
	memDeploy(ctx, t, cp, "hog", m.scheduler, 1, "--memory", hogMemory, "--ramp", hogMemRamp.String())
	waitRunning(ctx, t, cp, "app=hog", 1)
	cordon(ctx, t, cp, otherNode, false)

	pdbs := followPDBs(ctx, cp)
	w := &memWatcher{node: node, r: &r, start: start}
	w.watch(ctx, cp, *memWatch)
	r.pdb = pdbs.finish()
	if desched != nil {
		for _, l := range reliefLines(desched) {
			t.Logf("descheduler: %s", l)
			r.relief = append(r.relief, summarizeRelief(l, start))
		}
	}
	t.Logf("%s: %+v; what happened: %s", m.name, r, strings.Join(r.log.timeline, "; "))
	return r
}

// memoryPolicy turns the shipped DeschedulerPolicy into the memory part's:
// RelieveNodePressure's memory trigger on at the line, one sample above it
// enough, and the hog — the only pod of its Deployment — evictable.
func memoryPolicy(policy map[string]any) error {
	args, err := pluginArgs(policy, "RelieveNodePressure")
	if err != nil {
		return err
	}
	args["memory"] = map[string]any{
		"thresholdPercent": memLinePercent,
		"targetPercent":    memTargetPercent,
		"maxSampleAge":     "1m",
	}
	args["pressureSamples"] = 1
	evictor, err := pluginArgs(policy, "DefaultEvictor")
	if err != nil {
		return err
	}
	evictor["minReplicas"] = 1
	return nil
}

// memoryThreshold is the memory trigger's thresholdPercent in B's policy
// (the shipped one as memoryPolicy changes it).
func memoryThreshold(t *testing.T) int64 {
	t.Helper()
	policy := shippedPolicy(t)
	if err := memoryPolicy(policy); err != nil {
		t.Fatal(err)
	}
	args, err := pluginArgs(policy, "RelieveNodePressure")
	if err != nil {
		t.Fatal(err)
	}
	memory, _ := args["memory"].(map[string]any)
	v, ok := memory["thresholdPercent"].(int)
	if !ok {
		t.Fatalf("B's policy has no memory.thresholdPercent: %v", memory)
	}
	return int64(v)
}

// memDeploy makes a Deployment of headroom-stress pods with args that
// request memRequest of memory and set no limit (Burstable).
func memDeploy(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, app, scheduler string, replicas int32, args ...string) {
	t.Helper()
	deployWith(ctx, t, cp, app, scheduler, replicas, func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.Containers[0].Resources.Requests = corev1.ResourceList{
			corev1.ResourceCPU: mustQ("10m"), corev1.ResourceMemory: mustQ(memRequest),
		}
	}, args...)
}

// waitMemoryHeld waits until every running pod of selector on node says it
// holds size.
func waitMemoryHeld(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, node *realnode.Node, selector, size string) {
	t.Helper()
	q := mustQ(size)
	want := "memory=" + strconv.FormatInt(q.Value(), 10)
	err := wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return false, err
		}
		for _, p := range pods.Items {
			line, err := node.StressStatus(ctx, p.Namespace, p.Name)
			if err != nil || !strings.HasSuffix(line, want) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("pods of %s do not hold %s: %v", selector, size, err)
	}
}

// memWatcher samples every second the pods' working set (kubepods') and
// usage; the run's pod log notes every pod's fate.
type memWatcher struct {
	node  *realnode.Node
	r     *memResult
	start time.Time
	above bool
	since time.Time
}

func (w *memWatcher) event(format string, args ...any) { w.r.log.note(format, args...) }

func (w *memWatcher) watch(ctx context.Context, cp *controlplane.ControlPlane, d time.Duration) {
	r := w.r
	r.firstRelief, r.lastingRelief = -1, -1
	deadline := w.start.Add(d)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		now := time.Now()
		if ws, err := w.node.PodsWorkingSet(); err == nil {
			r.peak = max(r.peak, ws)
			switch {
			case ws > r.line && !w.above:
				w.above, w.since = true, now
				r.episodes++
				if !r.crossed {
					r.crossed, r.firstCross = true, now.Sub(w.start)
				}
				w.event("pods' working set above the line (%s)", mib(ws))
			case ws <= r.line && w.above:
				w.above = false
				if r.firstRelief < 0 {
					r.firstRelief = now.Sub(w.since)
				}
				r.lastingRelief = now.Sub(w.start) - r.firstCross
				w.event("back under the line (%s)", mib(ws))
			}
			if w.above {
				r.secondsAbove++
			}
		}
		if usage, err := w.node.PodsMemoryUsage(); err == nil && usage >= r.budget-r.budget/100 {
			r.secondsAtBudget++
		}
		time.Sleep(time.Until(now.Add(time.Second)))
	}
	if w.above {
		r.lastingRelief = -1
	}
	pods, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{})
	if err != nil {
		pods = &corev1.PodList{}
	}
	w.r.log.finish(pods.Items)
	{
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded {
				continue
			}
			switch {
			case p.Labels["app"] == "web" && p.Spec.NodeName == w.node.Name && p.Status.Phase == corev1.PodRunning:
				r.webAtEnd++
			case p.Labels["app"] == "hog" && p.Spec.NodeName != "" && p.Spec.NodeName != w.node.Name:
				r.hogElsewhere++
			}
		}
	}
}

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

var (
	klogTimeRE = regexp.MustCompile(`^[IWE]\d{4} (\d\d:\d\d:\d\d\.\d+)`)
	kvRE       = regexp.MustCompile(`(pod|beforeMemoryUsed|afterMemoryUsed)="([^"]*)"`)
)

// summarizeRelief shortens one of the descheduler's eviction lines to its
// time from start and the memory figures before and after, as planned.
func summarizeRelief(line string, start time.Time) string {
	at := "?"
	if m := klogTimeRE.FindStringSubmatch(line); m != nil {
		if tod, err := time.ParseInLocation("15:04:05.000000", m[1], start.Location()); err == nil {
			y, mo, d := start.Date()
			when := time.Date(y, mo, d, tod.Hour(), tod.Minute(), tod.Second(), tod.Nanosecond(), start.Location())
			at = fmt.Sprintf("%ds", int(when.Sub(start).Round(time.Second)/time.Second))
		}
	}
	kv := map[string]string{}
	for _, m := range kvRE.FindAllStringSubmatch(line, -1) {
		kv[m[1]] = m[2]
	}
	if kv["pod"] == "" {
		return at + " " + strings.TrimSpace(line)
	}
	return fmt.Sprintf("%s evicted %s: memory %s, planned after: %s", at, kv["pod"], kv["beforeMemoryUsed"], kv["afterMemoryUsed"])
}

// renderMemory is the memory part's section of docs/e2e-bench.md.
func renderMemory(rs []stackRun[memResult]) string {
	var b strings.Builder
	r0 := rs[0].r
	deschedulerPeriod := ""
	var tuned []string
	for _, r := range rs {
		if r.r.deschedulerPeriod != "" {
			deschedulerPeriod = r.r.deschedulerPeriod
		}
		tuned = append(tuned, r.r.tuned)
	}
	b.WriteString("\n## " + memoryTitle + "\n")
	fmt.Fprintf(&b, `
The first real node, made a miniature: the kubelet reserves all of the
machine's memory but %[1]s for the system (systemReserved.memory), and with
enforceNodeAllocatable [pods] kubepods' memory limit is those %[1]s (checked
in kubepods' cgroup): when the pods together reach it, the kernel's OOM
killer acts inside kubepods, ranked by its badness (what a task holds +
oom_score_adj), as it would on a node of that size. The rest of the machine
(24 GiB, shared with other work) is never pushed toward an OOM. Allocatable
memory is %[2]s (the budget less the kubelet's default memory.available
threshold, 100Mi). The kubelet's hard eviction has two memory signals:
memory.available is the whole machine's (capacity − the root cgroup's
working set) and cannot fire here, gigabytes being free;
allocatableMemory.available (kubepods' limit − kubepods' working set, with
the same 100Mi) can, and is the one the default stack relies on here, with
the kernel's OOM killer. The other real node has a budget of %[14]s, which
holds the whole hog far under the line.
%[15]s
%[3]d "web" pods hold %[4]s each, then one "hog" grows to %[5]s over %[6]s;
all request %[7]s of memory and set no limit (Burstable), one Deployment
each, started on the first node (the other is cordoned until they run). The line is %[8]d %% of allocatable (%[9]s): Headroom's memory trigger
fires above it (thresholdPercent %[8]d, targetPercent %[10]d, one sample,
the node agent sampling every %[11]s and the descheduler running every
%[12]s), and every stack is measured against it. *Time to relief*: from the
pods' working set (kubepods', usage − inactive file, read every second)
first passing the line to its first return under it; *lasting relief*: to
its last return under it, where it stayed until the end of the %[13]s
watched.

In B the node agent is shown the node's own cgroup (the kubelet's
cgroupRoot, which holds kubepods and nothing else) as its cgroup root, so
that memory-used is the miniature node's working set and not the whole
shared machine's (several GiB of other processes, which would put the
miniature above 100 %% of its allocatable before any pod ran); its code
and the annotation's meaning (the root cgroup's working set, as the
kubelet computes it) are unchanged. The shipped policy never evicts the
only pod of its owner (DefaultEvictor minReplicas 2); the hog is one, so
B's policy sets minReplicas 1.

`, mib(r0.budget), mib(r0.allocatable), memWebReplicas, webMemory, hogMemory, hogMemRamp, memRequest,
		memLinePercent, mib(r0.line), memTargetPercent, agentInterval, deschedulerPeriod, *memWatch, mib(otherMemBudget), tunedSettings(tuned))
	secs := func(d time.Duration) string { return fmt.Sprintf("%.0f s", d.Seconds()) }
	// relief renders a time to relief: -1 for none.
	relief := func(r memResult, d time.Duration) string {
		switch {
		case !r.crossed:
			return "—"
		case d < 0:
			return "not relieved"
		}
		return secs(d)
	}
	seconds := func(name string, d func(memResult) time.Duration) row[memResult] {
		return row[memResult]{name: name, text: func(r memResult) string { return relief(r, d(r)) },
			num: func(r memResult) (float64, bool) { return math.Round(d(r).Seconds()), r.crossed && d(r) >= 0 }}
	}
	mibRow := func(name string, f func(memResult) int64) row[memResult] {
		return row[memResult]{name: name + " (MiB)", text: func(r memResult) string { return strconv.FormatInt(f(r)>>20, 10) },
			num: func(r memResult) (float64, bool) { return float64(f(r) >> 20), true }}
	}
	rows := []row[memResult]{
		mibRow("pods' working set before the hog", func(r memResult) int64 { return r.baseline }),
		mibRow("peak of the pods' working set", func(r memResult) int64 { return r.peak }),
		row[memResult]{name: "hog's start to the line", text: func(r memResult) string {
			if !r.crossed {
				return "never"
			}
			return secs(r.firstCross)
		}, num: func(r memResult) (float64, bool) { return math.Round(r.firstCross.Seconds()), r.crossed }},
		reactionRow("line passed to the first eviction asked (s; whole seconds)", func(r memResult) time.Duration {
			if !r.crossed {
				return -1
			}
			return r.firstCross
		}, func(r memResult) *podLog { return r.log }),
		seconds("time to relief (line passed → back under it, first time; s)", func(r memResult) time.Duration { return r.firstRelief }),
		seconds("time to lasting relief (line first passed → last return under it; s)", func(r memResult) time.Duration { return r.lastingRelief }),
		countRow("times above the line", func(r memResult) int { return r.episodes }),
		countRow("seconds above the line", func(r memResult) int { return r.secondsAbove }),
		countRow("seconds at the budget (kubepods' usage ≥ 99 % of its limit)", func(r memResult) int { return r.secondsAtBudget }),
		countRow("hog: containers OOM-killed (restarts)", func(r memResult) int { return r.log.killed["hog"]["OOMKilled"] }),
		countRow("hog: evicted", func(r memResult) int { return r.log.evictions("hog", "") }),
		countRow("hog: evicted by the kubelet", func(r memResult) int { return r.log.evictions("hog", "kubelet") }),
		countRow("hog replicas running on the other real node at the end", func(r memResult) int { return r.hogElsewhere }),
		countRow("innocent (web) containers killed", func(r memResult) int { return r.log.kills("web") }),
		countRow("innocent (web) pods evicted", func(r memResult) int { return r.log.evictions("web", "") }),
		countRow("web pods running on the real node at the end", func(r memResult) int { return r.webAtEnd }),
		textRow("victims", func(r memResult) string { return orNone(strings.Join(r.log.victims, ", ")) }),
	}
	rows = append(rows, evictionRows(hogApp, otherNode, func(r memResult) *podLog { return r.log }, func(r memResult) pdbResult { return r.pdb })...)
	rows = append(rows,
		textRow("what happened (seconds from the hog's start)", func(r memResult) string { return strings.Join(r.log.timeline, "; ") }),
	)
	writeRuns(&b, rs, rows)
	for _, sr := range rs {
		r := sr.r
		if len(r.relief) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\nRelieveNodePressure's evictions in %s, run %d, as it logged them (the node agent's figure, the miniature node's working set):\n\n", sr.stack, sr.n)
		for _, l := range r.relief {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	return b.String()
}

// describe is "0", or the count with its parts: "2 (kubelet 1, OOMKilled 1)".
func describe(m map[string]int) string {
	return tally(m, ", ", func(k string, v int) string { return fmt.Sprintf("%s %d", k, v) })
}
