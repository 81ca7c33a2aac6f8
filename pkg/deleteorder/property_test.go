package deleteorder

import (
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/controller"
)

// generator makes random pods from a seeded source.
//
// Every non-zero ready time and creation time it hands out is distinct:
// upstream's comparator is a strict weak order only then (see
// TestUpstreamLogScaleTieBreakIsNotTransitive), and the properties below are
// stated for strict weak orders. Zero times may repeat; upstream orders them
// exactly, so they do not break the order. The ages spread over log2 buckets
// 30 to 49 (about 1 s to 6.5 days), so many pods share a bucket and the UID
// tie-break is exercised.
type generator struct {
	r    *rand.Rand
	used map[time.Time]bool
	n    int
}

func newGenerator(seed int64) *generator {
	return &generator{r: rand.New(rand.NewSource(seed)), used: map[time.Time]bool{}}
}

func (g *generator) time() metav1.Time {
	if g.r.Intn(20) == 0 {
		return metav1.Time{}
	}
	for {
		var age time.Duration
		if g.r.Intn(25) == 0 {
			age = -time.Duration(g.r.Int63n(int64(time.Minute))) // clock skew: in the future
		} else {
			bucket := 30 + g.r.Intn(20)
			age = time.Duration(int64(1)<<bucket + g.r.Int63n(int64(1)<<bucket))
		}
		t := now.Add(-age)
		if !g.used[t] {
			g.used[t] = true
			return metav1.NewTime(t)
		}
	}
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.Intn(len(xs))] }

// pod returns a random pod; priorities lists the delete-priority values to
// draw from ("" draws no annotation), none when empty.
func (g *generator) pod(priorities []string) *corev1.Pod {
	r := g.r
	g.n++
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      fmt.Sprintf("p%03d", g.n),
			Namespace: "ns",
			// random prefix: the UID order must not follow the name order
			UID:               types.UID(fmt.Sprintf("%08x-%03d", r.Uint32(), g.n)),
			CreationTimestamp: g.time(),
		},
		Spec: corev1.PodSpec{
			NodeName:   pick(r, "", "node-a", "node-a", "node-b", "node-b", "node-c"),
			Containers: []corev1.Container{{Name: "app"}},
		},
		Status: corev1.PodStatus{
			Phase: pick(r, corev1.PodPending, corev1.PodUnknown, corev1.PodRunning, corev1.PodRunning,
				corev1.PodRunning, corev1.PodSucceeded, corev1.PodFailed, ""),
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", RestartCount: int32(pick(r, 0, 0, 0, 1, 2, 3))}},
		},
	}
	switch r.Intn(3) {
	case 1:
		pod.Status.Conditions = []corev1.PodCondition{{
			Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: g.time(),
		}}
	case 2:
		pod.Status.Conditions = []corev1.PodCondition{{
			Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: g.time(),
		}}
	}
	if r.Intn(5) == 0 {
		pod.Spec.InitContainers = []corev1.Container{{Name: "sidecar", RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways)}}
		pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: "sidecar", RestartCount: int32(r.Intn(3))}}
	}
	if r.Intn(10) == 0 {
		pod.DeletionTimestamp = ptrTo(metav1.NewTime(now.Add(-time.Minute)))
	}
	if r.Intn(10) == 0 {
		pod.OwnerReferences = append(pod.OwnerReferences, metav1.OwnerReference{
			APIVersion: "v1", Kind: "ConfigMap", Name: "cm", UID: "cm",
		})
	}
	if owner := pick(r, "", "rs-1", "rs-1", "rs-2", "rs-2", "rs-3"); owner != "" {
		pod.OwnerReferences = append(pod.OwnerReferences, metav1.OwnerReference{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: owner, UID: types.UID(owner), Controller: ptrTo(true),
		})
	}
	annotations := map[string]string{}
	if r.Intn(4) == 0 {
		annotations[deletionCostAnnotation] = pick(r, "-1", "0", "1", "2", "+3", "x")
	}
	if len(priorities) > 0 {
		if v := pick(r, priorities...); v != "" {
			annotations[DefaultPriorityAnnotation] = v
		}
	}
	if len(annotations) > 0 {
		pod.Annotations = annotations
	}
	return pod
}

func (g *generator) pods(n int, priorities []string) []*corev1.Pod {
	pods := make([]*corev1.Pod, n)
	for i := range pods {
		pods[i] = g.pod(priorities)
	}
	return pods
}

// withPriorities includes missing, malformed and out-of-range values.
var withPriorities = []string{"", "", "", "-3", "-1", "0", "1", "1", "2", "7", "2147483647", "2147483648", "high", " 1", ""}

