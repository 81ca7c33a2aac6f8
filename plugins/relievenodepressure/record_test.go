package relievenodepressure

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clientgotesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// The next runs before a new sample never evict again for the pressure a
// run relieved, with the pods it evicted terminating or gone, whether the
// sample lists them (the estimate subtracts what they held) or not (the
// plugin's record makes the PID trigger wait for a newer sample). A
// bystander pod that the figures would otherwise take is what such a run
// would evict.
func TestNeverTwiceForTheSamePressure(t *testing.T) {
	hog := testPod("hog", "n1", ownedBy("hog"), restarts(5))
	other := testPod("other", "n1", ownedBy("other"), restarts(9))
	bystander := testPod("bystander", "n1", ownedBy("bystander"), pids(400))
	for _, listing := range []string{"listed", "unlisted"} {
		t.Run(listing, func(t *testing.T) {
			n1 := pidNode("n1", 10000, 9700)
			if listing == "listed" {
				n1 = listed(n1, map[*v1.Pod]int64{hog: 600, other: 500, bystander: 400})
			} else {
				// Without a list the gains are the declared PIDs.
				hog, other = withOpts(hog, pids(600)), withOpts(other, pids(500))
			}
			nodes := []*v1.Node{n1, spareNode("n2")}
			e := newEnv(t, setup{}, objects(nodes, []*v1.Pod{hog, other, bystander})...)
			// The kubelet's PID ranking, the most PIDs first: hog frees 600,
			// 9100 > 9000; other 500 more.
			if got, want := e.run(t, nodes...), []string{"hog", "other"}; !equal(got, want) {
				t.Fatalf("first run evicted %v, want %v", got, want)
			}
			state := e.stateOf(t)
			for name, left := range map[string][]*v1.Pod{
				"terminating": {withOpts(hog, terminatingPod), withOpts(other, terminatingPod), bystander},
				"gone":        {bystander},
			} {
				e := newEnv(t, setup{}, append(objects(nodes, left), state...)...)
				if got := e.run(t, nodes...); len(got) != 0 {
					t.Fatalf("%s: the next run, before a new sample, evicted %v", name, got)
				}
				if listing == "unlisted" && name == "gone" {
					// The record is what held it back: without it, the same
					// sample and pods make the run evict the bystander.
					fresh := newEnv(t, setup{}, objects(nodes, left)...)
					if got := fresh.run(t, nodes...); len(got) == 0 {
						t.Fatal("without the record the run evicts nothing either: this case tests nothing")
					}
					// A sample newer than the relief that still shows the
					// pressure is new pressure: a run a minute later relieves it.
					newer := []*v1.Node{sampledAt(n1, 9700, now.Add(30*time.Second)), nodes[1]}
					e := newEnv(t, setup{}, append(objects(newer, left), e.stateOf(t)...)...)
					e.plugin.now = func() time.Time { return now.Add(time.Minute) }
					if got, want := e.run(t, newer...), []string{"bystander"}; !equal(got, want) {
						t.Fatalf("after a newer sample evicted %v, want %v", got, want)
					}
				}
			}
		})
	}
}

