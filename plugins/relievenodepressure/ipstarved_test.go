package relievenodepressure

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientgotesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/api"
	"sigs.k8s.io/descheduler/pkg/descheduler/evictions"
	"sigs.k8s.io/descheduler/test"

	"github.com/headroom-k8s/headroom/pkg/ipstarved"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
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

// TestIPStarvedEventBudget: at most maxEventsPerNode Events are read per
// node and run, shared between the namespaces in turn, and pods the plugin
// would never evict spend none of it: a namespace with many waiting pods,
// or one excluded, does not keep another's starved pod from its look.
func TestIPStarvedEventBudget(t *testing.T) {
	full, spare := ipNode("full", 13, 13), ipNode("spare", 13, 0)
	var (
		pods   []*v1.Pod
		events []*v1.Event
	)
	add := func(name string, opts ...podOption) {
		pod, event := starvedFor(name, "full", 10*time.Minute, append(opts, ownedBy("rs-"+name))...)
		pods, events = append(pods, pod), append(events, event)
	}
	for _, name := range []string{"a1", "a2", "a3", "a4"} {
		add(name, inNamespace("a-busy"))
	}
	add("q", inNamespace("z-quiet"))
	for _, tc := range []struct {
		name   string
		budget int64
		extra  func()
		args   func(*RelieveNodePressureArgs)
		want   []string
	}{
		// Each of a-busy's Events would have spent the budget before
		// z-quiet's pod had a look, in namespace and name order.
		{name: "namespaces take turns", budget: 2, want: []string{"a1", "q"}},
		{name: "an excluded namespace spends nothing", budget: 1,
			args: func(a *RelieveNodePressureArgs) { a.Namespaces = &api.Namespaces{Exclude: []string{"a-busy"}} }, want: []string{"q"}},
		// Pods placed by another scheduler are never evicted: looking at
		// their Events would be waste.
		{name: "a pod never evicted spends nothing", budget: 1, extra: func() {
			add("0-other", inNamespace("z-quiet"), func(p *v1.Pod) { p.Spec.SchedulerName = "default-scheduler" })
		}, args: func(a *RelieveNodePressureArgs) { a.Namespaces = &api.Namespaces{Exclude: []string{"a-busy"}} }, want: []string{"q"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(pods)
			if tc.extra != nil {
				tc.extra()
			}
			args := starvedArgs()
			args.IPStarved.MaxEventsPerNode = ptr.To(tc.budget)
			if tc.args != nil {
				tc.args(&args)
			}
			e := starvedEnv(t, setup{args: args, evictions: evictions.NewOptions().WithMaxPodsToEvictPerNamespace(ptr.To[uint](10))},
				[]*v1.Node{full, spare}, pods, events...)
			pods, events = pods[:before], events[:before]
			got := e.run(t, full, spare)
			slices.Sort(got)
			if !equal(got, tc.want) {
				t.Errorf("evicted %v, want %v", got, tc.want)
			}
		})
	}
}

// TestIPStarvedEventBudgetRotates: where the budget runs out before every
// namespace has had a look, the namespace that goes first changes from run
// to run, so that none is always the one left out.
func TestIPStarvedEventBudgetRotates(t *testing.T) {
	full, spare := ipNode("full", 13, 13), ipNode("spare", 13, 0)
	var (
		pods   []*v1.Pod
		events []*v1.Event
	)
	for _, ns := range []string{"a", "b", "c"} {
		pod, event := starvedFor("p-"+ns, "full", 10*time.Minute, inNamespace(ns), ownedBy("rs-"+ns))
		pods, events = append(pods, pod), append(events, event)
	}
	args := starvedArgs()
	args.IPStarved.MaxEventsPerNode = ptr.To[int64](1)
	e := starvedEnv(t, setup{args: args}, []*v1.Node{full, spare}, pods, events...)
	e.plugin.lookTurn = 0
	// The fake API server keeps an evicted pod: each run finds all three
	// waiting, and evicts the one whose Events it read.
	var got []string
	for range 3 {
		got = e.run(t, full, spare)
	}
	if want := []string{"p-a", "p-b", "p-c"}; !equal(got, want) {
		t.Errorf("evicted, run by run, %v, want %v", got, want)
	}
}

