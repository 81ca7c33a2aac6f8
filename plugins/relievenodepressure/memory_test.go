package relievenodepressure

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/test"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// memoryArgs turns the memory trigger on, alone, with its defaults: a
// threshold of 90 % and a target of 85 % of allocatable memory.
func memoryArgs() RelieveNodePressureArgs {
	return RelieveNodePressureArgs{Memory: &MemoryTrigger{}}
}

// measuredNode is a ready node of 10Gi, all of it allocatable, whose memory
// sample, a minute old, reports a working set of used bytes and, when held
// is not nil, the listed pods' working sets (a complete list: fewer pods
// than the bound).
func measuredNode(name string, used int64, held map[*v1.Pod]int64) *v1.Node {
	return test.BuildTestNode(name, 64000, 10*gib, 110, func(n *v1.Node) {
		n.Annotations = memorySample(used, now.Add(-time.Minute), held)
	})
}

// memorySample is the node agent's memory annotations.
func memorySample(used int64, at time.Time, held map[*v1.Pod]int64) map[string]string {
	s := memstats.NodeStats{Used: used, SampledAt: at}
	if held != nil {
		var figures []sample.PodFigure
		for pod, b := range held {
			figures = append(figures, sample.PodFigure{UID: pod.UID, Value: b})
		}
		s.Pods = memstats.PodListFormat.New(figures)
	}
	return s.Annotations()
}

// resampled is node with its memory sample taken again at at, with the same
// figures.
func resampled(node *v1.Node, at time.Time) *v1.Node {
	n := node.DeepCopy()
	n.Annotations[memstats.AnnotationSampledAt] = sample.FormatTime(at)
	return n
}

// memoryRequest sets the pod's memory request to bytes.
func memoryRequest(bytes int64) podOption {
	return func(p *v1.Pod) {
		p.Spec.Containers[0].Resources.Requests[v1.ResourceMemory] = *resource.NewQuantity(bytes, resource.BinarySI)
	}
}

// A node whose working set is at 95 % of its allocatable memory: the pods
// first in the delete order (three replicas of web, doubled up on the node,
// then idle, with the most restarts) free little or nothing, the hog after
// them frees 2Gi on its own. idle requests 2Gi but the complete list does
// not name it: it held nothing at the sample. Only the hog is evicted, with
// the memory trigger alone and with the OOM trigger on beside it (whose
// worst-case model sees no shortfall here).
func TestMemoryRelievesByMeasuredGain(t *testing.T) {
	var pods []*v1.Pod
	held := map[*v1.Pod]int64{}
	for _, name := range []string{"web-a", "web-b", "web-c"} {
		p := testPod(name, "n1", ownedBy("web"))
		pods = append(pods, p)
		held[p] = 300 * mib
	}
	idle := testPod("idle", "n1", ownedBy("idle"), memoryRequest(2*gib), restarts(9))
	hog := testPod("hog", "n1", ownedBy("hog"))
	pods = append(pods, idle, hog)
	held[hog] = 2 * gib

	for name, args := range map[string]RelieveNodePressureArgs{
		"memory":         memoryArgs(),
		"memory and OOM": {Memory: &MemoryTrigger{}, OOM: &OOMTrigger{}},
	} {
		t.Run(name, func(t *testing.T) {
			// 9.5Gi used; the target is 8.5Gi. The web pods together free
			// 900Mi (8.62Gi), the hog alone 2Gi (7.5Gi): the plan is pruned
			// to the hog.
			nodes := []*v1.Node{measuredNode("n1", 9728*mib, held), spareNode("n2")}
			e := newEnv(t, setup{args: args}, objects(nodes, pods)...)

			p, evict, skip := planned(t, e, nodes, nodes[0])
			if !p.Relieves || !equal(evict, []string{"hog"}) {
				t.Fatalf("Plan: relieves %v, evicts %v; want the hog alone", p.Relieves, evict)
			}
			// The hog, furthest beyond its request (none), is considered
			// first and reaches the target on its own.
			if got, want := skip["idle"], "not needed: the evictions before it bring the node to its target"; got != want {
				t.Errorf("idle skipped for %q, want %q", got, want)
			}
			byName := map[string]int64{}
			for pod, b := range held {
				byName[pod.Name] = b
			}
			for _, pp := range p.Pods {
				if want := byName[pp.Pod.Name]; pp.MemoryBytes != want {
					t.Errorf("Plan: %s frees %d bytes, want %d", pp.Pod.Name, pp.MemoryBytes, want)
				}
			}
			if got, want := fmtKV(p.Before), "memoryUsed=9728Mi/10Gi (95.0%)"; !strings.HasPrefix(got, want) {
				t.Errorf("Plan: figures before %q, want %q first", got, want)
			}
			if got, want := fmtKV(p.After), "memoryUsed=7680Mi/10Gi (75.0%)"; !strings.HasPrefix(got, want) {
				t.Errorf("Plan: figures after %q, want %q first", got, want)
			}

			RegisterMetrics()
			memoryBefore, oomBefore := evictionCount(t, keyMemory), evictionCount(t, EvictionReasonOOM)
			if got := e.run(t, nodes...); !equal(got, []string{"hog"}) {
				t.Fatalf("evicted %v, want the hog alone", got)
			}
			r := e.reasons["hog"]
			if !strings.Contains(r, "RelieveNodePressure: node n1 memory 95.0% used > threshold 90%") {
				t.Errorf("eviction reason %q does not name the memory trigger", r)
			}
			// The counter's reasons are the eviction reason's triggers.
			if got := evictionCount(t, keyMemory) - memoryBefore; got != 1 {
				t.Errorf("counted %v evictions for memory, want 1", got)
			}
			wantOOM := 0.0
			if strings.Contains(r, "OOM shortfall") {
				wantOOM = 1
			}
			if got := evictionCount(t, EvictionReasonOOM) - oomBefore; got != wantOOM {
				t.Errorf("counted %v evictions for oom, want %v (reason %q)", got, wantOOM, r)
			}
		})
	}
}