// A node is relieved only once pressureSamples consecutive samples show a
// trigger above its threshold: a sample already seen does not count again,
// and one within the thresholds starts the count afresh.
func TestPressureMustLast(t *testing.T) {
	pods := []*v1.Pod{testPod("a", "n1", pids(1000))}
	args := RelieveNodePressureArgs{PressureSamples: ptr.To[int32](2)}
	var state []runtime.Object
	run := func(used int64, age time.Duration) []string {
		nodes := []*v1.Node{sampledAt(pidNode("n1", 10000, 0), used, now.Add(-age)), spareNode("n2")}
		e := newEnv(t, setup{args: args}, append(objects(nodes, pods), state...)...)
		got := e.run(t, nodes...)
		state = e.stateOf(t)
		return got
	}
	steps := []struct {
		used int64
		age  time.Duration
		want int
	}{
		{9700, 4 * time.Minute, 0}, // first sample above: 1 of 2
		{9700, 4 * time.Minute, 0}, // the same sample again: still 1 of 2
		{8000, 3 * time.Minute, 0}, // within: the count starts afresh
		{9700, 2 * time.Minute, 0}, // 1 of 2
		{9700, 1 * time.Minute, 1}, // 2 of 2: relieved
	}
	for i, s := range steps {
		if got := run(s.used, s.age); len(got) != s.want {
			t.Fatalf("run %d (sample at -%v, %d used): evicted %v, want %d", i+1, s.age, s.used, got, s.want)
		}
	}
	// What the next run would do is what Plan shows, with the count.
	nodes := []*v1.Node{sampledAt(pidNode("n1", 10000, 0), 9700, now.Add(-30*time.Second)), spareNode("n2")}
	e := newEnv(t, setup{args: args}, objects(nodes, pods)...)
	p, err := e.plugin.Plan(context.Background(), nodes, nodes[0])
	if err != nil {
		t.Fatal(err)
	}
	// While it waits, Plan shows the plan that runs if the pressure lasts.
	evicts := 0
	for _, pp := range p.Pods {
		if pp.Evict {
			evicts++
		}
	}
	if p.Waiting != "1 of 2 consecutive samples" || !p.Relieves || evicts == 0 {
		t.Fatalf("Plan: waiting %q, relieves %v with %d evictions, want 1 of 2 consecutive samples and the plan that relieves the node", p.Waiting, p.Relieves, evicts)
	}
}

// The record is bounded: a node's record goes an hour after it last
// changed (twice maxSampleAge where that is longer); a relief is kept
// where samples never go stale; beyond maxStateRecords the oldest go.
func TestRecordIsBounded(t *testing.T) {
	client := fake.NewClientset()
	store := &stateStore{client: client, namespace: "headroom-system", name: "state"}
	at := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	fill := func() *state {
		st := &state{records: map[string]nodeRecord{
			"fresh":        {Seen: []time.Time{now.Add(-time.Minute)}},
			"old":          {Seen: []time.Time{now.Add(-2 * time.Hour)}},
			"old-relief":   {Relieved: at(2 * time.Hour)},
			"fresh-relief": {Relieved: at(time.Minute)},
		}, changed: true}
		return st
	}
	for _, tc := range []struct {
		horizon time.Duration
		want    []string
	}{
		{stateHorizon, []string{"fresh", "fresh-relief"}},
		{3 * time.Hour, []string{"fresh", "fresh-relief", "old", "old-relief"}},
		{0, []string{"fresh", "fresh-relief", "old-relief"}},
	} {
		st := fill()
		if err := store.save(context.Background(), st, now, tc.horizon); err != nil {
			t.Fatal(err)
		}
		got, err := store.load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for node := range got.records {
			names = append(names, node)
		}
		slices.Sort(names)
		if !slices.Equal(names, tc.want) {
			t.Errorf("horizon %v: kept %v, want %v", tc.horizon, names, tc.want)
		}
		_ = client.CoreV1().ConfigMaps("headroom-system").Delete(context.Background(), "state", metav1.DeleteOptions{})
		store.saved = nil
	}
	st := &state{records: map[string]nodeRecord{}, changed: true}
	for i := range maxStateRecords + 10 {
		st.records[fmt.Sprintf("n%05d", i)] = nodeRecord{Seen: []time.Time{now.Add(-time.Duration(i) * time.Millisecond)}}
	}
	if err := store.save(context.Background(), st, now, stateHorizon); err != nil {
		t.Fatal(err)
	}
	cm, err := client.CoreV1().ConfigMaps("headroom-system").Get(context.Background(), "state", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cm.Data) != maxStateRecords || cm.Data["n00000"] == "" || cm.Data[fmt.Sprintf("n%05d", maxStateRecords+9)] != "" {
		t.Errorf("kept %d records, want the newest %d", len(cm.Data), maxStateRecords)
	}
	if size := cm.Size(); size > 1<<20 {
		t.Errorf("ConfigMap of %d bytes: above the API's 1 MiB", size)
	}
}

