//go:build e2ebench

package e2ebench

import (
	"fmt"
	"math"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	kubetypes "k8s.io/kubernetes/pkg/kubelet/types"

	"github.com/headroom-k8s/headroom/test/realnode"
)

// The pure parts of the bench, run without a real node:
//
//	go test -tags e2ebench -run 'TestTuned|TestRender|TestEvictedPods|TestShutdownOf|TestPDB|TestSpread' ./test/e2ebench

// kubeletThresholds parses opts' eviction settings with the kubelet's own
// parser, allocatable enforced on pods as the real nodes do.
func kubeletThresholds(t *testing.T, opts realnode.Options) []evictionapi.Threshold {
	t.Helper()
	th, err := eviction.ParseThresholdConfig([]string{kubetypes.NodeAllocatableEnforcementKey}, opts.EvictionHard, opts.EvictionSoft, opts.EvictionSoftGracePeriod, nil)
	if err != nil {
		t.Fatalf("the kubelet refuses A′'s settings: %v", err)
	}
	return th
}

// met reports which of the thresholds of signal are met at available (of
// capacity): "hard", "soft", both or neither.
func met(ths []evictionapi.Threshold, signal evictionapi.Signal, available, capacity int64) (hard, soft bool) {
	c := resource.NewQuantity(capacity, resource.DecimalSI)
	for _, th := range ths {
		if th.Signal != signal {
			continue
		}
		if available < evictionapi.GetThresholdQuantity(th.Value, c).Value() {
			if th.GracePeriod == 0 {
				hard = true
			} else {
				soft = true
			}
		}
	}
	return hard, soft
}

// headroomFires is Headroom's trigger: used × 100 > threshold × allocatable.
// checkLines: around Headroom's line and allocatable, the kubelet's soft
// threshold on signal is met exactly where Headroom's trigger fires, the
// hard one exactly above allocatable (available = total − used).
func checkLines(t *testing.T, what string, ths []evictionapi.Threshold, signal evictionapi.Signal, total, alloc, threshold int64) {
	t.Helper()
	line := lineOf(alloc, threshold)
	for _, used := range []int64{line - 1, line, line + 1, alloc, alloc + 1} {
		hard, soft := met(ths, signal, total-used, total)
		if fires := headroomFires(used, alloc, threshold); soft != fires {
			t.Errorf("%s %d: soft threshold met %t, Headroom's trigger fires %t", what, used, soft, fires)
		}
		if hard != (used > alloc) {
			t.Errorf("%s %d: hard threshold met %t, want %t (allocatable %d)", what, used, hard, used > alloc, alloc)
		}
	}
}

func headroomFires(used, allocatable, threshold int64) bool {
	return used*100 > threshold*allocatable
}

func TestTunedPIDs(t *testing.T) {
	for _, tc := range []struct{ capacity, reserved, threshold int64 }{
		{32768, 32768 - 2000, 95}, // this machine's first node
		{32768, 32768 - 8000, 95}, // its second
		{4194304, 4194304 - 1999, 95},
		{192739, 1000, 90},
	} {
		k, err := tunedPIDs(tc.capacity, tc.reserved, tc.threshold)
		if err != nil {
			t.Fatal(err)
		}
		opts := realnode.Options{EvictionHard: map[string]string{"pid.available": "1"}}
		k.apply(&opts)
		if opts.EvictionMaxPodGracePeriod != tunedMaxPodGrace || opts.EvictionPressureTransitionPeriod != tunedPressureTransition {
			t.Errorf("%+v: max pod grace %d, pressure transition %v", tc, opts.EvictionMaxPodGracePeriod, opts.EvictionPressureTransitionPeriod)
		}
		if opts.EvictionHard["memory.available"] != "104857600" {
			t.Errorf("%+v: the other hard thresholds are not kept: %v", tc, opts.EvictionHard)
		}
		ths := kubeletThresholds(t, opts)
		alloc := tc.capacity - tc.reserved
		checkLines(t, fmt.Sprintf("%+v, tasks", tc), ths, evictionapi.SignalPIDAvailable, tc.capacity, alloc, tc.threshold)
	}
	for _, tc := range []struct {
		capacity, reserved, threshold int64
		want                          string
	}{
		{0, 0, 95, "PID capacity 0"},
		{32768, 0, 95, "systemReserved.pid 0"},
		{32768, 32768, 95, "systemReserved.pid 32768"},
		{32768, 30768, 0, "PID thresholdPercent 0"},
		{32768, 30768, 101, "PID thresholdPercent 101"},
	} {
		if _, err := tunedPIDs(tc.capacity, tc.reserved, tc.threshold); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tunedPIDs(%d, %d, %d): error %v, want one naming %q", tc.capacity, tc.reserved, tc.threshold, err, tc.want)
		}
	}
}

