package relievenodepressure

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// No value of one workload's delete-priority or pod-deletion-cost changes
// which pods of another workload are evicted: for random nodes with pods of
// several owners, the plan's evictions outside owner "a" are the same
// whatever "a"'s pods carry, extremes included.
func TestNoWorkloadSteersEvictionsOntoAnother(t *testing.T) {
	values := []string{"", "0", "-2147483648", "2147483647", "5", "-7", "not a number"}
	changed := 0
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 7))
		type spec struct {
			name, owner    string
			restarts       int32
			ready          time.Duration
			used           int64
			priority, cost string
		}
		var specs []spec
		for _, owner := range []string{"a", "b", "c", ""} {
			for i := range 1 + r.IntN(4) {
				if owner == "" && i > 0 {
					break
				}
				specs = append(specs, spec{
					name: fmt.Sprintf("%s%d", cmpOr(owner, "bare"), i), owner: owner,
					restarts: int32(r.IntN(4)), ready: time.Duration(1+r.IntN(600)) * time.Minute,
					used: int64(50 + r.IntN(1500)), priority: values[r.IntN(len(values))], cost: values[r.IntN(len(values))],
				})
			}
		}
		evictedOutsideA := func(variant func(s spec) (priority, cost string)) ([]string, []string) {
			var pods []*v1.Pod
			usage := map[*v1.Pod]int64{}
			for _, s := range specs {
				opts := []podOption{restarts(s.restarts), readyFor(s.ready), func(p *v1.Pod) { p.UID = types.UID(uidOf(s.name)) }}
				if s.owner == "" {
					opts = append(opts, noOwner)
				} else {
					opts = append(opts, ownedBy(s.owner))
				}
				priorityValue, costValue := s.priority, s.cost
				if s.owner == "a" {
					priorityValue, costValue = variant(s)
				}
				if priorityValue != "" {
					opts = append(opts, priority(priorityValue))
				}
				if costValue != "" {
					opts = append(opts, deletionCost(costValue))
				}
				p := testPod(s.name, "n1", opts...)
				pods = append(pods, p)
				usage[p] = s.used
			}
			n1 := listed(pidNode("n1", 10000, 9700), usage)
			nodes := []*v1.Node{n1, spareNode("n2")}
			e := newEnv(t, setup{}, objects(nodes, pods)...)
			_, evict, _ := planned(t, e, nodes, n1)
			var outside []string
			for _, name := range evict {
				if !strings.HasPrefix(name, "a") {
					outside = append(outside, name)
				}
			}
			slices.Sort(outside)
			return outside, evict
		}
		base, baseAll := evictedOutsideA(func(spec) (string, string) { return "", "" })
		for k := range 4 {
			vr := rand.New(rand.NewPCG(seed, uint64(100+k)))
			got, all := evictedOutsideA(func(spec) (string, string) {
				return values[vr.IntN(len(values))], values[vr.IntN(len(values))]
			})
			if !slices.Equal(got, base) {
				t.Fatalf("seed %d: with other annotations on a's pods, the plan evicts %v outside a (all: %v); without them %v (all: %v)",
					seed, got, all, base, baseAll)
			}
			if !slices.Equal(all, baseAll) {
				changed++
			}
		}
	}
	// The property is not vacuous: a's annotations do change which of its
	// own pods go in some of the cases.
	if changed == 0 {
		t.Fatal("a's annotations never changed the plan: the test exercises nothing")
	}
	t.Logf("a's annotations changed which of its pods go in %d of 240 variants", changed)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// uidOf is a stable canonical UUID per name, as pid-pods lists require.
func uidOf(name string) string {
	var h uint64 = 1469598103934665603
	for _, c := range []byte(name) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", uint32(h>>32), h&0xffffffffffff)
}