// stateOf returns the plugin's state ConfigMap as the run left it, for the
// next run, a new process as the CronJob's are; nil when there is none.
func (e *env) stateOf(t *testing.T) []runtime.Object {
	t.Helper()
	ns, name, _ := parseStateConfigMap(DefaultStateConfigMap)
	cm, err := e.client.CoreV1().ConfigMaps(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	cm.ResourceVersion = ""
	return []runtime.Object{cm}
}

// sampledAt is node with its PID sample taken at the given time.
func sampledAt(node *v1.Node, used int64, at time.Time) *v1.Node {
	n := node.DeepCopy()
	s, err := pidstats.ParseNode(n.Annotations, now, 0)
	if err != nil && s.Capacity == 0 {
		s = pidstats.NodeStats{Capacity: 10000}
	}
	for k, v := range (pidstats.NodeStats{Capacity: s.Capacity, Used: used, SampledAt: at}).Annotations() {
		n.Annotations[k] = v
	}
	return n
}

// The relief record is written after each eviction, not only at the end of
// the run: a run that dies between two evictions (here: the state the
// ConfigMap holds when the second eviction is requested) leaves a record of
// the first, and the next run, before a new sample, evicts nothing more for
// the pressure it relieved. The pods are unlisted, so only the record holds
// that run back.
func TestReliefRecordSurvivesARunThatEndsMidway(t *testing.T) {
	hog := testPod("hog", "n1", ownedBy("hog"), restarts(9), pids(600))
	other := testPod("other", "n1", ownedBy("other"), restarts(5), pids(500))
	bystander := testPod("bystander", "n1", ownedBy("bystander"), pids(400))
	nodes := []*v1.Node{pidNode("n1", 10000, 9700), spareNode("n2")}
	e := newEnv(t, setup{}, objects(nodes, []*v1.Pod{hog, other, bystander})...)

	var (
		mu      sync.Mutex
		crashed []runtime.Object // the ConfigMap as a process killed at the second eviction leaves it
		seen    int
	)
	ns, name, _ := parseStateConfigMap(DefaultStateConfigMap)
	e.client.PrependReactor("create", "pods", func(action clientgotesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if seen++; seen == 2 {
			if cm, err := e.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("configmaps"), ns, name); err == nil {
				cm := cm.(*v1.ConfigMap).DeepCopy()
				cm.ResourceVersion = ""
				crashed = []runtime.Object{cm}
			}
		}
		return false, nil, nil
	})
	// hog (most restarts) frees 600: 9100 > 9000; other 500 more.
	if got, want := e.run(t, nodes...), []string{"hog", "other"}; !equal(got, want) {
		t.Fatalf("first run evicted %v, want %v", got, want)
	}
	if crashed == nil {
		t.Fatal("no relief record was written before the second eviction: a run killed there forgets the first")
	}
	// The hog is gone; other and bystander are still there, as the killed
	// run left them. The sample, unchanged, still counts the hog.
	next := newEnv(t, setup{}, append(objects(nodes, []*v1.Pod{other, bystander}), crashed...)...)
	if got := next.run(t, nodes...); len(got) != 0 {
		t.Fatalf("the run after one killed midway evicted %v again before a new sample", got)
	}
}