// TestTunedFromPolicies: A′'s lines are derived from the policies B runs.
func TestTunedFromPolicies(t *testing.T) {
	k, err := tunedPIDs(32768, 32768-podBudget, int64(shippedPIDThreshold(t)))
	if err != nil {
		t.Fatal(err)
	}
	// The shipped 95 %: the node's tasks above 1,900 of 2,000.
	if got := k.evictionSoft["pid.available"]; got != "30868" {
		t.Errorf("A′'s soft pid.available from the shipped policy: %s, want 30868", got)
	}
	if got := memoryThreshold(t); got != memLinePercent {
		t.Errorf("B's memory threshold %d %%, want the line the bench measures against, %d %%", got, memLinePercent)
	}
}

func TestTunedMemory(t *testing.T) {
	for _, tc := range []struct{ budget, threshold int64 }{
		{memBudget, memLinePercent},
		{otherMemBudget, memLinePercent},
		{1<<30 + 12345, 95},
	} {
		k, err := tunedMemory(tc.budget, tc.threshold)
		if err != nil {
			t.Fatal(err)
		}
		opts := realnode.Options{EvictionHard: defaultEvictionHard()}
		k.apply(&opts)
		ths := kubeletThresholds(t, opts)
		alloc := tc.budget - memoryHardAvailable
		// allocatableMemory.available is the budget less the pods'
		// working set.
		checkLines(t, fmt.Sprintf("%+v, working set", tc), ths, evictionapi.SignalAllocatableMemoryAvailable, tc.budget, alloc, tc.threshold)
	}
	if got := lineOf(memBudget-memoryHardAvailable, memLinePercent); got != 989855744 {
		t.Errorf("the memory line of the first node is %d bytes, want 80 %% of 1180Mi, 989855744", got)
	}
	for _, tc := range []struct {
		budget, threshold int64
		want              string
	}{
		{memoryHardAvailable, 80, "pods' memory budget 104857600 bytes"},
		{memBudget, 0, "memory thresholdPercent 0"},
		{memBudget, 101, "memory thresholdPercent 101"},
	} {
		if _, err := tunedMemory(tc.budget, tc.threshold); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("tunedMemory(%d, %d): error %v, want one naming %q", tc.budget, tc.threshold, err, tc.want)
		}
	}
}

func TestLineOfDoesNotOverflow(t *testing.T) {
	const large = int64(1) << 62
	if got, want := lineOf(large, 100), large; got != want {
		t.Errorf("lineOf(2^62, 100) = %d, want %d", got, want)
	}
	for _, a := range []int64{large + 99, math.MaxInt64, 1999, 0} {
		want := new(big.Int).Div(new(big.Int).Mul(big.NewInt(a), big.NewInt(95)), big.NewInt(100)).Int64()
		if got := lineOf(a, 95); got != want {
			t.Errorf("lineOf(%d, 95) = %d, want %d", a, got, want)
		}
	}
}

// testLog is a pod log with pods as seen by the end of a run.
func testLog(start time.Time, pods ...*podSeen) *podLog {
	l := &podLog{start: start, pods: map[types.UID]*podSeen{}, killed: map[string]map[string]int{}, evicted: map[string]map[string]int{}, firstEviction: -1}
	for i, p := range pods {
		l.pods[types.UID(rune('a'+i))] = p
	}
	return l
}