// A pod that grows past its request is relieved before pods that hold
// about what they asked for, though the neutral order puts it last and one
// of them would do: three replicas of web, doubled up on the node, hold
// 300Mi each of a 256Mi request, the hog 2Gi of 64Mi. The kubelet ranks
// them so for eviction; walking the neutral order would evict a web replica
// now and another at every run while the hog goes on growing.
func TestMemoryRelievesThePodBeyondItsRequestFirst(t *testing.T) {
	var pods []*v1.Pod
	held := map[*v1.Pod]int64{}
	for _, name := range []string{"web-a", "web-b", "web-c"} {
		p := testPod(name, "n1", ownedBy("web"), memoryRequest(256*mib))
		pods = append(pods, p)
		held[p] = 300 * mib
	}
	hog := testPod("hog", "n1", ownedBy("hog"), memoryRequest(64*mib))
	pods = append(pods, hog)
	held[hog] = 2 * gib
	// 9300Mi of 10Gi (90.8 %) > 90 %; the target, 89 %, is 186Mi away:
	// one web replica would reach it on its own.
	args := RelieveNodePressureArgs{Memory: &MemoryTrigger{ThresholdPercent: ptr.To[int64](90), TargetPercent: ptr.To[int64](89)}}
	nodes := []*v1.Node{measuredNode("n1", 9300*mib, held), spareNode("n2")}
	e := newEnv(t, setup{args: args}, objects(nodes, pods)...)
	if got := e.run(t, nodes...); !equal(got, []string{"hog"}) {
		t.Fatalf("evicted %v, want the hog, the pod beyond its request", got)
	}

	// Within their requests, the kubelet ranks the pods by how far their
	// use is above their request: the web pods (56Mi below) before idle,
	// which the complete list does not name (it held nothing at the sample,
	// 2Gi below its request): it is never reached.
	held = map[*v1.Pod]int64{}
	pods = nil
	for _, name := range []string{"web-a", "web-b", "web-c"} {
		p := testPod(name, "n1", ownedBy(name), memoryRequest(256*mib))
		pods = append(pods, p)
		held[p] = 200 * mib
	}
	idle := testPod("idle", "n1", ownedBy("idle"), memoryRequest(2*gib), restarts(9))
	nodes = []*v1.Node{measuredNode("n1", 9300*mib, held), spareNode("n2")}
	e = newEnv(t, setup{args: args}, objects(nodes, append(pods, idle))...)
	_, evict, skip := planned(t, e, nodes, nodes[0])
	if len(evict) != 1 || !strings.HasPrefix(evict[0], "web-") {
		t.Fatalf("Plan evicts %v, want one web replica", evict)
	}
	if got, want := skip["idle"], "not needed: the evictions before it bring the node to its target"; got != want {
		t.Errorf("idle skipped for %q, want %q", got, want)
	}
	if got := e.run(t, nodes...); !equal(got, evict) {
		t.Fatalf("evicted %v, want the planned %v", got, evict)
	}
}

