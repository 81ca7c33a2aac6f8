//go:build e2ebench

package e2ebench

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/headroom-k8s/headroom/test/controlplane"
)

// createPDBs gives each app a PodDisruptionBudget that allows one
// disruption (maxUnavailable 1), as an operator protects a workload.
func createPDBs(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, apps ...string) {
	t.Helper()
	for _, app := range apps {
		one := intstr.FromInt32(1)
		pdb := &policyv1.PodDisruptionBudget{
			ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: metav1.NamespaceDefault},
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: &one,
				Selector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
			},
		}
		if _, err := cp.Client.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault).Create(ctx, pdb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// pdbResult is what the PodDisruptionBudgets showed over a run: by PDB,
// the seconds its workload had fewer healthy pods than it allows
// (currentHealthy < desiredHealthy, as the disruption controller counts
// them), and the fewest healthy pods seen against the minimum then.
type pdbResult struct {
	broken map[string]int
	lowest map[string]string
}

// brokenSeconds is the seconds any PDB was broken, summed.
func (r pdbResult) brokenSeconds() int {
	n := 0
	for _, v := range r.broken {
		n += v
	}
	return n
}

// String is "0", or the seconds by PDB with the lowest healthy/minimum.
func (r pdbResult) String() string {
	if r.brokenSeconds() == 0 {
		return "0"
	}
	var parts []string
	for name, v := range r.broken {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s %d s, down to %s healthy", name, v, r.lowest[name]))
		}
	}
	sort.Strings(parts)
	return fmt.Sprintf("%d (%s)", r.brokenSeconds(), strings.Join(parts, "; "))
}

// pdbFollower reads the PDBs every second until finish.
type pdbFollower struct {
	mu     sync.Mutex
	r      pdbResult
	low    map[string]int32
	cancel func()
	done   chan struct{}
}

// followPDBs starts reading the default namespace's PDBs every second.
func followPDBs(ctx context.Context, cp *controlplane.ControlPlane) *pdbFollower {
	ctx, cancel := context.WithCancel(ctx)
	f := &pdbFollower{r: pdbResult{broken: map[string]int{}, lowest: map[string]string{}}, low: map[string]int32{}, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for ctx.Err() == nil {
			if list, err := cp.Client.PolicyV1().PodDisruptionBudgets(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{}); err == nil {
				f.mu.Lock()
				for _, p := range list.Items {
					f.see(p.Name, p.Status.CurrentHealthy, p.Status.DesiredHealthy)
				}
				f.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return f
}

// see counts one reading of a PDB.
func (f *pdbFollower) see(name string, healthy, desired int32) {
	if _, ok := f.r.broken[name]; !ok {
		f.r.broken[name] = 0
	}
	if healthy >= desired {
		return
	}
	f.r.broken[name]++
	if low, ok := f.low[name]; !ok || healthy < low {
		f.low[name] = healthy
		f.r.lowest[name] = fmt.Sprintf("%d/%d", healthy, desired)
	}
}

// finish stops reading and returns what was seen.
func (f *pdbFollower) finish() pdbResult {
	f.cancel()
	<-f.done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.r
}

// evictionRows are the rows of what differs between a kubelet tuned to
// Headroom's line and Headroom, for a part whose cause is the app cause
// and whose other real node is other: the victims and whether they were
// the cause, their shutdown, the PDBs, the replacements and when they were
// Ready, the kills.
func evictionRows[R any](cause, other string, log func(R) *podLog, pdb func(R) pdbResult) []row[R] {
	return []row[R]{
		{name: "first victim, and whether it was the cause", text: func(r R) string {
			v := log(r).evictedPods()
			if len(v) == 0 {
				return "none"
			}
			verdict := "not the cause"
			if v[0].app == cause {
				verdict = "the cause"
			}
			return fmt.Sprintf("%s (%s): %s", v[0].app, v[0].by, verdict)
		}, num: func(r R) (float64, bool) {
			v := log(r).evictedPods()
			if len(v) == 0 {
				return 0, false
			}
			if v[0].app == cause {
				return 1, true
			}
			return 0, true
		}},
		countRow(fmt.Sprintf("evicted pods that shut down gracefully (SIGTERM, the %s drain run in full within their %d s grace, exit 0)", stressDrain, stressGrace), func(r R) int {
			return log(r).shutdowns()[shutdownDrained]
		}),
		{name: "evicted pods' shutdown, by outcome", text: func(r R) string {
			return describe(log(r).shutdowns())
		}},
		{name: "the kubelet's evictions, by the threshold quantity it named (the section's A′ settings tell soft from hard)", text: func(r R) string {
			m := map[string]int{}
			for _, v := range log(r).evictedPods() {
				if v.threshold != "" {
					m[v.threshold]++
				}
			}
			return describe(m)
		}},
		{name: "seconds a PodDisruptionBudget (web, hog: maxUnavailable 1) was broken", text: func(r R) string { return pdb(r).String() },
			num: func(r R) (float64, bool) { return float64(pdb(r).brokenSeconds()), true }},
		{name: "replacements of the evicted pods, by node", text: func(r R) string {
			m := map[string]int{}
			for _, v := range log(r).evictedPods() {
				m[orNone(v.replacedOn)]++
			}
			return describe(m)
		}},
		countRow("evicted pods not replaced on the other real node (by the end)", func(r R) int {
			n := 0
			for _, v := range log(r).evictedPods() {
				if v.replacedOn != other {
					n++
				}
			}
			return n
		}),
		{name: "first eviction asked → its replacement Ready (s)", text: func(r R) string {
			d, ok := firstReplacementReady(log(r))
			if !ok {
				return "never"
			}
			return fmt.Sprintf("%.0f", d.Seconds())
		}, num: func(r R) (float64, bool) {
			d, ok := firstReplacementReady(log(r))
			return d.Round(time.Second).Seconds(), ok
		}},
		countRow("containers OOM-killed", func(r R) int { return log(r).killedFor("OOMKilled") }),
	}
}

// firstReplacementReady is the time from the first eviction asked to its
// replacement's Ready condition (both kept by the API server to the
// second); false where the first victim's replacement never was Ready.
func firstReplacementReady(l *podLog) (time.Duration, bool) {
	v := l.evictedPods()
	if len(v) == 0 || v[0].replacementReady.IsZero() {
		return 0, false
	}
	return v[0].replacementReady.Sub(v[0].evictedAt), true
}
