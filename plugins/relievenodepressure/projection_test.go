package relievenodepressure

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/descheduler/test"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// TestANewTriggerCopiesNothing registers a trigger the plugin does not ship
// and checks that the core plans, checks the room for, evicts, counts and
// records for it as for its own: a core that knew its triggers by name
// would leave it out.
func TestANewTriggerCopiesNothing(t *testing.T) {
	RegisterMetrics()
	pods := []*v1.Pod{
		testPod("a", "n1", annotate(podWidgets, "1"), ownedBy("a")),
		testPod("b", "n1", annotate(podWidgets, "4"), ownedBy("b")),
		testPod("c", "n1", ownedBy("c")),
	}
	for _, tc := range []struct {
		name string
		// roomUsed is the destination's widgets in use, of 10.
		roomUsed int64
		want     []string
	}{
		// 9 of 10 used: b alone brings the node to its target (5 of 10).
		{"room", 0, []string{"b"}},
		// n2 at 8 of 10 takes nobody's widgets within 80 %.
		{"no room", 8, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := []*v1.Node{widgetNode("n1", 10, 9), widgetNode("n2", 10, tc.roomUsed)}
			// Only the PID trigger is enabled, and no node has PID
			// figures: what is evicted is the new trigger's doing.
			e := newEnv(t, setup{args: RelieveNodePressureArgs{PIDs: &PIDsTrigger{}}}, objects(nodes, pods)...)
			e.plugin.triggers = append(e.plugin.triggers, widgetsTrigger())
			e.plugin.rooms = roomChecks(e.plugin.triggers)
			before, unrelievable := evictionCount(t, keyWidgets), nodeCount(t, ResultUnrelievable)

			got := e.run(t, nodes...)
			if !equal(got, tc.want) {
				t.Fatalf("evicted %v, want %v", got, tc.want)
			}
			if got := evictionCount(t, keyWidgets) - before; got != float64(len(tc.want)) {
				t.Errorf("EvictionsTotal{reason=%q} grew by %v, want %d", keyWidgets, got, len(tc.want))
			}
			if len(tc.want) == 0 {
				if got := nodeCount(t, ResultUnrelievable) - unrelievable; got != 1 {
					t.Errorf("NodesTotal{result=unrelievable} grew by %v, want 1", got)
				}
				if events := e.warningEvents(); len(events) != 1 || !strings.Contains(events[0], "widgets 9 > threshold") {
					t.Errorf("Events %q, want one NodePressureUnrelievable with the trigger's summary", events)
				}
				return
			}
			if reason := e.reasons["b"]; !strings.Contains(reason, "widgets above threshold") {
				t.Errorf("eviction reason %q does not give the trigger's reason", reason)
			}
			// The trigger's figure does not account for b: its next relief
			// waits for a sample stamped after the one planned on.
			var record nodeRecord
			if err := json.Unmarshal([]byte(e.stateOf(t)[0].(*v1.ConfigMap).Data["n1"]), &record); err != nil {
				t.Fatal(err)
			}
			if !record.awaits(keyWidgets) || !record.SampledAt[keyWidgets].Equal(widgetsSampledAt) {
				t.Fatalf("record %+v does not await a widgets sample after %s", record, widgetsSampledAt)
			}
			p, err := e.plugin.Plan(t.Context(), nodes, nodes[0])
			if err != nil {
				t.Fatal(err)
			}
			// b still runs (the fake API server evicts nothing): a sample
			// taken now still counts it.
			if why := p.Unknown["widgets"]; !strings.HasPrefix(why, "awaiting the exit of default/b") || p.Triggered {
				t.Errorf("plan after the relief: Unknown %q, Triggered %v; want it awaiting b's exit", why, p.Triggered)
			}
		})
	}
}

func TestExceeds(t *testing.T) {
	for _, tc := range []struct {
		part, whole, pct int64
		want             bool
	}{
		{96, 100, 95, true},
		{95, 100, 95, false},
		{0, 100, 0, false},
		{1, 100, 0, true},
		{9223372036854775807, 9223372036854775807, 99, true},
		{9223372036854775807, 9223372036854775807, 100, false},
		{-5, 100, 0, false},
	} {
		if got := exceeds(tc.part, tc.whole, tc.pct); got != tc.want {
			t.Errorf("exceeds(%d, %d, %d) = %v, want %v", tc.part, tc.whole, tc.pct, got, tc.want)
		}
	}
}