// The next run before a new memory sample never evicts again for the
// pressure a run relieved: where the sample lists the evicted pod, the
// estimate subtracts what it held once it is terminating or gone; where it
// cannot (no list), the record makes the memory trigger wait for a memory
// sample newer than the relief, and says so.
func TestMemoryNeverTwiceBeforeANewSample(t *testing.T) {
	hog := testPod("hog", "n1", ownedBy("hog"), memoryRequest(2*gib), restarts(5))
	bystander := testPod("bystander", "n1", ownedBy("bystander"), memoryRequest(1*gib))
	for _, listing := range []string{"listed", "unlisted"} {
		t.Run(listing, func(t *testing.T) {
			var held map[*v1.Pod]int64
			if listing == "listed" {
				held = map[*v1.Pod]int64{hog: 2 * gib, bystander: 1 * gib}
			}
			// 9.5Gi; the hog (most restarts first) frees 2Gi: 7.5Gi.
			nodes := []*v1.Node{measuredNode("n1", 9728*mib, held), spareNode("n2")}
			e := newEnv(t, setup{args: memoryArgs()}, objects(nodes, []*v1.Pod{hog, bystander})...)
			if got := e.run(t, nodes...); !equal(got, []string{"hog"}) {
				t.Fatalf("first run evicted %v, want the hog", got)
			}
			state := e.stateOf(t)
			var record nodeRecord
			if err := json.Unmarshal([]byte(state[0].(*v1.ConfigMap).Data["n1"]), &record); err != nil {
				t.Fatal(err)
			}
			if got, want := record.awaits(keyMemory), listing == "unlisted"; got != want || record.awaits(keyPIDs) {
				t.Fatalf("record %+v: awaits memory %v, want %v; awaits PIDs %v, want false", record, got, want, record.awaits(keyPIDs))
			}
			for name, left := range map[string][]*v1.Pod{
				"terminating": {withOpts(hog, terminatingPod), bystander},
				"gone":        {bystander},
			} {
				e := newEnv(t, setup{args: memoryArgs()}, append(objects(nodes, left), state...)...)
				if got := e.run(t, nodes...); len(got) != 0 {
					t.Fatalf("%s: the next run, before a new sample, evicted %v", name, got)
				}
				if listing == "listed" || name != "gone" {
					continue
				}
				p, err := e.plugin.Plan(context.Background(), nodes, nodes[0])
				if err != nil {
					t.Fatal(err)
				}
				if why := p.Unknown["memory"]; !strings.HasPrefix(why, "awaiting a memory sample newer than the last relief") {
					t.Errorf("Plan: memory unknown because %q, want it awaiting a newer sample", why)
				}
				// The record is what held it back: without it, the same
				// sample and pods make the run evict the bystander.
				fresh := newEnv(t, setup{args: memoryArgs()}, objects(nodes, left)...)
				if got := fresh.run(t, nodes...); len(got) == 0 {
					t.Fatal("without the record the run evicts nothing either: this case tests nothing")
				}
				// A memory sample newer than the relief that still shows the
				// pressure is new pressure: a run a minute later relieves it.
				newer := []*v1.Node{resampled(nodes[0], now.Add(30*time.Second)), nodes[1]}
				// The state of the run that saw the hog gone: a sample
				// stamped after the one it saw then no longer counts it.
				e = newEnv(t, setup{args: memoryArgs()}, append(objects(newer, left), e.stateOf(t)...)...)
				e.plugin.now = func() time.Time { return now.Add(time.Minute) }
				if got := e.run(t, newer...); !equal(got, []string{"bystander"}) {
					t.Fatalf("after a newer sample evicted %v, want the bystander", got)
				}
			}
		})
	}
}