func TestEvictedPods(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	hog1 := &podSeen{name: "hog-1", app: "hog", created: at(0), node: "real-node"}
	hog2 := &podSeen{name: "hog-2", app: "hog", created: at(0), node: "real-node"}
	web1 := &podSeen{name: "web-1", app: "web", created: at(-30), node: "real-node"}
	// hog-1's replacement, made in the second of its eviction (the
	// API server's times are whole seconds), Ready 4 s after it.
	hog3 := &podSeen{name: "hog-3", app: "hog", created: at(48), node: otherNode, ready: at(52)}
	web2 := &podSeen{name: "web-2", app: "web", created: at(61), node: otherNode}
	l := testLog(t0, hog1, hog2, web1, hog3, web2)
	hog1.threshold, web1.threshold, hog2.threshold = "100Mi", "352321536", "100Mi"
	l.countEviction(hog1, "kubelet", at(48.6))
	l.countEviction(web1, "kubelet", at(60))
	l.countEviction(hog2, "kubelet", at(70))
	v := l.evictedPods()
	if len(v) != 3 {
		t.Fatalf("%d victims, want 3: %+v", len(v), v)
	}
	if v[0].app != "hog" || v[0].replacedOn != otherNode || !v[0].replacementReady.Equal(at(52)) {
		t.Errorf("first victim %+v, want the hog replaced by hog-3 on %s, Ready at %v", v[0], otherNode, at(52))
	}
	if v[1].replacedOn != otherNode || !v[1].replacementReady.IsZero() {
		t.Errorf("second victim %+v, want web-2's node and no Ready", v[1])
	}
	if v[2].replacedOn != "" {
		t.Errorf("third victim %+v: hog-3 replaces the first, want no replacement", v[2])
	}
	if d, ok := firstReplacementReady(l); !ok || d != 3400*time.Millisecond {
		t.Errorf("first eviction to its replacement Ready: %v %t, want 3.4s", d, ok)
	}

	rows := evictionRows(hogApp, otherNode, func(l *podLog) *podLog { return l }, func(*podLog) pdbResult { return pdbResult{} })
	want := map[string]string{
		"first victim, and whether it was the cause":                                                                  "hog (kubelet): the cause",
		"replacements of the evicted pods, by node":                                                                   "3 (none 1, real-node-2 2)",
		"evicted pods not replaced on the other real node (by the end)":                                               "1",
		"first eviction asked → its replacement Ready (s)":                                                            "3",
		"evicted pods' shutdown, by outcome":                                                                          "3 (not seen 3)",
		"seconds a PodDisruptionBudget (web, hog: maxUnavailable 1) was broken":                                       "0",
		"the kubelet's evictions, by the threshold quantity it named (the section's A′ settings tell soft from hard)": "3 (100Mi 2, 352321536 1)",
	}
	for _, r := range rows {
		if w, ok := want[r.name]; ok {
			if got := r.text(l); got != w {
				t.Errorf("%s: %q, want %q", r.name, got, w)
			}
			delete(want, r.name)
		}
	}
	for name := range want {
		t.Errorf("no row %q", name)
	}
}

func TestShutdownOf(t *testing.T) {
	for _, tc := range []struct {
		stop *corev1.ContainerStateTerminated
		want string
	}{
		{nil, shutdownNotSeen},
		{&corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}, shutdownDrained},
		{&corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", Message: "procs=0 threads=20 failed=0 memory=0\nstop=SIGTERM drain_ms=5000\n"}, shutdownCut},
		{&corev1.ContainerStateTerminated{ExitCode: 137, Reason: "Error", Message: "procs=0 threads=20 failed=0 memory=0\n"}, shutdownNoTerm},
		{&corev1.ContainerStateTerminated{ExitCode: 137, Reason: "OOMKilled"}, shutdownOOM},
	} {
		if got := shutdownOf(tc.stop); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.stop, got, tc.want)
		}
	}
}

