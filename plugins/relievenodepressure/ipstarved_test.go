package relievenodepressure

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgotesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"
)

// starvedArgs turns the ipStarved trigger on with its defaults.
func starvedArgs() RelieveNodePressureArgs {
	return RelieveNodePressureArgs{IPStarved: &IPStarvedTrigger{}}
}

// starvedFor is a pod on node starved of a pod IP since now − d, with its
// kubelet's Event, last reported a minute ago.
func starvedFor(name, node string, d time.Duration, opts ...podOption) (*v1.Pod, *v1.Event) {
	pod := testPod(name, node, append([]podOption{waitingForSandbox}, opts...)...)
	return pod, sandboxFailure(pod, now.Add(-d), now.Add(-time.Minute), hostLocalExhausted)
}

func starvedEnv(t *testing.T, s setup, nodes []*v1.Node, pods []*v1.Pod, events ...*v1.Event) *env {
	t.Helper()
	objs := objects(nodes, pods)
	for _, e := range events {
		objs = append(objs, e)
	}
	return newEnv(t, s, objs...)
}

// TestIPStarvedEvictsOnlyPodsStarvedPastTheGrace: on a node with no free
// pod IP, only the pod the kubelet has failed for want of one for longer
// than the grace (counted from its first failure, not its creation) is
// evicted; a pod pulling its image, one starved for less than the grace,
// one whose sandbox fails for another reason and one waiting without any
// Event stay.
func TestIPStarvedEvictsOnlyPodsStarvedPastTheGrace(t *testing.T) {
	full, spare := ipNode("full", 13, 13), ipNode("spare", 13, 0)
	starved, starvedEvent := starvedFor("starved", "full", 5*time.Minute)
	// Created hours ago, starved for 30 s only: the grace counts from Since.
	young, youngEvent := starvedFor("young", "full", 30*time.Second)
	pulling := testPod("pulling", "full", pullingImage)
	other := testPod("other", "full", waitingForSandbox)
	otherEvent := sandboxFailure(other, now.Add(-time.Hour), now.Add(-time.Minute), `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to pull image "pause"`)
	silent := testPod("silent", "full", waitingForSandbox)
	running := testPod("running", "full")
	RegisterMetrics()
	before, err := testutil.GetCounterMetricValue(EvictionsTotal.WithLabelValues(EvictionReasonIPStarved))
	if err != nil {
		t.Fatal(err)
	}
	e := starvedEnv(t, setup{args: starvedArgs()}, []*v1.Node{full, spare},
		[]*v1.Pod{starved, young, pulling, other, silent, running}, starvedEvent, youngEvent, otherEvent)
	if got := e.run(t, full, spare); !equal(got, []string{"starved"}) {
		t.Fatalf("evicted %v, want [starved]", got)
	}
	// The estimate counts the node's waiting pods, bound before the
	// sample's time but not in the IPAM's state yet.
	want := regexp.MustCompile(`RelieveNodePressure: node full has no free pod IP \([0-9]+/13 used\), pod starved of one for 5m0s \(host-local\)$`)
	if got := e.reasons["starved"]; !want.MatchString(got) {
		t.Errorf("reason %q, want one matching %s", got, want)
	}
	if events := e.warningEvents(); len(events) != 1 || !strings.HasPrefix(events[0], "Normal "+ReasonStarvedOfPodIP+" ") {
		t.Errorf("Events %q, want one %s", events, ReasonStarvedOfPodIP)
	}
	after, err := testutil.GetCounterMetricValue(EvictionsTotal.WithLabelValues(EvictionReasonIPStarved))
	if err != nil {
		t.Fatal(err)
	}
	if after-before != 1 {
		t.Errorf("headroom_relieve_node_pressure_evictions_total{reason=%q} grew by %v, want 1", EvictionReasonIPStarved, after-before)
	}
}