func samePods(t *testing.T, got, want []*corev1.Pod) {
	t.Helper()
	key := func(p *corev1.Pod) string { return string(p.UID) }
	g, w := slices.Clone(got), slices.Clone(want)
	byUID := func(a, b *corev1.Pod) int { return strings.Compare(key(a), key(b)) }
	slices.SortFunc(g, byUID)
	slices.SortFunc(w, byUID)
	if !slices.Equal(g, w) {
		t.Fatalf("Sort changed the set of pods: got %v, want %v", names(got), names(want))
	}
}

// TestComparatorIsStrictWeakOrder checks Headroom's comparator on every
// triple of random samples, with and without priority annotations.
func TestComparatorIsStrictWeakOrder(t *testing.T) {
	for seed := int64(1); seed <= 20; seed++ {
		for _, priorities := range [][]string{nil, withPriorities} {
			pods := newGenerator(seed).pods(40, priorities)
			s := Order{}.newSorter(pods, now)
			n := len(pods)
			less := make([][]bool, n)
			for i := range less {
				less[i] = make([]bool, n)
				for j := range less[i] {
					less[i][j] = s.Less(i, j)
				}
			}
			equiv := func(i, j int) bool { return !less[i][j] && !less[j][i] }
			fail := func(format string, args ...any) {
				t.Fatalf("seed %d, priorities %v: "+format, append([]any{seed, priorities != nil}, args...)...)
			}
			for i := 0; i < n; i++ {
				if less[i][i] {
					fail("not irreflexive: %s < %s", pods[i].Name, pods[i].Name)
				}
				for j := 0; j < n; j++ {
					if less[i][j] && less[j][i] {
						fail("not asymmetric: %s, %s", pods[i].Name, pods[j].Name)
					}
					for k := 0; k < n; k++ {
						if less[i][j] && less[j][k] && !less[i][k] {
							fail("not transitive: %s < %s < %s", pods[i].Name, pods[j].Name, pods[k].Name)
						}
						if equiv(i, j) && equiv(j, k) && !equiv(i, k) {
							fail("equivalence not transitive: %s ~ %s ~ %s", pods[i].Name, pods[j].Name, pods[k].Name)
						}
					}
				}
			}
		}
	}
}

// TestSortMatchesUpstreamWithoutPriorities compares Sort with upstream's
// sort.Sort(controller.ActivePodsWithRanks) on random pods without
// delete-priority annotations.
func TestSortMatchesUpstreamWithoutPriorities(t *testing.T) {
	for seed := int64(1); seed <= 50; seed++ {
		g := newGenerator(seed)
		input := g.pods(1+g.r.Intn(120), nil)
		rankOf := map[*corev1.Pod]int{}
		for i, r := range Ranks(input) {
			rankOf[input[i]] = r
		}
		upstreamLess := func(a, b *corev1.Pod) bool {
			s := controller.ActivePodsWithRanks{
				Pods: []*corev1.Pod{a, b}, Rank: []int{rankOf[a], rankOf[b]}, Now: metav1.NewTime(now),
			}
			return s.Less(0, 1)
		}

		got := slices.Clone(input)
		Sort(got, now)
		samePods(t, got, input)

		// Sorted by upstream's comparator: no later pod is strictly before an
		// earlier one.
		for i := range got {
			for j := i + 1; j < len(got); j++ {
				if upstreamLess(got[j], got[i]) {
					t.Fatalf("seed %d: upstream puts %s (index %d) before %s (index %d)", seed, got[j].Name, j, got[i].Name, i)
				}
			}
		}

		// Position by position equivalent to upstream's own sort.
		want := slices.Clone(input)
		sort.Sort(controller.ActivePodsWithRanks{Pods: want, Rank: Ranks(want), Now: metav1.NewTime(now)})
		for k := range got {
			if upstreamLess(got[k], want[k]) || upstreamLess(want[k], got[k]) {
				t.Fatalf("seed %d: index %d holds %s, upstream's sort has the non-equivalent %s\n got %v\nwant %v",
					seed, k, got[k].Name, want[k].Name, names(got), names(want))
			}
		}

		// Identical to upstream's comparator under the same stable sort.
		stable := slices.Clone(input)
		sort.Stable(controller.ActivePodsWithRanks{Pods: stable, Rank: Ranks(stable), Now: metav1.NewTime(now)})
		if !slices.Equal(got, stable) {
			t.Fatalf("seed %d: Sort differs from sort.Stable over upstream's comparator\n got %v\nwant %v",
				seed, names(got), names(stable))
		}
	}
}