// TestIPStarvedTrustsOnlyTheNodesKubelet: a pod starved by its Events is
// evicted only when the Event names its node's kubelet in every reporting
// field; one forged with another reporting instance or component is
// ignored, and one whose firstTimestamp claims a starvation older than the
// pod counts its grace from the API server's stamp. The cache keeps at
// most ipstarved.MaxMessageBytes of a message.
func TestIPStarvedTrustsOnlyTheNodesKubelet(t *testing.T) {
	genuine, genuineEvent := starvedFor("genuine", "full", 10*time.Minute, ownedBy("rs-genuine"))
	genuineEvent.Message += strings.Repeat(" padding", 1<<14)
	var (
		pods   = []*v1.Pod{genuine}
		events = []*v1.Event{genuineEvent}
	)
	for name, forge := range map[string]func(*v1.Event){
		"other-instance":  func(e *v1.Event) { e.ReportingInstance = "spare" },
		"other-component": func(e *v1.Event) { e.ReportingController = "tenant-controller" },
		// Created by the API server a minute ago, though its kubelet
		// times claim a day: within the grace.
		"time-shifted": func(e *v1.Event) {
			e.CreationTimestamp = metav1.NewTime(now.Add(-time.Minute))
			e.FirstTimestamp = metav1.NewTime(now.Add(-24 * time.Hour))
			e.LastTimestamp = metav1.NewTime(now.Add(24 * time.Hour))
		},
	} {
		pod, event := starvedFor(name, "full", 10*time.Minute, ownedBy("rs-"+name))
		forge(event)
		pods, events = append(pods, pod), append(events, event)
	}
	full, spare := ipNode("full", 13, 13), ipNode("spare", 13, 0)
	e := starvedEnv(t, setup{args: starvedArgs()}, []*v1.Node{full, spare}, pods, events...)
	if got := e.run(t, full, spare); !equal(got, []string{"genuine"}) {
		t.Errorf("evicted %v, want [genuine]", got)
	}
	for _, obj := range e.plugin.sandboxFailures.informer.GetStore().List() {
		if ev := obj.(*v1.Event); len(ev.Message) > ipstarved.MaxMessageBytes {
			t.Errorf("the cache holds %d bytes of %s's message, want at most %d", len(ev.Message), ev.Name, ipstarved.MaxMessageBytes)
		}
	}
}

// TestIPStarvedEventRequests: the trigger's look at the Events costs the
// API server one List and one Watch of FailedCreatePodSandBox Events when
// the plugin is built, and no request per run or per waiting pod (it was
// one List per waiting pod and run).
func TestIPStarvedEventRequests(t *testing.T) {
	full, spare := ipNode("full", 13, 13), ipNode("spare", 13, 0)
	var (
		pods   []*v1.Pod
		events []*v1.Event
	)
	for _, name := range []string{"a", "b", "c"} {
		// Within the grace: nothing is evicted, every run looks again.
		pod, event := starvedFor(name, "full", time.Minute)
		pods, events = append(pods, pod), append(events, event)
	}
	e := starvedEnv(t, setup{args: starvedArgs()}, []*v1.Node{full, spare}, pods, events...)
	const runs = 5
	for range runs {
		if got := e.run(t, full, spare); len(got) != 0 {
			t.Fatalf("evicted %v within the grace", got)
		}
	}
	requests := map[string]int{}
	for _, a := range e.client.Actions() {
		if a.GetResource().Resource == "events" && (a.GetVerb() == "list" || a.GetVerb() == "watch") {
			requests[a.GetVerb()]++
			if r, ok := a.(clientgotesting.ListAction); ok {
				if sel := r.GetListRestrictions().Fields.String(); sel != SandboxFailuresSelector {
					t.Errorf("%s of events with field selector %q, want %q", a.GetVerb(), sel, SandboxFailuresSelector)
				}
			}
		}
	}
	t.Logf("Event requests over %d runs with %d waiting pods: %v", runs, len(pods), requests)
	if requests["list"] != 1 || requests["watch"] != 1 {
		t.Errorf("Event requests over %d runs with %d waiting pods: %v, want one list and one watch", runs, len(pods), requests)
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

// liveIPs is a pod-IP source of fixed figures by node, as the Calico
// source tells them: nothing on the Node objects.
type liveIPs map[string][2]int64

func (l liveIPs) Read(node *v1.Node, now time.Time, _ time.Duration) (ipstats.NodeStats, error) {
	f, ok := l[node.Name]
	if !ok {
		return ipstats.NodeStats{}, &ipstats.UnknownError{Reason: errors.New("no figures")}
	}
	return ipstats.NewNodeStats(f[0], f[1], now), nil
}

// TestIPStarvedReadsTheIPSource: with the pod-IP figures of another source
// than the annotations (ipSource CalicoIPAM's), ipStarved and the room for
// the replacement read them: the starved pod on the full node is evicted
// towards the node with room, though neither Node carries an annotation;
// with the annotations' source both nodes are unknown and nothing moves.
func TestIPStarvedReadsTheIPSource(t *testing.T) {
	plain := func(name string) *v1.Node { return test.BuildTestNode(name, 64000, 64<<30, 110, nil) }
	starved, starvedEvent := starvedFor("starved", "full", 5*time.Minute)
	for _, tc := range []struct {
		name string
		ips  ipstats.Source
		want []string
	}{
		{"the source's figures", liveIPs{"full": {13, 13}, "spare": {13, 0}}, []string{"starved"}},
		{"the source says the other node is full too", liveIPs{"full": {13, 13}, "spare": {13, 13}}, nil},
		{"the annotations (none)", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			full, spare := plain("full"), plain("spare")
			e := starvedEnv(t, setup{args: starvedArgs(), ips: tc.ips}, []*v1.Node{full, spare}, []*v1.Pod{starved}, starvedEvent)
			if got := e.run(t, full, spare); !equal(got, tc.want) {
				t.Errorf("evicted %v, want %v", got, tc.want)
			}
		})
	}
}