func TestDisabledTriggerIsIgnored(t *testing.T) {
	// PID pressure only, and only the OOM trigger configured.
	n1, n2 := pidNode("n1", 10000, 9900), spareNode("n2")
	e := newEnv(t, setup{args: RelieveNodePressureArgs{OOM: &OOMTrigger{}}}, objects([]*v1.Node{n1, n2}, hotNodePods("n1", 4))...)
	if got := e.run(t, n1, n2); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
}

func TestLeavesNodesAtOrBelowThresholdAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		node *v1.Node
	}{
		{"exactly at threshold", pidNode("n1", 10000, 9500)},
		{"between target and threshold", pidNode("n1", 10000, 9200)},
		{"no PID annotations", spareNode("n1")},
		{"stale sample", test.BuildTestNode("n1", 64000, 64<<30, 110, func(n *v1.Node) {
			n.Annotations = pidstats.NodeStats{Capacity: 10000, Used: 9900, SampledAt: now.Add(-time.Hour)}.Annotations()
		})},
		{"malformed annotation", test.BuildTestNode("n1", 64000, 64<<30, 110, func(n *v1.Node) {
			n.Annotations = map[string]string{pidstats.AnnotationCapacity: "many", pidstats.AnnotationUsed: "9900",
				pidstats.AnnotationSampledAt: now.Format(time.RFC3339)}
		})},
		{"nothing allocatable", test.BuildTestNode("n1", 64000, 64<<30, 110, func(n *v1.Node) {
			n.Annotations = pidstats.NodeStats{Capacity: 10000, Reserved: 10000, Used: 9900, SampledAt: now}.Annotations()
		})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n2 := spareNode("n2")
			e := newEnv(t, setup{}, objects([]*v1.Node{tc.node, n2}, hotNodePods("n1", 4))...)
			if got := e.run(t, tc.node, n2); len(got) != 0 {
				t.Fatalf("evicted %v, want none", got)
			}
		})
	}
}

func TestPodsPlacedAfterTheSampleRaiseNoPressure(t *testing.T) {
	// 9400 reported (94 %) plus a pod bound after the sample that declares
	// 200: NodePIDs counts 96 % for placement, but the pod held nothing the
	// sample saw, and a declaration raises no pressure: below 95 %.
	n1, n2 := pidNode("n1", 10000, 9400), spareNode("n2")
	late := testPod("late", "n1", pids(200))
	late.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now)
	pods := []*v1.Pod{late, testPod("early", "n1", pids(700), restarts(3))}
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, pods)...)
	if got := e.run(t, n1, n2); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
}

// A bare pod that cannot start (its Secret is missing), bound before the
// sample and declaring many PIDs, holds nothing: on a node at 80 % it
// raises no pressure, and another tenant's running pods stay. NodePIDs and
// the room check still count its declaration for placement.
func TestADeclarationRaisesNoPressure(t *testing.T) {
	bare := testPod("bare", "n1", noOwner, pids(4000), inNamespace("tenant-a"), waitingForSandbox)
	pods := []*v1.Pod{bare}
	held := map[*v1.Pod]int64{}
	for i := range 5 {
		p := testPod(fmt.Sprintf("web-%d", i), "n1", inNamespace("tenant-b"))
		pods = append(pods, p)
		held[p] = 1000
	}
	n1 := listed(pidNode("n1", 10000, 8000), held)
	nodes := []*v1.Node{n1, pidNode("n2", 10000, 1000)}
	e := newEnv(t, setup{}, objects(nodes, pods)...)
	if got := e.run(t, nodes...); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
	p, _, _ := planned(t, e, nodes, n1)
	if p.Triggered {
		t.Errorf("Plan: triggered at %v, want the 8000 measured PIDs, below the threshold", p.Before)
	}
	if got, want := fmt.Sprint(p.Before), "[PIDsUsed 8000/10000 (80.0%)]"; got != want {
		t.Errorf("Plan: figures %s, want %s", got, want)
	}

	// As a destination n1 counts the declaration: 8000 + 4000 leaves no
	// room for hog's replacement of 1000; without the bare pod it does.
	hog := testPod("hog", "n3", ownedBy("hog"))
	n3 := listed(pidNode("n3", 10000, 9700), map[*v1.Pod]int64{hog: 1000})
	nodes = []*v1.Node{n3, n1}
	for _, c := range []struct {
		pods []*v1.Pod
		want []string
	}{{append(pods, hog), nil}, {append(pods[1:], hog), []string{"hog"}}} {
		e = newEnv(t, setup{}, objects(nodes, c.pods)...)
		if got := e.run(t, nodes...); !equal(got, c.want) {
			t.Errorf("with %d pods on n1: evicted %v, want %v", len(c.pods)-1, got, c.want)
		}
	}
}