// The wait for a sample newer than a relief compares the samples' own
// times (the node agent's clock), never the descheduler's clock: on a node
// whose clock is five minutes behind, a sample taken after the relief is
// stamped before it, and would otherwise hold the trigger back until the
// samples go stale.
func TestNewerSampleJudgedByTheNodesClock(t *testing.T) {
	skew := -5 * time.Minute
	hog := testPod("hog", "n1", ownedBy("hog"), restarts(5), pids(800))
	bystander := testPod("bystander", "n1", ownedBy("bystander"), pids(400))
	nodes := []*v1.Node{sampledAt(pidNode("n1", 10000, 9700), 9700, now.Add(skew-time.Minute)), spareNode("n2")}
	e := newEnv(t, setup{}, objects(nodes, []*v1.Pod{hog, bystander})...)
	if got, want := e.run(t, nodes...), []string{"hog"}; !equal(got, want) {
		t.Fatalf("first run evicted %v, want %v", got, want)
	}
	state := e.stateOf(t)
	left := []*v1.Pod{bystander}

	// The same sample: the record holds the trigger back.
	e = newEnv(t, setup{}, append(objects(nodes, left), state...)...)
	e.plugin.now = func() time.Time { return now.Add(time.Minute) }
	if got := e.run(t, nodes...); len(got) != 0 {
		t.Fatalf("before a new sample evicted %v", got)
	}
	// That run saw the hog gone: a sample stamped after the one it saw
	// then no longer counts the hog's processes.
	state = e.stateOf(t)
	// A sample taken 30 s after the relief, stamped by the node's clock.
	newer := []*v1.Node{sampledAt(nodes[0], 9700, now.Add(skew+30*time.Second)), nodes[1]}
	e = newEnv(t, setup{}, append(objects(newer, left), state...)...)
	e.plugin.now = func() time.Time { return now.Add(time.Minute) }
	if got, want := e.run(t, newer...), []string{"bystander"}; !equal(got, want) {
		t.Fatalf("after a newer sample (node clock %s) evicted %v, want %v", skew, got, want)
	}
}

// A run that ends midway leaves its plan to the next run: where the sample
// lists the evicted pods, the next run, on the same sample, plans from it
// less what they held and evicts the rest of the plan, without waiting for
// the pressure to last pressureSamples samples again (the record keeps the
// samples seen until the run is done with the node).
func TestTheNextRunFinishesAPlanCutShort(t *testing.T) {
	var pods []*v1.Pod
	usage := map[*v1.Pod]int64{}
	for i, name := range []string{"w1", "w2", "w3", "w4", "w5"} {
		p := testPod(name, "n1", restarts(int32(9-i)))
		pods, usage[p] = append(pods, p), 200
	}
	args := RelieveNodePressureArgs{PressureSamples: ptr.To[int32](2)}
	node := func(age time.Duration) []*v1.Node {
		return []*v1.Node{listed(sampledAt(pidNode("n1", 10000, 9990), 9990, now.Add(-age)), usage), spareNode("n2")}
	}
	// Two samples above the threshold: the second run relieves, and is cut
	// short at its second eviction.
	e := newEnv(t, setup{args: args}, objects(node(2*time.Minute), pods)...)
	if got := e.run(t, node(2*time.Minute)...); len(got) != 0 {
		t.Fatalf("first sample: evicted %v", got)
	}
	state := e.stateOf(t)
	nodes := node(time.Minute)
	e = newEnv(t, setup{args: args}, append(objects(nodes, pods), state...)...)
	var crashed []runtime.Object // the ConfigMap when w2's eviction is requested
	ns, name, _ := parseStateConfigMap(DefaultStateConfigMap)
	e.client.PrependReactor("create", "pods", func(action clientgotesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() == "eviction" && action.(clientgotesting.CreateAction).GetObject().(metav1.Object).GetName() == "w2" {
			if cm, err := e.client.Tracker().Get(v1.SchemeGroupVersion.WithResource("configmaps"), ns, name); err == nil {
				cm := cm.(*v1.ConfigMap).DeepCopy()
				cm.ResourceVersion = ""
				crashed = []runtime.Object{cm}
			}
		}
		return false, nil, nil
	})
	if got := e.run(t, nodes...); len(got) != 5 {
		t.Fatalf("second sample: evicted %v, want all five", got)
	}
	// The process is killed as w2's eviction is requested: the next run
	// has w1 gone and the record saved after w1.
	next := newEnv(t, setup{args: args}, append(objects(nodes, pods[1:]), crashed...)...)
	if got, want := next.run(t, nodes...), []string{"w2", "w3", "w4", "w5"}; !equal(got, want) {
		t.Fatalf("the next run evicted %v, want the rest of the plan %v", got, want)
	}
}