// TestIPStarvedNeedsAFreePodIPElsewhere: nothing is evicted when no other
// node has a free pod IP by NodeIPs' figure, nor onto a cordoned node; and
// each replacement counts against its destination within the run: one
// free pod IP takes one pod, the longest starved.
func TestIPStarvedNeedsAFreePodIPElsewhere(t *testing.T) {
	a, aEvent := starvedFor("a", "full", 10*time.Minute, ownedBy("rs-a"))
	b, bEvent := starvedFor("b", "full", 5*time.Minute, ownedBy("rs-b"), func(p *v1.Pod) {
		p.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpExists}}
	})
	pods := []*v1.Pod{a, b}
	cordoned := ipNode("cordoned", 13, 0)
	cordoned.Spec.Unschedulable = true
	for _, tc := range []struct {
		name  string
		other *v1.Node
		want  []string
	}{
		{"other node full", ipNode("other", 13, 13), nil},
		{"other node cordoned", cordoned, nil},
		{"one free pod IP elsewhere", ipNode("other", 13, 12), []string{"a"}},
		{"two free pod IPs elsewhere", ipNode("other", 13, 11), []string{"a", "b"}},
		// Each starved pod is a cause of its own: one that cannot move
		// does not keep the next from moving, as the kubelet's victim
		// does for the PID and memory triggers.
		{"free pod IPs only behind a taint b tolerates", tainted(ipNode("other", 13, 0), "dedicated"), []string{"b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full := ipNode("full", 13, 13)
			e := starvedEnv(t, setup{args: starvedArgs()}, []*v1.Node{full, tc.other}, pods, aEvent, bEvent)
			if got := e.run(t, full, tc.other); !equal(got, tc.want) {
				t.Errorf("evicted %v, want %v", got, tc.want)
			}
		})
	}
}

// TestIPStarvedLeavesNodesWithFreeOrUnknownPodIPsAlone: a pod starved by
// its Events is not evicted from a node that has a free pod IP by the
// estimate, or whose figure is unknown (no annotations, or a stale sample).
func TestIPStarvedLeavesNodesWithFreeOrUnknownPodIPsAlone(t *testing.T) {
	stale := ipNode("node", 13, 13)
	stale.Annotations["headroom.dev/ip-sampled-at"] = now.Add(-time.Hour).Format(time.RFC3339)
	for _, tc := range []struct {
		name string
		node *v1.Node
	}{
		{"free pod IP", ipNode("node", 13, 11)},
		{"no annotations", spareNode("node")},
		{"stale sample", stale},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod, event := starvedFor("starved", "node", 10*time.Minute)
			spare := ipNode("spare", 13, 0)
			e := starvedEnv(t, setup{args: starvedArgs()}, []*v1.Node{tc.node, spare}, []*v1.Pod{pod}, event)
			if got := e.run(t, tc.node, spare); len(got) != 0 {
				t.Errorf("evicted %v, want none", got)
			}
		})
	}
}

// TestIPStarvedOrder: across workloads the longest starved goes first;
// within a workload its own delete order decides which of its pods takes
// its turn (here delete-priority), as the ReplicaSet controller would.
func TestIPStarvedOrder(t *testing.T) {
	old, oldEvent := starvedFor("old", "full", 20*time.Minute, ownedBy("rs-x"))
	mid, midEvent := starvedFor("mid", "full", 10*time.Minute, ownedBy("rs-y"))
	// rs-x's second pod, starved for less time but first in its
	// workload's delete order: it takes rs-x's first turn.
	first, firstEvent := starvedFor("first", "full", 3*time.Minute, ownedBy("rs-x"), priority("10"))
	full, spare := ipNode("full", 13, 13), ipNode("spare", 13, 0)
	e := starvedEnv(t, setup{args: starvedArgs()}, []*v1.Node{full, spare}, []*v1.Pod{old, mid, first}, oldEvent, midEvent, firstEvent)
	if got, want := e.run(t, full, spare), []string{"first", "mid", "old"}; !equal(got, want) {
		t.Errorf("evicted %v, want %v", got, want)
	}
}

