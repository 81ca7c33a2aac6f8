package relievenodepressure

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

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