// Each trigger's part of a node's record survives the others' writes: an
// ipStarved eviction on a node, in the same run as a PID relief whose
// sample did not account for the pod it evicted, leaves the PID trigger
// waiting for a newer sample. The next run, on the same sample, evicts
// nothing more for PIDs; with the record overwritten it evicted the
// bystander, for PIDs the hog held and the sample still counts.
func TestIPStarvedEvictionKeepsThePIDTriggersWait(t *testing.T) {
	hog := testPod("hog", "n1", ownedBy("hog"), pids(800))
	bystander := testPod("bystander", "n1", ownedBy("bystander"), pids(400))
	starved, event := starvedFor("starved", "n1", 5*time.Minute, ownedBy("starved"))
	n1 := pidNode("n1", 10000, 9700)
	for k, v := range ipNode("n1", 13, 13).Annotations {
		n1.Annotations[k] = v
	}
	nodes := []*v1.Node{n1, ipNode("spare", 13, 0)}
	args := RelieveNodePressureArgs{PIDs: &PIDsTrigger{}, IPStarved: &IPStarvedTrigger{}}
	e := starvedEnv(t, setup{args: args}, nodes, []*v1.Pod{hog, bystander, starved}, event)
	if got, want := e.run(t, nodes...), []string{"hog", "starved"}; !equal(got, want) {
		t.Fatalf("first run evicted %v, want %v", got, want)
	}
	state := e.stateOf(t)
	var record nodeRecord
	if err := json.Unmarshal([]byte(state[0].(*v1.ConfigMap).Data["n1"]), &record); err != nil {
		t.Fatal(err)
	}
	if !record.awaits(keyPIDs) {
		t.Fatalf("record %+v: the ipStarved eviction ended the PID trigger's wait for a newer sample", record)
	}
	// The hog and the starved pod are gone; the sample is the same.
	next := newEnv(t, setup{args: args}, append(objects(nodes, []*v1.Pod{bystander}), state...)...)
	if got := next.run(t, nodes...); len(got) != 0 {
		t.Fatalf("the next run, before a new PID sample, evicted %v", got)
	}
}

// A relief waits for a sample that no longer counts the evicted pod's
// processes, not merely a newer one: a sample taken while the hog still
// terminates (its container running) counts its PIDs, and relieving on it
// evicted the bystander for pressure already relieved. The plugin waits
// while the hog runs, records the newest sample stamp once it sees the hog
// gone, and relieves again only on a sample stamped after that one.
func TestReliefWaitsForASampleWithoutTheEvictedPod(t *testing.T) {
	hog := testPod("hog", "n1", ownedBy("hog"), pids(800))
	bystander := testPod("bystander", "n1", ownedBy("bystander"), pids(400))
	n1 := pidNode("n1", 10000, 9700)
	sampled := func(at time.Duration) []*v1.Node {
		return []*v1.Node{sampledAt(n1, 9700, now.Add(at)), spareNode("n2")}
	}
	e := newEnv(t, setup{}, objects(sampled(-time.Minute), []*v1.Pod{hog, bystander})...)
	if got, want := e.run(t, sampled(-time.Minute)...), []string{"hog"}; !equal(got, want) {
		t.Fatalf("first run evicted %v, want %v", got, want)
	}
	step := func(name string, at time.Duration, pods []*v1.Pod, want []string) {
		t.Helper()
		nodes := sampled(at)
		e = newEnv(t, setup{}, append(objects(nodes, pods), e.stateOf(t)...)...)
		e.plugin.now = func() time.Time { return now.Add(at + time.Second) }
		if got := e.run(t, nodes...); !equal(got, want) {
			t.Fatalf("%s: evicted %v, want %v", name, got, want)
		}
	}
	// A second later, a sample taken while the hog terminates: it still
	// counts the hog's processes.
	step("a newer sample while the hog runs", time.Second, []*v1.Pod{withOpts(hog, terminatingPod), bystander}, nil)
	// The hog is gone, the sample the same: it may have been taken before
	// the hog's processes exited.
	step("the hog gone, the same sample", time.Second, []*v1.Pod{bystander}, nil)
	// A sample stamped after the one seen when the hog was gone, still
	// above the threshold: new pressure, relieved.
	step("a sample after the hog was seen gone", 2*time.Second, []*v1.Pod{bystander}, []string{"bystander"})
}
