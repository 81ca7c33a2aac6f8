package relievenodepressure

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clientgotesting "k8s.io/client-go/testing"
)

// After each eviction the record of the node is written, and only it: a
// patch of its key, as small with 3,000 other nodes' records in the
// ConfigMap as with none. The run's last write sends only what changed
// too. The other records stay as they were.
func TestEvictionWritesOnlyItsNodesRecord(t *testing.T) {
	nodes, pods := twoEvictionsOnN1()
	before := stateConfigMap(3000)
	e := newEnv(t, setup{}, append(objects(nodes, pods), before.DeepCopy())...)
	if got, want := e.run(t, nodes...), []string{"hog", "other"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	writes, evictionsBefore := configMapWrites(t, e.client.Actions())
	afterEviction := map[int]bool{}
	for i, w := range writes {
		if w.verb != "patch" || !slices.Equal(w.keys, []string{"n1"}) {
			t.Errorf("write %d: %s of %d keys, want a patch of n1's record alone", i, w.verb, len(w.keys))
		}
		// A record is about 150 bytes; the ConfigMap holds 3,000 of them.
		if w.bytes > 1024 {
			t.Errorf("write %d: %d bytes, want one record's worth", i, w.bytes)
		}
		afterEviction[evictionsBefore[i]] = true
	}
	for n := 1; n <= 2; n++ {
		if !afterEviction[n] {
			t.Errorf("no write of the record after eviction %d and before the next (writes after %v evictions)", n, evictionsBefore)
		}
	}
	cm, err := e.client.CoreV1().ConfigMaps(before.Namespace).Get(context.Background(), before.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for node, raw := range before.Data {
		if cm.Data[node] != raw {
			t.Fatalf("record of %s changed: %q, was %q", node, cm.Data[node], raw)
		}
	}
	var r nodeRecord
	if err := json.Unmarshal([]byte(cm.Data["n1"]), &r); err != nil || r.Relieved == nil || !r.Relieved.Equal(now) {
		t.Errorf("record of n1 %q (%v), want relieved at %s", cm.Data["n1"], err, now)
	}
}

// An operator's edit of the ConfigMap during a run (here: between its two
// evictions) is kept: the API server refuses the run's next write, which
// names the version it read (409), and the run reads the ConfigMap again.
// A record the operator added stays, one removed stays removed, and the
// record of the node the run relieves is the run's: its evictions came
// after the edit.
func TestOperatorEditDuringARunIsKept(t *testing.T) {
	nodes, pods := twoEvictionsOnN1()
	before := stateConfigMap(10)
	e := newEnv(t, setup{}, append(objects(nodes, pods), before.DeepCopy())...)
	gvr := v1.SchemeGroupVersion.WithResource("configmaps")
	var (
		mu        sync.Mutex
		evictions int
		edited    bool // the operator edited; the next write names an older version
		refused   int
	)
	e.client.PrependReactor("create", "pods", func(action clientgotesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		if evictions++; evictions != 2 {
			return false, nil, nil
		}
		obj, err := e.client.Tracker().Get(gvr, before.Namespace, before.Name)
		if err != nil {
			t.Errorf("no ConfigMap at the second eviction: %v", err)
			return false, nil, nil
		}
		cm := obj.(*v1.ConfigMap).DeepCopy()
		cm.Data["operator"] = `{"relieved":"2026-05-01T11:59:00Z","accounted":true}`
		cm.Data["n1"] = `{}`
		delete(cm.Data, "other-0001")
		if err := e.client.Tracker().Update(gvr, cm, cm.Namespace); err != nil {
			t.Error(err)
		}
		edited = true
		return false, nil, nil
	})
	conflict := func(action clientgotesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if !edited {
			return false, nil, nil
		}
		edited = false
		refused++
		return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, before.Name, fmt.Errorf("the object has been modified"))
	}
	e.client.PrependReactor("patch", "configmaps", conflict)
	e.client.PrependReactor("update", "configmaps", conflict)

	if got, want := e.run(t, nodes...), []string{"hog", "other"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if refused != 1 {
		t.Fatalf("%d writes refused, want the one after the edit", refused)
	}
	cm, err := e.client.CoreV1().ConfigMaps(before.Namespace).Get(context.Background(), before.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cm.Data["operator"]; !ok {
		t.Error("the record the operator added is lost")
	}
	if _, ok := cm.Data["other-0001"]; ok {
		t.Error("the record the operator removed is back")
	}
	var r nodeRecord
	if err := json.Unmarshal([]byte(cm.Data["n1"]), &r); err != nil || r.Relieved == nil || !r.Relieved.Equal(now) {
		t.Errorf("record of n1 %q (%v), want this run's relief at %s", cm.Data["n1"], err, now)
	}
	for node, raw := range before.Data {
		if node != "other-0001" && cm.Data[node] != raw {
			t.Errorf("record of %s changed: %q, was %q", node, cm.Data[node], raw)
		}
	}
}

// In dry-run mode the descheduler hands the plugin a sandbox client made
// afresh for every cycle, without the ConfigMap: the record is kept in the
// process, and each cycle's first write creates the ConfigMap in its
// sandbox. Here the next cycle, on the same sample, evicts nothing more.
func TestDryRunKeepsTheRecordInTheProcess(t *testing.T) {
	nodes, pods := twoEvictionsOnN1()
	e := newEnv(t, setup{}, objects(nodes, pods)...)
	store := e.plugin.store
	sandbox := fake.NewSimpleClientset() // what the descheduler's sandbox is
	store.client = sandbox
	if got, want := e.run(t, nodes...), []string{"hog", "other"}; !equal(got, want) {
		t.Fatalf("first cycle evicted %v, want %v", got, want)
	}
	writes, _ := configMapWrites(t, sandbox.Actions())
	if len(writes) < 2 || writes[0].verb != "create" || writes[1].verb != "patch" {
		t.Errorf("first cycle's writes %+v, want the ConfigMap created at the first eviction, then patched", writes)
	}
	// The next cycle: a new sandbox, the evicted pods gone from it.
	next := newEnv(t, setup{}, objects(nodes, pods[2:])...)
	next.plugin.store, store.client = store, fake.NewSimpleClientset()
	if got := next.run(t, nodes...); len(got) != 0 {
		t.Fatalf("the next cycle evicted %v before a new sample", got)
	}
}

// stateConfigMap is the state ConfigMap holding n records of other nodes,
// each as large as a relief's record, relieved within the hour.
func stateConfigMap(n int) *v1.ConfigMap {
	ns, name, _ := parseStateConfigMap(DefaultStateConfigMap)
	cm := &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{}}
	relieved := now.Add(-10 * time.Minute)
	for i := range n {
		raw, _ := json.Marshal(nodeRecord{Relieved: &relieved, Awaiting: []string{keyMemory},
			SampledAt: map[string]time.Time{keyPIDs: relieved.Add(-time.Minute), keyMemory: relieved.Add(-time.Minute)}})
		cm.Data[fmt.Sprintf("other-%04d", i)] = string(raw)
	}
	return cm
}

// configMapWrite is a write of the state ConfigMap: its verb, and for a
// patch, the keys of data it sets or removes and its size.
type configMapWrite struct {
	verb  string
	keys  []string
	bytes int
}

// configMapWrites returns the writes of the state ConfigMap among actions,
// each after the evictions requested before it (evictionsBefore).
func configMapWrites(t *testing.T, actions []clientgotesting.Action) (writes []configMapWrite, evictionsBefore []int) {
	t.Helper()
	evictions := 0
	for _, a := range actions {
		switch {
		case a.GetVerb() == "create" && a.GetResource().Resource == "pods" && a.GetSubresource() == "eviction":
			evictions++
		case a.GetResource().Resource == "configmaps" && a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch":
			w := configMapWrite{verb: a.GetVerb()}
			if p, ok := a.(clientgotesting.PatchAction); ok {
				var patch struct {
					Data map[string]*string `json:"data"`
				}
				if err := json.Unmarshal(p.GetPatch(), &patch); err != nil {
					t.Fatalf("patch %s: %v", p.GetPatch(), err)
				}
				w.keys, w.bytes = slices.Sorted(maps.Keys(patch.Data)), len(p.GetPatch())
			}
			if u, ok := a.(clientgotesting.UpdateAction); ok {
				cm := u.GetObject().(*v1.ConfigMap)
				raw, _ := json.Marshal(cm)
				w.keys, w.bytes = slices.Sorted(maps.Keys(cm.Data)), len(raw)
			}
			writes, evictionsBefore = append(writes, w), append(evictionsBefore, evictions)
		}
	}
	return writes, evictionsBefore
}

// twoEvictionsOnN1 is node n1 at 9,700 of 10,000 PIDs, whose relief evicts
// "hog" then "other" (the bystander stays), and n2 with room for them.
func twoEvictionsOnN1() ([]*v1.Node, []*v1.Pod) {
	return []*v1.Node{pidNode("n1", 10000, 9700), spareNode("n2")}, []*v1.Pod{
		testPod("hog", "n1", ownedBy("hog"), restarts(9), pids(600)),
		testPod("other", "n1", ownedBy("other"), restarts(5), pids(500)),
		testPod("bystander", "n1", ownedBy("bystander"), pids(400)),
	}
}