// The same over several nodes relieved in one cycle, whose replacements
// share the room of one destination (a ledger across nodes), with pods of a
// workload on every node, a pod of another namespace claiming workload a's
// owner UID, and nodes without a per-pod list, where gains and room needs
// are declarations: no value of a's delete-priority, pod-deletion-cost or
// of a headroom.dev/pids at or below the default changes which pods of the
// other workloads are evicted, on any node.
func TestNoWorkloadSteersEvictionsOntoAnotherAcrossNodes(t *testing.T) {
	values := []string{"", "0", "-2147483648", "2147483647", "5", "-7", "not a number"}
	declarations := []string{"", "0", "-5", "50", "100", "lots"}
	changed, roomRanOut := 0, 0
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 11))
		type spec struct {
			name, node, owner, namespace string
			restarts                     int32
			held                         int64
			declared                     string
		}
		var specs []spec
		nodeNames := []string{"n1", "n2", "n3"}
		listedNode := map[string]bool{}
		for _, node := range nodeNames {
			listedNode[node] = r.IntN(3) > 0
			for i := range 3 + r.IntN(4) {
				owner := []string{"a", "a", "b", "c"}[r.IntN(4)]
				ns := "team-" + owner
				if owner == "a" && r.IntN(4) == 0 {
					// Claims a's owner UID from another namespace.
					ns = "team-x"
				}
				s := spec{name: fmt.Sprintf("%s-%s-%s-%d", owner, ns, node, i), node: node, owner: owner, namespace: ns,
					restarts: int32(r.IntN(4)), held: int64(100 + r.IntN(1100))}
				if ns != "team-a" {
					s.declared = []string{"", "150", "300", "800"}[r.IntN(4)]
				}
				specs = append(specs, s)
			}
		}
		// The destination takes between 1,000 and 3,000 PIDs: often less
		// than all three nodes' replacements.
		destUsed := int64(6500 + r.IntN(2000))
		inA := func(s spec) bool { return s.namespace == "team-a" }

		evicted := func(variant func() (priority, cost, declared string)) (outside, all []string, noRoom bool) {
			var pods []*v1.Pod
			held := map[string]map[*v1.Pod]int64{}
			for _, s := range specs {
				opts := []podOption{ownedBy(s.owner), inNamespace(s.namespace), restarts(s.restarts),
					func(p *v1.Pod) { p.UID = types.UID(uidOf(s.name)) }}
				declared := s.declared
				if inA(s) {
					var priorityValue, costValue string
					priorityValue, costValue, declared = variant()
					if priorityValue != "" {
						opts = append(opts, priority(priorityValue))
					}
					if costValue != "" {
						opts = append(opts, deletionCost(costValue))
					}
				}
				if declared != "" {
					opts = append(opts, annotate(pidstats.AnnotationPodPIDs, declared))
				}
				p := testPod(s.name, s.node, opts...)
				pods = append(pods, p)
				if held[s.node] == nil {
					held[s.node] = map[*v1.Pod]int64{}
				}
				held[s.node][p] = s.held
			}
			var nodes []*v1.Node
			for _, name := range nodeNames {
				n := pidNode(name, 10000, 9600+int64(len(held[name]))*10)
				if listedNode[name] {
					n = listed(n, held[name])
				}
				nodes = append(nodes, n)
			}
			nodes = append(nodes, pidNode("dest", 10000, destUsed))
			e := newEnv(t, setup{}, objects(nodes, pods)...)
			all = e.run(t, nodes...)
			for _, name := range all {
				if !strings.HasPrefix(name, "a-team-a-") {
					outside = append(outside, name)
				}
			}
			slices.Sort(outside)
			for _, w := range e.warningEvents() {
				noRoom = noRoom || strings.Contains(w, "no other node has room")
			}
			return outside, all, noRoom
		}
		base, baseAll, noRoom := evicted(func() (string, string, string) { return "", "", "" })
		if noRoom {
			roomRanOut++
		}
		for k := range 4 {
			vr := rand.New(rand.NewPCG(seed, uint64(200+k)))
			got, all, _ := evicted(func() (string, string, string) {
				return values[vr.IntN(len(values))], values[vr.IntN(len(values))], declarations[vr.IntN(len(declarations))]
			})
			if !slices.Equal(got, base) {
				t.Fatalf("seed %d: with other annotations on a's pods, the cycle evicts %v outside a (all: %v); without them %v (all: %v)",
					seed, got, all, base, baseAll)
			}
			if !slices.Equal(all, baseAll) {
				changed++
			}
		}
	}
	if changed == 0 || roomRanOut == 0 {
		t.Fatalf("a's annotations changed its own evictions in %d variants, the destination ran out of room in %d cases: the test exercises too little", changed, roomRanOut)
	}
	t.Logf("a's annotations changed which of its pods go in %d of 160 variants; the destination ran out of room in %d of 40 cases", changed, roomRanOut)
}