// A record written before the memory trigger existed reads as it did: its
// accounted field is the PID trigger's, and the memory trigger waits for
// nothing. A record of today keeps accounted for the PID trigger, so that
// an older descheduler reads it as it would have written it.
func TestRecordOfEarlierVersionsReadsAsItDid(t *testing.T) {
	for _, tc := range []struct {
		raw          string
		pids, memory bool
	}{
		{`{"relieved":"2026-05-01T11:00:00Z","accounted":true}`, false, false},
		{`{"relieved":"2026-05-01T11:00:00Z"}`, true, false},
		{`{"seen":["2026-05-01T11:00:00Z"]}`, true, false},
		{`{"relieved":"2026-05-01T11:00:00Z","accounted":true,"awaiting":["memory"]}`, false, true},
		{`{"relieved":"2026-05-01T11:00:00Z","awaiting":["memory"]}`, true, true},
	} {
		var r nodeRecord
		if err := json.Unmarshal([]byte(tc.raw), &r); err != nil {
			t.Fatalf("%s: %v", tc.raw, err)
		}
		if r.awaits(keyPIDs) != tc.pids || r.awaits(keyMemory) != tc.memory {
			t.Errorf("%s: awaits PIDs %v, memory %v; want %v, %v", tc.raw, r.awaits(keyPIDs), r.awaits(keyMemory), tc.pids, tc.memory)
		}
		back, err := json.Marshal(r)
		if err != nil || string(back) != tc.raw {
			t.Errorf("%s written back as %s (%v)", tc.raw, back, err)
		}
	}
	// Only a relief makes a trigger wait: a record of pressure seen, whose
	// accounted is unset, holds nothing back.
	hog := testPod("hog", "n1", memoryRequest(2*gib))
	nodes := []*v1.Node{measuredNode("n1", 9728*mib, nil), spareNode("n2")}
	e := newEnv(t, setup{args: memoryArgs()}, objects(nodes, []*v1.Pod{hog})...)
	e.plugin.memory = &state{records: map[string]nodeRecord{"n1": {Seen: []time.Time{now.Add(-2 * time.Minute)}}}}
	e.plugin.store = nil
	if got := e.run(t, nodes...); !equal(got, []string{"hog"}) {
		t.Fatalf("evicted %v, want the hog", got)
	}
}

// A relief is debounced on the memory sample's time: a sample already seen
// does not count again.
func TestMemoryPressureMustLast(t *testing.T) {
	pods := []*v1.Pod{testPod("hog", "n1", memoryRequest(2*gib))}
	args := memoryArgs()
	args.PressureSamples = ptr.To[int32](2)
	var state []runtime.Object
	run := func(age time.Duration) []string {
		nodes := []*v1.Node{resampled(measuredNode("n1", 9728*mib, nil), now.Add(-age)), spareNode("n2")}
		e := newEnv(t, setup{args: args}, append(objects(nodes, pods), state...)...)
		got := e.run(t, nodes...)
		state = e.stateOf(t)
		return got
	}
	for i, s := range []struct {
		age  time.Duration
		want int
	}{{2 * time.Minute, 0}, {2 * time.Minute, 0}, {time.Minute, 1}} {
		if got := run(s.age); len(got) != s.want {
			t.Fatalf("run %d (sample at -%v): evicted %v, want %d", i+1, s.age, got, s.want)
		}
	}
}