// TestSortWithPriorities checks, on random pods with valid, malformed and
// missing priorities, that priorities never increase along the result and
// that within one priority the upstream order holds.
func TestSortWithPriorities(t *testing.T) {
	for seed := int64(1); seed <= 50; seed++ {
		g := newGenerator(seed)
		input := g.pods(1+g.r.Intn(120), withPriorities)
		rankOf := map[*corev1.Pod]int{}
		for i, r := range Ranks(input) {
			rankOf[input[i]] = r
		}
		got := slices.Clone(input)
		Sort(got, now)
		samePods(t, got, input)

		prio := func(p *corev1.Pod) int32 {
			v, err := ParsePriority(p, DefaultPriorityAnnotation)
			if err != nil && v != 0 {
				t.Fatalf("ParsePriority returned %d with error %v", v, err)
			}
			return v
		}
		for i := 1; i < len(got); i++ {
			if prio(got[i-1]) < prio(got[i]) {
				t.Fatalf("seed %d: priority increases at index %d: %s=%d, %s=%d", seed, i,
					got[i-1].Name, prio(got[i-1]), got[i].Name, prio(got[i]))
			}
		}
		for i := range got {
			for j := i + 1; j < len(got) && prio(got[j]) == prio(got[i]); j++ {
				s := controller.ActivePodsWithRanks{
					Pods: []*corev1.Pod{got[j], got[i]}, Rank: []int{rankOf[got[j]], rankOf[got[i]]}, Now: metav1.NewTime(now),
				}
				if s.Less(0, 1) {
					t.Fatalf("seed %d: at priority %d upstream puts %s before %s", seed, prio(got[i]), got[j].Name, got[i].Name)
				}
			}
		}
	}
}

// TestGeneratorCoversRules guards the property tests against a generator
// that stops producing the cases they are meant to cover.
func TestGeneratorCoversRules(t *testing.T) {
	pods := newGenerator(1).pods(400, withPriorities)
	count := map[string]int{}
	for i, r := range Ranks(pods) {
		p := pods[i]
		if r > 1 {
			count["doubled up"]++
		}
		if p.Spec.NodeName == "" {
			count["unscheduled"]++
		}
		if len(p.Status.Conditions) > 0 && p.Status.Conditions[0].Status == corev1.ConditionTrue {
			count["ready"]++
		}
		if _, ok := p.Annotations[deletionCostAnnotation]; ok {
			count["deletion cost"]++
		}
		if _, err := ParsePriority(p, DefaultPriorityAnnotation); err != nil {
			count["bad priority"]++
		}
		if v, _ := ParsePriority(p, DefaultPriorityAnnotation); v != 0 {
			count["priority"]++
		}
		if p.Status.ContainerStatuses[0].RestartCount > 0 {
			count["restarts"]++
		}
		if p.DeletionTimestamp != nil {
			count["deleting"]++
		}
	}
	for _, what := range []string{"doubled up", "unscheduled", "ready", "deletion cost", "bad priority", "priority", "restarts", "deleting"} {
		if count[what] < 10 {
			t.Errorf("generator made only %d pods that are %s", count[what], what)
		}
	}
}

// SortNeutral is Sort of the pods without either annotation a tenant
// writes, and leaves the pods themselves untouched.
func TestSortNeutralIgnoresTenantAnnotations(t *testing.T) {
	for seed := range int64(200) {
		g := newGenerator(seed)
		pods := g.pods(12, []string{"", "", "9", "-2147483648", "x"})
		before := make([]map[string]string, len(pods))
		for i, p := range pods {
			if p.Annotations == nil && g.r.Intn(2) == 0 {
				p.Annotations = map[string]string{}
			}
			if p.Annotations != nil {
				p.Annotations[corev1.PodDeletionCost] = pick(g.r, "-100", "0", "2147483647")
			}
			before[i] = maps.Clone(p.Annotations)
		}
		bare := make([]*corev1.Pod, len(pods))
		for i, p := range pods {
			c := p.DeepCopy()
			delete(c.Annotations, DefaultPriorityAnnotation)
			delete(c.Annotations, corev1.PodDeletionCost)
			bare[i] = c
		}
		got := slices.Clone(pods)
		Order{}.SortNeutral(got, now)
		Sort(bare, now)
		for i := range got {
			if got[i].Name != bare[i].Name {
				t.Fatalf("seed %d: SortNeutral %v, Sort without the annotations %v", seed, names(got), names(bare))
			}
		}
		for i, p := range pods {
			if !maps.Equal(p.Annotations, before[i]) {
				t.Fatalf("seed %d: SortNeutral changed %s's annotations", seed, p.Name)
			}
		}
	}
}
