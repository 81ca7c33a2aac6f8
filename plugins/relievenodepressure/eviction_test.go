package relievenodepressure

import (
	"context"
	"errors"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/descheduler/evictions"
)

func TestPerNamespaceLimitSkipsThatNamespace(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	pods := []*v1.Pod{
		testPod("a1", "n1", pids(300), restarts(5), inNamespace("a")),
		testPod("a2", "n1", pids(300), restarts(4), inNamespace("a")),
		testPod("b1", "n1", pids(300), restarts(3), inNamespace("b")),
		testPod("b2", "n1", pids(300), restarts(2), inNamespace("b")),
		testPod("c1", "n1", pids(300), restarts(1), inNamespace("c")),
	}
	e := newEnv(t, setup{evictions: evictions.NewOptions().WithMaxPodsToEvictPerNamespace(ptr.To[uint](1))},
		objects([]*v1.Node{n1, n2}, pods)...)
	if got, want := e.run(t, n1, n2), []string{"a1", "b1", "c1"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func TestRefusedEvictionEndsTheWalk(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	pods := hotNodePods("n1", 5)
	e := newEnv(t, setup{refuse: []string{"n1-b"}}, objects([]*v1.Node{n1, n2}, pods)...)
	// n1-b, the kubelet's next victim after n1-a, cannot go: the pods
	// ranked after it are not the cause. 9700 − 300 = 9400 ≤ 9500.
	if got, want := e.run(t, n1, n2), []string{"n1-a"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func TestRefusalOutsideThePlanStopsWhenTheRestCannotRelieve(t *testing.T) {
	// Two pods of 1000 PIDs: either alone relieves 97 % to 87 %. The first,
	// the kubelet's first victim, is refused (a budget that appeared after
	// the plan): b, ranked after it, is not the cause and stays.
	pods := []*v1.Pod{testPod("a", "n1", pids(1000), restarts(2)), testPod("b", "n1", pids(1000), restarts(1))}
	n1 := pidNode("n1", 10000, 9700)
	e := newEnv(t, setup{refuse: []string{"a"}}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	if got := e.run(t, n1, spareNode("n2")); len(got) != 0 {
		t.Fatalf("evicted %v, want none", got)
	}
	// One pod of 1000 and small ones that cannot make up for it: once the
	// big one is refused nothing else goes.
	pods = []*v1.Pod{testPod("big", "n1", pids(1000), restarts(2)), testPod("small", "n1", pids(100), restarts(1))}
	e = newEnv(t, setup{refuse: []string{"big"}}, objects([]*v1.Node{n1, spareNode("n2")}, pods)...)
	if got := e.run(t, n1, spareNode("n2")); len(got) != 0 {
		t.Fatalf("evicted %v after the refusal, want none", got)
	}
}

// TestUnknownEvictionOutcomeEndsTheNodesRelief: the API server evicts n1-b
// but the plugin never gets its answer (the API server restarts, the
// connection drops, the request times out). 9990 of 10000 PIDs are used and
// each pod held 200 at the sample: one uninterrupted run evicts a to e
// (8990 ≤ 9000). Were n1-b's error taken for a refusal, the plan made again
// without it would evict c to f: six pods where the plan has five. The
// plugin leaves the node for the next cycle instead, which sees a and b
// terminating, their listed PIDs freed (9590 > 9500), and evicts c to e:
// the plan, each pod once.
func TestUnknownEvictionOutcomeEndsTheNodesRelief(t *testing.T) {
	pods := hotNodePods("n1", 7)
	usage := map[*v1.Pod]int64{}
	for _, p := range pods {
		usage[p] = 200
	}
	node := func() *v1.Node { return listed(pidNode("n1", 10000, 9990), usage) }
	plan := newEnv(t, setup{}, objects([]*v1.Node{node(), spareNode("n2")}, pods)...).run(t, node(), spareNode("n2"))
	if want := []string{"n1-a", "n1-b", "n1-c", "n1-d", "n1-e"}; !equal(plan, want) {
		t.Fatalf("uninterrupted run evicted %v, want %v", plan, want)
	}
	for name, err := range map[string]error{
		"connection refused": &url.Error{Op: "Post", URL: "https://127.0.0.1:6443/api/v1/namespaces/default/pods/n1-b/eviction",
			Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}},
		"API server's timeout":          apierrors.NewTimeoutError("request did not complete within the allowed duration", 0),
		"API server shutting down":      apierrors.NewServiceUnavailable("apiserver is shutting down"),
		"client deadline":               context.DeadlineExceeded,
		"webhook failed (server error)": apierrors.NewInternalError(errors.New("failed calling webhook")),
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, setup{unanswered: map[string]error{"n1-b": err}}, objects([]*v1.Node{node(), spareNode("n2")}, pods)...)
			first := e.run(t, node(), spareNode("n2"))
			if want := []string{"n1-a", "n1-b"}; !equal(first, want) {
				t.Fatalf("evictions requested %v, want %v and none after the unknown outcome", first, want)
			}
			// The next cycle: a and b are terminating.
			var after []*v1.Pod
			for _, p := range pods {
				p = p.DeepCopy()
				if slices.Contains(first, p.Name) {
					terminatingPod(p)
				}
				after = append(after, p)
			}
			e = newEnv(t, setup{}, objects([]*v1.Node{node(), spareNode("n2")}, after)...)
			second := e.run(t, node(), spareNode("n2"))
			if all := append(slices.Clone(first), second...); !equal(all, plan) {
				t.Errorf("evicted %v, then %v: want the plan %v, each pod once", first, second, plan)
			}
		})
	}
}

// TestOutcomeUnknownOfTheEvictorsErrors classifies the errors the real
// PodEvictor returns for the API server's answers (it rewraps a 429 and a
// 404 in errors of its own) and for no answer: only the latter, and 5xx,
// leave open whether the pod was evicted.
func TestOutcomeUnknownOfTheEvictorsErrors(t *testing.T) {
	gr := v1.Resource("pods")
	for _, c := range []struct {
		name    string
		err     error
		unknown bool
	}{
		{"PodDisruptionBudget (429)", apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0), false},
		{"pod gone (404)", apierrors.NewNotFound(gr, "a"), false},
		{"forbidden (403)", apierrors.NewForbidden(gr, "a", errors.New("no RBAC")), false},
		{"conflict (409)", apierrors.NewConflict(gr, "a", errors.New("changed")), false},
		{"connection refused", &url.Error{Op: "Post", URL: "https://127.0.0.1:6443", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, true},
		{"API server's timeout (504)", apierrors.NewTimeoutError("request did not complete within the allowed duration", 0), true},
		{"API server shutting down (503)", apierrors.NewServiceUnavailable("apiserver is shutting down"), true},
		{"internal error (500)", apierrors.NewInternalError(errors.New("failed calling webhook")), true},
		{"request's context ended", context.Canceled, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pod := testPod("a", "n1")
			e := newEnv(t, setup{unanswered: map[string]error{"a": c.err}}, objects([]*v1.Node{pidNode("n1", 10000, 9990)}, []*v1.Pod{pod})...)
			err := e.evictor.EvictPod(context.Background(), pod, evictions.EvictOptions{StrategyName: PluginName})
			if err == nil {
				t.Fatal("the evictor reported no error")
			}
			if got := outcomeUnknown(err); got != c.unknown {
				t.Errorf("outcomeUnknown(%v) = %v, want %v", err, got, c.unknown)
			}
		})
	}
	for _, err := range []error{evictions.NewEvictionNodeLimitError("n1"), evictions.NewEvictionNamespaceLimitError("default"), evictions.NewEvictionTotalLimitError()} {
		if outcomeUnknown(err) {
			t.Errorf("outcomeUnknown(%v): the evictor's own limit is a refusal", err)
		}
	}
}

func TestEvictorLimitsAndPlan(t *testing.T) {
	// The evictor's per-node limit is below the plan: the plan stops there.
	n1 := pidNode("n1", 10000, 9700)
	e := newEnv(t, setup{evictions: evictions.NewOptions().WithMaxPodsToEvictPerNode(ptr.To[uint](1))},
		objects([]*v1.Node{n1, spareNode("n2")}, hotNodePods("n1", 4))...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"n1-a"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}

func TestEvictionReasonNamesTheTrigger(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, n2}, hotNodePods("n1", 4))...)
	e.run(t, n1, n2)
	r := e.reasons["n1-a"]
	if !strings.Contains(r, "RelieveNodePressure: node n1 PIDs 97.0% used > threshold 95%") {
		t.Fatalf("eviction reason %q does not name the PID trigger", r)
	}
}

func TestEventReasonFitsTheAPILimit(t *testing.T) {
	long := strings.Repeat("ü", 100)
	if r := eventReason(long); len(r) > maxEventReason || !strings.HasPrefix(long, r) {
		t.Fatalf("eventReason kept %d bytes: %q", len(r), r)
	}
}