// The Warning Event of a node the memory trigger cannot relieve names the
// largest memory users and why each stays.
func TestMemoryUnrelievableNodeNamesItsLargestUsers(t *testing.T) {
	hog := testPod("hog", "n1", ownedByDaemonSet)
	pods := []*v1.Pod{hog}
	held := map[*v1.Pod]int64{hog: 6 * gib}
	// Together the small pods free 450Mi: 90.6 %, still above the
	// threshold.
	for _, name := range []string{"small-a", "small-b", "small-c"} {
		p := testPod(name, "n1")
		pods = append(pods, p)
		held[p] = 150 * mib
	}
	nodes := []*v1.Node{measuredNode("n1", 9728*mib, held), spareNode("n2")}
	e := newEnv(t, setup{args: memoryArgs()}, objects(nodes, pods)...)
	if got := e.run(t, nodes...); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
	w := e.warningEvents()
	if len(w) != 1 {
		t.Fatalf("Warning Events %q, want one", w)
	}
	for _, want := range []string{"Warning " + ReasonNodePressureUnrelievable + " ",
		"the pod the kubelet would evict next, default/hog, cannot be evicted (the evictor's filter keeps it",
		"(memory 9728Mi/10Gi used (95.0%) > threshold 90%); nothing evicted. Largest memory users: default/hog (6Gi of memory): the evictor's filter keeps it",
		"default/small-a (150Mi of memory): ranked after default/hog, which cannot be evicted: not the pressure's cause"} {
		if !strings.Contains(w[0], want) {
			t.Errorf("Warning Event %q does not contain %q", w[0], want)
		}
	}
}

// A replacement counts against another node's estimated working set what
// the pod held, or its declared memory (its request) where that is more: a
// destination that would go above the memory threshold is no room. The hog
// requests 1Gi and holds 2Gi.
func TestMemoryRoomCountsWhatThePodHeld(t *testing.T) {
	hog := testPod("hog", "n1", memoryRequest(1*gib))
	n1 := measuredNode("n1", 9728*mib, map[*v1.Pod]int64{hog: 2 * gib})
	// 7Gi + 2Gi is 90 %: at the threshold. 7Gi + 1Mi more is above it.
	for used, want := range map[int64][]string{7 * gib: {"hog"}, 7*gib + mib: nil} {
		n2 := measuredNode("n2", used, nil)
		e := newEnv(t, setup{args: memoryArgs()}, objects([]*v1.Node{n1, n2}, []*v1.Pod{hog})...)
		if got := e.run(t, n1, n2); !equal(got, want) {
			t.Errorf("destination at %d bytes: evicted %v, want %v", used, got, want)
		}
		if want == nil {
			if w := e.warningEvents(); len(w) != 1 || !strings.Contains(w[0], "default/hog (2Gi of memory): no other node has room for its replacement's 2Gi of memory") {
				t.Errorf("Warning Events %q, want one saying the replacement's 2Gi finds no room", w)
			}
		}
	}
}

// Unknown memory (no sample, an invalid or a stale one, no allocatable
// memory) leaves the node alone for the memory trigger, and Plan says why.
func TestMemoryUnknownLeavesTheNodeAlone(t *testing.T) {
	hog := testPod("hog", "n1", memoryRequest(2*gib))
	for _, tc := range []struct {
		name string
		edit func(*v1.Node)
		why  string
	}{
		{"no sample", func(n *v1.Node) { n.Annotations = nil }, "node has no memory annotations"},
		{"stale", func(n *v1.Node) {
			n.Annotations[memstats.AnnotationSampledAt] = sample.FormatTime(now.Add(-11 * time.Minute))
		}, "memory sample is 11m0s old, older than the limit of 10m0s"},
		{"invalid", func(n *v1.Node) { n.Annotations[memstats.AnnotationUsed] = "lots" }, `annotation headroom.dev/memory-used="lots"`},
		{"from the future", func(n *v1.Node) {
			n.Annotations[memstats.AnnotationSampledAt] = sample.FormatTime(now.Add(time.Hour))
		}, "in the future"},
		{"no allocatable memory", func(n *v1.Node) {
			n.Status.Allocatable[v1.ResourceMemory] = resource.MustParse("0")
		}, "no allocatable memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n1 := measuredNode("n1", 9728*mib, nil)
			tc.edit(n1)
			nodes := []*v1.Node{n1, spareNode("n2")}
			e := newEnv(t, setup{args: memoryArgs()}, objects(nodes, []*v1.Pod{hog})...)
			if got := e.run(t, nodes...); len(got) != 0 {
				t.Fatalf("evicted %v, want none", got)
			}
			p, err := e.plugin.Plan(context.Background(), nodes, n1)
			if err != nil {
				t.Fatal(err)
			}
			if why := p.Unknown["memory"]; !strings.Contains(why, tc.why) || p.Triggered {
				t.Errorf("Plan: triggered %v, memory unknown because %q; want untriggered and %q", p.Triggered, why, tc.why)
			}
		})
	}
}