// A trigger the plugin does not ship: a node's "widgets", read from two
// node annotations, and what each pod holds of them from its own. It is
// defined only by a trigger and its projection, as the shipped ones are.
const (
	widgetsUsed     = "test.headroom.dev/widgets-used"
	widgetsCapacity = "test.headroom.dev/widgets-capacity"
	podWidgets      = "test.headroom.dev/widgets"
	keyWidgets      = "widgets"
)

var widgetsSampledAt = now.Add(-time.Minute)

func widgetsOf(obj map[string]string, key string) int64 {
	n, _ := strconv.ParseInt(obj[key], 10, 64)
	return n
}

// widgetsTrigger fires above 80 % and relieves to 50 %; a replacement
// takes its widgets at its destination, which must stay at or below 80 %.
func widgetsTrigger() *trigger {
	return &trigger{
		key: keyWidgets, name: "widgets", noun: "widget", recorded: true,
		assess: func(_ *cycle, node *v1.Node, _ []*v1.Pod) (projection, error) {
			if _, ok := node.Annotations[widgetsCapacity]; !ok {
				return nil, fmt.Errorf("no widgets")
			}
			used := widgetsOf(node.Annotations, widgetsUsed)
			return &widgets{gauge{start: used, used: used, allocatable: widgetsOf(node.Annotations, widgetsCapacity),
				threshold: 80, target: 50, noAllocatable: "no widgets"}}, nil
		},
		room: func(_ *cycle, node *v1.Node) (*roomFigure, error) {
			if _, ok := node.Annotations[widgetsCapacity]; !ok {
				return nil, nil
			}
			capacity := widgetsOf(node.Annotations, widgetsCapacity)
			return &roomFigure{
				used: widgetsOf(node.Annotations, widgetsUsed),
				need: func(_ *nodeRelief, pod *v1.Pod) (int64, bool) { return widgetsOf(pod.Annotations, podWidgets), true },
				fits: func(used, need int64) bool { return !exceeds(used+need, capacity, 80) },
			}, nil
		},
	}
}

type widgets struct{ g gauge }

func (w *widgets) level() gauge { return w.g }
func (w *widgets) gain(pod *v1.Pod) (int64, error) {
	return widgetsOf(pod.Annotations, podWidgets), nil
}
func (w *widgets) remove(_ *v1.Pod, g int64) { w.g.used -= g }
func (w *widgets) clone() projection         { c := *w; return &c }
func (w *widgets) accounts(*v1.Pod) bool     { return false }
func (w *widgets) sampleTime() time.Time     { return widgetsSampledAt }
func (w *widgets) keysAndValues(prefix string) []any {
	return []any{logKey(prefix, "widgetsUsed"), w.g.used}
}
func (w *widgets) summary() string               { return fmt.Sprintf("widgets %d > threshold", w.g.start) }
func (w *widgets) malformedNode() *malformedNode { return nil }
func (w *widgets) frees(_ *v1.Pod, g int64) (reason, whyNot string) {
	if g <= 0 {
		return "", "frees no widgets"
	}
	return "widgets above threshold", ""
}

func widgetNode(name string, capacity, used int64) *v1.Node {
	n := spareNode(name)
	n.Annotations = map[string]string{widgetsCapacity: fmt.Sprint(capacity), widgetsUsed: fmt.Sprint(used)}
	return n
}