// TestIPStarvedEventBudget: at most maxEventsPerNode Events are listed per
// node and run; the pods past it are left for a later run.
func TestIPStarvedEventBudget(t *testing.T) {
	a, aEvent := starvedFor("a", "full", 10*time.Minute)
	b, bEvent := starvedFor("b", "full", 10*time.Minute)
	full, spare := ipNode("full", 13, 13), ipNode("spare", 13, 0)
	args := starvedArgs()
	args.IPStarved.MaxEventsPerNode = ptr.To[int64](1)
	e := starvedEnv(t, setup{args: args}, []*v1.Node{full, spare}, []*v1.Pod{a, b}, aEvent, bEvent)
	// The fake client ignores field selectors and limits: each List
	// returns both Events, and the first spends the budget.
	var lists int
	e.client.PrependReactor("list", "events", func(a clientgotesting.Action) (bool, runtime.Object, error) {
		lists++
		return false, nil, nil
	})
	if got := e.run(t, full, spare); len(got) != 1 {
		t.Errorf("evicted %v, want one pod", got)
	}
	if lists != 1 {
		t.Errorf("listed Events %d times, want 1", lists)
	}
}

// TestIPStarvedPlan: Plan shows the trigger's evictions with their reason
// and the waiting pods it passes over, as kubectl headroom evictions
// prints them, and evicts nothing.
func TestIPStarvedPlan(t *testing.T) {
	starved, event := starvedFor("starved", "full", 5*time.Minute)
	pulling := testPod("pulling", "full", pullingImage)
	young, youngEvent := starvedFor("young", "full", 30*time.Second)
	full, spare := ipNode("full", 13, 13), ipNode("spare", 13, 0)
	e := starvedEnv(t, setup{args: starvedArgs()}, []*v1.Node{full, spare}, []*v1.Pod{starved, pulling, young}, event, youngEvent)
	p, err := e.plugin.Plan(context.Background(), []*v1.Node{full, spare}, full)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.StarvedOfPodIP) != 2 {
		t.Fatalf("plan %+v: want the starved and the young pod", p.StarvedOfPodIP)
	}
	if s := p.StarvedOfPodIP[0]; s.Pod.Name != "starved" || !s.Evict || !strings.Contains(s.Reason, "has no free pod IP") {
		t.Errorf("first decision %s %v %q: want starved evicted for its pod IP", s.Pod.Name, s.Evict, s.Reason)
	}
	if s := p.StarvedOfPodIP[1]; s.Pod.Name != "young" || s.Evict || !strings.Contains(s.Reason, "within ipStarved.grace 2m0s") {
		t.Errorf("second decision %s %v %q: want young kept within the grace", s.Pod.Name, s.Evict, s.Reason)
	}
	if len(e.evicted) != 0 {
		t.Errorf("Plan evicted %v", e.evicted)
	}
}

// TestIPStarvedArgs: the trigger is off unless given, and its fields are
// defaulted and validated, each error naming its field.
func TestIPStarvedArgs(t *testing.T) {
	var omitted RelieveNodePressureArgs
	SetDefaults_RelieveNodePressureArgs(&omitted)
	if omitted.IPStarved != nil || omitted.PIDs == nil {
		t.Errorf("args without triggers: ipStarved %v, pids %v; want off and on", omitted.IPStarved, omitted.PIDs)
	}
	given := starvedArgs()
	SetDefaults_RelieveNodePressureArgs(&given)
	if g := given.IPStarved; g.Grace.Duration != DefaultIPStarvedGrace || *g.MaxEventsPerNode != DefaultMaxEventsPerNode ||
		g.MaxSampleAge.Duration != DefaultMaxSampleAge || given.PIDs != nil {
		t.Errorf("defaults: %+v, pids %v", g, given.PIDs)
	}
	for _, tc := range []struct {
		trigger IPStarvedTrigger
		field   string
	}{
		{IPStarvedTrigger{Grace: &metav1.Duration{Duration: time.Second}}, "ipStarved.grace"},
		{IPStarvedTrigger{Grace: &metav1.Duration{Duration: 48 * time.Hour}}, "ipStarved.grace"},
		{IPStarvedTrigger{MaxSampleAge: &metav1.Duration{Duration: -time.Second}}, "ipStarved.maxSampleAge"},
		{IPStarvedTrigger{MaxEventsPerNode: ptr.To[int64](0)}, "ipStarved.maxEventsPerNode"},
		{IPStarvedTrigger{MaxEventsPerNode: ptr.To[int64](1001)}, "ipStarved.maxEventsPerNode"},
	} {
		err := ValidateRelieveNodePressureArgs(&RelieveNodePressureArgs{IPStarved: &tc.trigger})
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v: error %v, want one naming %s", tc.trigger, err, tc.field)
		}
	}
}