func TestPDBFollower(t *testing.T) {
	f := &pdbFollower{r: pdbResult{broken: map[string]int{}, lowest: map[string]string{}}, low: map[string]int32{}}
	for _, s := range []struct{ healthy, desired int32 }{{3, 2}, {2, 2}, {1, 2}, {0, 2}, {1, 2}, {2, 2}} {
		f.see("web", s.healthy, s.desired)
	}
	f.see("hog", 1, 1)
	if got, want := f.r.String(), "3 (web 3 s, down to 0/2 healthy)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}

func TestSpread(t *testing.T) {
	for _, tc := range []struct {
		xs      []float64
		missing int
		want    string
	}{
		{nil, 3, "—; 3 run(s) without"},
		{[]float64{4}, 0, "4"},
		{[]float64{3, 1, 2}, 0, "2 (1–3)"},
		{[]float64{1, 2}, 1, "1.5 (1–2); 1 run(s) without"},
	} {
		if got := spread(tc.xs, tc.missing); got != tc.want {
			t.Errorf("spread(%v, %d) = %q, want %q", tc.xs, tc.missing, got, tc.want)
		}
	}
}

func TestRender(t *testing.T) {
	old := *runs
	*runs = 3
	t.Cleanup(func() { *runs = old })
	t0 := time.Date(2026, 12, 6, 6, 0, 0, 0, time.UTC)
	pid := map[string][]stackRun[result]{}
	var memory []stackRun[memResult]
	var ips []stackRun[ipResult]
	tunedPID, _ := tunedPIDs(32768, 30768, 95)
	tunedMem, _ := tunedMemory(memBudget, memLinePercent)
	for i := 1; i <= 3; i++ {
		for _, m := range modes {
			hog := &podSeen{name: "hog-1", app: "hog", created: t0, node: "real-node",
				stop: &corev1.ContainerStateTerminated{ExitCode: 0}}
			repl := &podSeen{name: "hog-2", app: "hog", created: t0.Add(50 * time.Second), node: otherNode, ready: t0.Add(time.Duration(50+i) * time.Second)}
			l := testLog(t0, hog, repl)
			l.countEviction(hog, "kubelet", t0.Add(50*time.Second))
			r := result{crossedAt: 47 * time.Second, log: l, kubelet: "v1.37.2", pdb: pdbResult{broken: map[string]int{"web": i - 1}, lowest: map[string]string{"web": "1/2"}}}
			mr := memResult{budget: memBudget, allocatable: memBudget - memoryHardAvailable, line: lineOf(memBudget-memoryHardAvailable, memLinePercent), log: l, kubelet: "v1.37.2"}
			if m.tuned {
				r.tuned = "real-node: " + tunedPID.String()
				mr.tuned = "real-node: " + tunedMem.String()
			}
			for _, part := range pidParts() {
				pid[part.name] = append(pid[part.name], stackRun[result]{m.stack(), i, r})
			}
			memory = append(memory, stackRun[memResult]{m.stack(), i, mr})
		}
		for _, m := range untuned(modes) {
			ips = append(ips, stackRun[ipResult]{m.stack(), i, ipResult{kubelet: "v1.37.2", firstMovedRunning: -1}})
		}
	}
	out, measured := render(measurement{made: t0, commit: "abc", kernel: "Linux 6.18"}, pid, ips, memory, "")
	if want := partNames(); !slices.Equal(measured, want) {
		t.Errorf("measured %v, want %v", measured, want)
	}
	for _, want := range []string{
		"Measured by `make e2e-bench PARTS=storm` on 6 December 2026, 06:00 UTC from commit abc (Linux 6.18, 2 cores; kubelet v1.37.2, as the Nodes report it), 3 runs with each stack.",
		"## Method",
		"evictionSoft: {pid.available: capacity − ⌊allocatable × 95 / 100⌋}",
		"evictionSoft: {allocatableMemory.available: budget − ⌊allocatable × 80 / 100⌋}",
		"A′'s kubelets: real-node: evictionHard {pid.available: 30768} (with the others of every stack), evictionSoft {pid.available: 30868}, evictionSoftGracePeriod {pid.available: 2s}, evictionMaxPodGracePeriod 30, evictionPressureTransitionPeriod 5m0s.",
		"A′'s kubelets: real-node: evictionSoft {allocatableMemory.available: 352321536}, evictionSoftGracePeriod {allocatableMemory.available: 2s}, evictionMaxPodGracePeriod 30, evictionPressureTransitionPeriod 5m0s.",
		"| | A, run 1 | A′, run 1 | B, run 1 | A, run 2 | A′, run 2 | B, run 2 | A, run 3 | A′, run 3 | B, run 3 |",
		"| | A | A′ | B |",
		"| first victim, and whether it was the cause | 1 (1–1) | 1 (1–1) | 1 (1–1) |",
		"| first eviction asked → its replacement Ready (s) | 2 (1–3) | 2 (1–3) | 2 (1–3) |",
		"| seconds a PodDisruptionBudget (web, hog: maxUnavailable 1) was broken | 1 (0–2) | 1 (0–2) | 1 (0–2) |",
		"| evicted pods that shut down gracefully (SIGTERM, the 5s drain run in full within their 10 s grace, exit 0) | 1 (1–1) | 1 (1–1) | 1 (1–1) |",
		"| evicted pods not replaced on the other real node (by the end) | 0 (0–0) | 0 (0–0) | 0 (0–0) |",
		"| containers OOM-killed | 0 (0–0) | 0 (0–0) | 0 (0–0) |",
	} {
		if n := strings.Count(out, want); n == 0 {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
	// Every PID part and the memory part have the rows; the pod-IP part
	// has no A′.
	for _, section := range []string{"## A PID storm", "## A slow PID leak", "## A memory hog"} {
		i := strings.Index(out, section)
		if i < 0 {
			t.Fatalf("no section %q", section)
		}
		rest := out[i+len(section):]
		if j := strings.Index(rest, "\n## "); j >= 0 {
			rest = rest[:j]
		}
		if strings.Count(rest, "| first victim, and whether it was the cause |") != 2 {
			t.Errorf("%s: the row of the first victim is not in both its tables", section)
		}
	}
	ip := out[strings.Index(out, "## Pod IPs"):]
	ip = ip[:strings.Index(ip, "\n## ")]
	if strings.Contains(ip, "A′,") || !strings.Contains(ip, "| | A, run 1 | B, run 1 | A, run 2 |") {
		t.Errorf("the pod-IP part's table is not A and B alone:\n%s", ip)
	}
}

// A part measured again replaces its own section alone: the others stay as
// the file had them, and a part never measured says so.
func TestRenderKeepsTheOtherParts(t *testing.T) {
	old := *runs
	*runs = 1
	t.Cleanup(func() { *runs = old })
	doc := "# Side by side, an older header\n\nold method\n\n" +
		sectionMarker("storm") + "\n## A PID storm\n\nthe storm's old runs\n\n" +
		sectionMarker("podips") + "\n## Pod IPs running out, on two fresh real nodes\n\nthe pod IPs' old runs\n"
	ips := []stackRun[ipResult]{{"A", 1, ipResult{kubelet: "v1.37.2", firstMovedRunning: -1}}, {"B", 1, ipResult{kubelet: "v1.37.2", firstMovedRunning: -1}}}
	out, measured := render(measurement{made: time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC), commit: "def", kernel: "Linux 6.18"}, nil, ips, nil, doc)
	if !slices.Equal(measured, []string{podIPsPart}) {
		t.Errorf("measured %v, want [podips]", measured)
	}
	got := existingSections(out)
	if len(got) != len(partNames()) {
		t.Fatalf("%d sections, want one per part (%v):\n%s", len(got), partNames(), out)
	}
	for part, want := range map[string]string{
		"storm":    "the storm's old runs",
		"slowleak": "Not measured yet: `make e2e-bench PARTS=slowleak`.",
		"podips":   "PARTS=podips` on 6 December 2026, 10:00 UTC from commit def",
		"memory":   "## A memory hog\n\nNot measured yet",
	} {
		if !strings.Contains(got[part], want) {
			t.Errorf("section %s has no %q:\n%s", part, want, got[part])
		}
	}
	if strings.Contains(got["podips"], "old runs") {
		t.Errorf("the pod-IP part's old runs were kept beside its new ones:\n%s", got["podips"])
	}
	if strings.Contains(out, "older header") || !strings.Contains(out, "## Method") {
		t.Errorf("the header and method are not written afresh:\n%s", out[:200])
	}
	// Written again with nothing new, the table is unchanged.
	again, _ := render(measurement{}, nil, nil, nil, out)
	if again != out {
		t.Errorf("rendering the table again changed it:\n%s\nwant:\n%s", again, out)
	}
}

func TestSelectParts(t *testing.T) {
	if got, err := selectParts("memory, storm"); err != nil || len(got) != 2 || !got["memory"] || !got["storm"] {
		t.Errorf(`selectParts("memory, storm") = %v, %v`, got, err)
	}
	for _, bad := range []string{"", "storm,storm", "pids"} {
		if _, err := selectParts(bad); err == nil || !strings.Contains(err.Error(), "-parts") {
			t.Errorf("selectParts(%q): error %v, want one naming -parts", bad, err)
		}
	}
}

// TestKubeletThreshold: the threshold quantity of a kubelet's eviction is
// read from its DisruptionTarget condition, or the pod's status message,
// and is "" for any other pod.
func TestKubeletThreshold(t *testing.T) {
	const msg = "The node was low on resource: memory. Threshold quantity: 352321536, available: 301264Ki. Container stress was using 912Mi, request is 64Mi, has larger consumption of memory. "
	for _, tc := range []struct {
		name string
		pod  corev1.Pod
		want string
	}{
		{"condition", corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "TerminationByKubelet", Message: msg}}}}, "352321536"},
		{"status message", corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted",
			Message: "The node was low on resource: pids. Threshold quantity: 30768, available: 30701. "}}, "30768"},
		{"the Eviction API's", corev1.Pod{Status: corev1.PodStatus{Conditions: []corev1.PodCondition{
			{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "EvictionByEvictionAPI", Message: "Eviction API: evicting"}}}}, ""},
		{"none", corev1.Pod{}, ""},
	} {
		if got := kubeletThreshold(&tc.pod); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