// A malformed headroom.dev/memory-pods on a node above the threshold is
// reported as a malformed headroom.dev/pid-pods is: a log line, a Warning
// Event on the Node and headroom_invalid_annotations_total; the pods' gains
// are then what they declare.
func TestMalformedMemoryPodsFallsBackToDeclaredMemory(t *testing.T) {
	n1 := measuredNode("n1", 9728*mib, nil)
	n1.Annotations[memstats.AnnotationPods] = "not a list"
	counter := headroommetrics.InvalidAnnotations.WithLabelValues(PluginName, memstats.AnnotationPods)
	headroommetrics.Register()
	before, err := testutil.GetCounterMetricValue(counter)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, setup{args: memoryArgs()}, objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{testPod("a", "n1", memoryRequest(2*gib))})...)
	if got := e.run(t, n1, spareNode("n2")); !equal(got, []string{"a"}) {
		t.Fatalf("evicted %v, want a", got)
	}
	if w := e.warningEvents(); len(w) != 1 || !strings.HasPrefix(w[0], "Warning "+ReasonMalformedMemoryPods+" ") ||
		!strings.Contains(w[0], memstats.AnnotationPods) || !strings.Contains(w[0], "gains are the pods' declared memory") {
		t.Fatalf("Warning Events %q, want one %s naming the annotation", w, ReasonMalformedMemoryPods)
	}
	after, err := testutil.GetCounterMetricValue(counter)
	if err != nil {
		t.Fatal(err)
	}
	if after-before != 1 {
		t.Errorf("headroom_invalid_annotations_total{annotation=%q} rose by %v, want 1", memstats.AnnotationPods, after-before)
	}
}

// With the PID trigger on beside the memory trigger, each fires on its own
// figure and the log shows both. As the kubelet reclaims memory before PIDs,
// the plan takes the memory ranking's pod first, then the PID ranking's.
func TestPIDAndMemoryTriggersSideBySide(t *testing.T) {
	hog := testPod("hog", "n1", memoryRequest(2*gib))
	forker := testPod("forker", "n1", pids(1000), restarts(3))
	n1 := measuredNode("n1", 9728*mib, map[*v1.Pod]int64{hog: 2 * gib})
	// The complete PID list names only forker: hog held no PIDs.
	maps.Copy(n1.Annotations, listed(pidNode("n1", 10000, 9700), map[*v1.Pod]int64{forker: 1000}).Annotations)
	args := RelieveNodePressureArgs{PIDs: &PIDsTrigger{}, Memory: &MemoryTrigger{}}
	nodes := []*v1.Node{n1, spareNode("n2")}
	e := newEnv(t, setup{args: args}, objects(nodes, []*v1.Pod{hog, forker})...)
	p, evict, _ := planned(t, e, nodes, n1)
	if !p.Relieves || !equal(evict, []string{"hog", "forker"}) {
		t.Fatalf("Plan: relieves %v, evicts %v; want hog for memory, then forker for PIDs", p.Relieves, evict)
	}
	if got, want := fmt.Sprint(p.Thresholds), "[pidsThresholdPercent 95 pidsTargetPercent 90 memoryThresholdPercent 90 memoryTargetPercent 85]"; got != want {
		t.Errorf("thresholds %q, want %q", got, want)
	}
	if got, want := fmtKV(p.After), "PIDsUsed=8700/10000 (87.0%) memoryUsed=7680Mi/10Gi (75.0%)"; got != want {
		t.Errorf("after %q, want %q", got, want)
	}
	if got := e.run(t, nodes...); !equal(got, []string{"hog", "forker"}) {
		t.Fatalf("evicted %v", got)
	}
	if r := e.reasons["hog"]; !strings.HasSuffix(r, "node n1 memory 95.0% used > threshold 90%") {
		t.Errorf("hog's eviction reason %q, want the memory trigger alone", r)
	}
}
