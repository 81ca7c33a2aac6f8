package deleteorder

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/controller"
	"k8s.io/kubernetes/pkg/features"
)

const deletionCostAnnotation = "controller.kubernetes.io/pod-deletion-cost"

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

type podOption func(*corev1.Pod)

// newPod returns a scheduled, running pod that has been ready for a day and
// was created two days ago, without owner, annotations or restarts.
func newPod(name string, opts ...podOption) *corev1.Pod {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:              name,
			Namespace:         "ns",
			UID:               types.UID("uid-" + name),
			CreationTimestamp: metav1.NewTime(now.Add(-48 * time.Hour)),
		},
		Spec: corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{
				Type:               corev1.PodReady,
				Status:             corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(now.Add(-24 * time.Hour)),
			}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app"}},
		},
	}
	for _, opt := range opts {
		opt(pod)
	}
	return pod
}

func annotate(key, value string) podOption {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[key] = value
	}
}

func priority(v string) podOption { return annotate(DefaultPriorityAnnotation, v) }

func deletionCost(v string) podOption { return annotate(deletionCostAnnotation, v) }

func onNode(node string) podOption { return func(p *corev1.Pod) { p.Spec.NodeName = node } }

func inNamespace(ns string) podOption { return func(p *corev1.Pod) { p.Namespace = ns } }

func phase(ph corev1.PodPhase) podOption { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func notReady() podOption {
	return func(p *corev1.Pod) { p.Status.Conditions[0].Status = corev1.ConditionFalse }
}

func readyFor(d time.Duration) podOption {
	return func(p *corev1.Pod) { p.Status.Conditions[0].LastTransitionTime = metav1.NewTime(now.Add(-d)) }
}

func createdAgo(d time.Duration) podOption {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(now.Add(-d)) }
}

func restarts(n int32) podOption {
	return func(p *corev1.Pod) { p.Status.ContainerStatuses[0].RestartCount = n }
}

func ownedBy(uid string) podOption {
	return func(p *corev1.Pod) {
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: uid, UID: types.UID(uid),
			Controller: ptrTo(true),
		})
	}
}

func deleting() podOption {
	return func(p *corev1.Pod) {
		t := metav1.NewTime(now)
		p.DeletionTimestamp = &t
	}
}

func ptrTo[T any](v T) *T { return &v }

func names(pods []*corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return out
}

func withSidecarRestarts(n int32) podOption {
	return func(p *corev1.Pod) {
		p.Spec.InitContainers = append(p.Spec.InitContainers, corev1.Container{
			Name: "sidecar", RestartPolicy: ptrTo(corev1.ContainerRestartPolicyAlways),
		})
		p.Status.InitContainerStatuses = append(p.Status.InitContainerStatuses, corev1.ContainerStatus{
			Name: "sidecar", RestartCount: n,
		})
	}
}

// TestFeatureGates pins the gate defaults the expectations below rely on, so
// that a Kubernetes update that changes them fails here first. A gate that
// a minor no longer has is one upstream removed after it went GA, locked
// on (LogarithmicScaleDown from 1.37): the expectations below check the
// behaviour itself.
func TestFeatureGates(t *testing.T) {
	known := utilfeature.DefaultMutableFeatureGate.GetAll()
	for _, f := range []featuregate.Feature{features.PodDeletionCost, "LogarithmicScaleDown"} {
		if _, ok := known[f]; !ok {
			t.Logf("feature gate %s is gone from this Kubernetes minor: always on", f)
			continue
		}
		if !utilfeature.DefaultFeatureGate.Enabled(f) {
			t.Errorf("feature gate %s is disabled; the delete order is tested with it on", f)
		}
	}
}

func TestSortRules(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		name string
		// want is the expected order; Sort gets it reversed and rotated.
		want []*corev1.Pod
	}{
		{
			name: "priority beats every upstream rule",
			want: []*corev1.Pod{
				newPod("old-ready-running-prio-5", priority("5"), createdAgo(400*day), readyFor(300*day)),
				newPod("unscheduled-pending", onNode(""), phase(corev1.PodPending), notReady(),
					createdAgo(time.Minute), deletionCost("-100"), restarts(9)),
			},
		},
		{
			name: "higher priority first, missing is 0, negative after missing",
			want: []*corev1.Pod{
				newPod("prio-10", priority("10")),
				newPod("prio-1", priority("1")),
				newPod("unscheduled-no-prio", onNode(""), phase(corev1.PodPending), notReady()),
				newPod("no-prio"),
				newPod("unscheduled-prio-minus-1", onNode(""), phase(corev1.PodPending), notReady(), priority("-1")),
				newPod("prio-min-int32", priority("-2147483648")),
			},
		},
		{
			name: "malformed and out-of-range priority count as 0",
			want: []*corev1.Pod{
				newPod("prio-1", priority("1")),
				newPod("malformed-unscheduled", onNode(""), phase(corev1.PodPending), notReady(), priority("high")),
				newPod("out-of-range-pending", phase(corev1.PodPending), notReady(), priority("2147483648")),
				newPod("spaces-running-not-ready", notReady(), priority(" 7 ")),
				newPod("empty-running-ready", priority("")),
				newPod("unscheduled-prio-minus-1", onNode(""), phase(corev1.PodPending), priority("-1")),
			},
		},
		{
			name: "unscheduled < pending < unknown < running",
			want: []*corev1.Pod{
				newPod("unscheduled-running", onNode(""), createdAgo(400*day)),
				newPod("pending", phase(corev1.PodPending), createdAgo(300*day)),
				newPod("unknown", phase(corev1.PodUnknown), createdAgo(200*day)),
				newPod("running", createdAgo(time.Minute), restarts(3)),
			},
		},
		{
			name: "not ready before ready",
			want: []*corev1.Pod{
				newPod("not-ready", notReady(), createdAgo(400*day), deletionCost("100")),
				newPod("ready", createdAgo(time.Minute), restarts(5), deletionCost("-100")),
			},
		},
		{
			name: "lower pod-deletion-cost first, before rank",
			want: []*corev1.Pod{
				newPod("cost-minus-5", deletionCost("-5"), createdAgo(400*day)),
				newPod("cost-0-rank-2-restarts-1", deletionCost("0"), onNode("node-b"), ownedBy("rs-1"), restarts(1)),
				// upstream rejects a leading "+", so this cost is 0
				newPod("cost-plus-7-rank-2", deletionCost("+7"), onNode("node-b"), ownedBy("rs-1")),
				newPod("no-cost-rank-0", restarts(9)),
				newPod("cost-10", deletionCost("10"), restarts(7), createdAgo(time.Minute), ownedBy("rs-2")),
			},
		},
		{
			name: "doubled up first, before ready time, restarts and age",
			want: []*corev1.Pod{
				newPod("a-rs1-restarts-2", ownedBy("rs-1"), restarts(2)),
				newPod("a-rs1-restarts-1", ownedBy("rs-1"), restarts(1)),
				newPod("a-rs1-restarts-0", ownedBy("rs-1")),
				newPod("b-rs1-created-1d", onNode("node-b"), ownedBy("rs-1"), readyFor(300*day), createdAgo(day)),
				newPod("b-rs1-created-400d", onNode("node-b"), ownedBy("rs-1"), readyFor(300*day), createdAgo(400*day)),
				newPod("a-rs2", ownedBy("rs-2"), readyFor(time.Minute), restarts(9), createdAgo(time.Minute)),
				newPod("a-no-owner", readyFor(time.Second), restarts(9), createdAgo(time.Second)),
			},
		},
		{
			name: "recently ready first, before restarts and age",
			want: []*corev1.Pod{
				newPod("ready-1m", readyFor(time.Minute)),
				newPod("ready-1h", readyFor(time.Hour), createdAgo(400*day)),
				newPod("ready-10d", readyFor(10*day), restarts(8), createdAgo(10*day+time.Minute)),
			},
		},
		{
			name: "ready times in one log2 bucket tie, smaller UID first",
			want: []*corev1.Pod{
				// 110 s and 100 s in nanoseconds both have floor(log2) = 36.
				newPod("a-ready-110s", readyFor(110*time.Second)),
				newPod("b-ready-100s", readyFor(100*time.Second), restarts(4)),
			},
		},
		{
			name: "ready time is not compared when neither pod is ready",
			want: []*corev1.Pod{
				newPod("not-ready-since-300d-restarts-1", notReady(), readyFor(300*day), restarts(1)),
				newPod("not-ready-since-1m", notReady(), readyFor(time.Minute)),
			},
		},
		{
			name: "more restarts first, regular before sidecar",
			want: []*corev1.Pod{
				newPod("restarts-3", restarts(3), createdAgo(400*day)),
				newPod("restarts-1-sidecar-2", restarts(1), withSidecarRestarts(2), createdAgo(300*day)),
				newPod("restarts-1", restarts(1)),
				newPod("restarts-0", createdAgo(time.Minute)),
			},
		},
		{
			name: "newer first, empty creation time first",
			want: []*corev1.Pod{
				newPod("created-zero", func(p *corev1.Pod) { p.CreationTimestamp = metav1.Time{} }),
				newPod("created-1m", createdAgo(time.Minute)),
				newPod("created-1h", createdAgo(time.Hour)),
				newPod("created-10d", createdAgo(10*day)),
			},
		},
		{
			name: "creation times in one log2 bucket tie, smaller UID first",
			want: []*corev1.Pod{
				newPod("a-created-110s", createdAgo(110*time.Second)),
				newPod("b-created-100s", createdAgo(100*time.Second)),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := names(tt.want)
			reversed := slices.Clone(tt.want)
			slices.Reverse(reversed)
			half := len(tt.want) / 2
			rotated := append(slices.Clone(tt.want[half:]), tt.want[:half]...)
			for _, in := range [][]*corev1.Pod{reversed, rotated} {
				before := names(in)
				Sort(in, now)
				if got := names(in); !slices.Equal(got, want) {
					t.Errorf("Sort(%v)\n got %v\nwant %v", before, got, want)
				}
			}
		})
	}
}

func TestSortKeepsInputOrderOfEqualPods(t *testing.T) {
	pods := []*corev1.Pod{newPod("c"), newPod("a"), newPod("b")}
	for _, p := range pods {
		p.UID = "same"
	}
	Sort(pods, now)
	if got, want := names(pods), []string{"c", "a", "b"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want input order %v", got, want)
	}
}

func TestSortSmallInputs(t *testing.T) {
	Sort(nil, now)
	Sort([]*corev1.Pod{}, now)
	one := []*corev1.Pod{newPod("only", priority("x"))}
	Sort(one, now)
	if one[0].Name != "only" {
		t.Errorf("got %q", one[0].Name)
	}
}

func TestOrderPriorityAnnotation(t *testing.T) {
	const custom = "headroom.dev/evict-first"
	mk := func() []*corev1.Pod {
		return []*corev1.Pod{
			newPod("default-key-9", priority("9")),
			newPod("custom-key-3", annotate(custom, "3")),
			newPod("pending", phase(corev1.PodPending)),
		}
	}
	tests := []struct {
		order Order
		want  []string
	}{
		{Order{}, []string{"default-key-9", "pending", "custom-key-3"}},
		{Order{PriorityAnnotation: DefaultPriorityAnnotation}, []string{"default-key-9", "pending", "custom-key-3"}},
		{Order{PriorityAnnotation: custom}, []string{"custom-key-3", "pending", "default-key-9"}},
	}
	for _, tt := range tests {
		pods := mk()
		tt.order.Sort(pods, now)
		if got := names(pods); !slices.Equal(got, tt.want) {
			t.Errorf("%+v.Sort: got %v, want %v", tt.order, got, tt.want)
		}
	}
	if p, err := (Order{PriorityAnnotation: custom}).Priority(newPod("x", annotate(custom, "3"), priority("9"))); p != 3 || err != nil {
		t.Errorf("Priority with custom key = %d, %v; want 3, nil", p, err)
	}
}

func TestPriority(t *testing.T) {
	tests := []struct {
		value   *string
		want    int32
		wantErr error
	}{
		{value: nil, want: 0},
		{value: ptrTo("0"), want: 0},
		{value: ptrTo("5"), want: 5},
		{value: ptrTo("-5"), want: -5},
		{value: ptrTo("+5"), want: 5},
		{value: ptrTo("007"), want: 7},
		{value: ptrTo("2147483647"), want: 2147483647},
		{value: ptrTo("-2147483648"), want: -2147483648},
		{value: ptrTo("2147483648"), wantErr: strconv.ErrRange},
		{value: ptrTo("-2147483649"), wantErr: strconv.ErrRange},
		{value: ptrTo("99999999999999999999999"), wantErr: strconv.ErrRange},
		{value: ptrTo(""), wantErr: strconv.ErrSyntax},
		{value: ptrTo(" 5"), wantErr: strconv.ErrSyntax},
		{value: ptrTo("5 "), wantErr: strconv.ErrSyntax},
		{value: ptrTo("5\n"), wantErr: strconv.ErrSyntax},
		{value: ptrTo("high"), wantErr: strconv.ErrSyntax},
		{value: ptrTo("1e3"), wantErr: strconv.ErrSyntax},
		{value: ptrTo("0x10"), wantErr: strconv.ErrSyntax},
		{value: ptrTo("1_000"), wantErr: strconv.ErrSyntax},
		{value: ptrTo("5.0"), wantErr: strconv.ErrSyntax},
		{value: ptrTo("--5"), wantErr: strconv.ErrSyntax},
		{value: ptrTo("٣"), wantErr: strconv.ErrSyntax},
	}
	for _, tt := range tests {
		var opts []podOption
		desc := "<missing>"
		if tt.value != nil {
			opts = append(opts, priority(*tt.value))
			desc = strconv.Quote(*tt.value)
		}
		pod := newPod("web-1", opts...)
		got, err := Order{}.Priority(pod)
		if got != tt.want {
			t.Errorf("Priority(%s) = %d, want %d", desc, got, tt.want)
		}
		if tt.wantErr == nil {
			if err != nil {
				t.Errorf("Priority(%s) error = %v, want nil", desc, err)
			}
			continue
		}
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("Priority(%s) error = %v, want %v", desc, err, tt.wantErr)
			continue
		}
		for _, part := range []string{"ns/web-1", DefaultPriorityAnnotation, strconv.Quote(*tt.value)} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("Priority(%s) error %q does not name %s", desc, err, part)
			}
		}
		if p2, err2 := ParsePriority(pod, DefaultPriorityAnnotation); p2 != got || (err2 == nil) != (err == nil) {
			t.Errorf("ParsePriority(%s) = %d, %v; Order.Priority = %d, %v", desc, p2, err2, got, err)
		}
	}
}

func TestRanks(t *testing.T) {
	nonController := func(p *corev1.Pod) {
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs-1", UID: "rs-1",
		})
	}
	pods := []struct {
		pod  *corev1.Pod
		want int
	}{
		// node-a, rs-1: two active pods (one Pending), three inactive ones
		{newPod("a-rs1-running", ownedBy("rs-1")), 2},
		{newPod("a-rs1-pending", ownedBy("rs-1"), phase(corev1.PodPending), notReady()), 2},
		{newPod("a-rs1-succeeded", ownedBy("rs-1"), phase(corev1.PodSucceeded)), 2},
		{newPod("a-rs1-failed", ownedBy("rs-1"), phase(corev1.PodFailed)), 2},
		{newPod("a-rs1-deleting", ownedBy("rs-1"), deleting()), 2},
		// same owner, other node (with b-rs1-behind-other-ref below)
		{newPod("b-rs1-unknown", onNode("node-b"), ownedBy("rs-1"), phase(corev1.PodUnknown)), 2},
		// other owner, same node
		{newPod("a-rs2", ownedBy("rs-2")), 1},
		// unscheduled pods of one owner count together, as the ReplicaSet
		// controller counts them
		{newPod("unscheduled-rs1-1", onNode(""), ownedBy("rs-1"), phase(corev1.PodPending)), 2},
		{newPod("unscheduled-rs1-2", onNode(""), ownedBy("rs-1"), phase(corev1.PodPending)), 2},
		{newPod("unscheduled-rs2", onNode(""), ownedBy("rs-2"), phase(corev1.PodPending)), 1},
		// no controller owner
		{newPod("a-no-owner-1"), 0},
		{newPod("a-no-owner-2"), 0},
		{newPod("a-non-controller-ref", nonController), 0},
		// the controller reference counts, not the first reference
		{newPod("b-rs1-behind-other-ref", onNode("node-b"), nonController, func(p *corev1.Pod) {
			p.OwnerReferences[0].UID = "something-else"
		}, ownedBy("rs-1")), 2},
		{newPod("c-rs3-alone", onNode("node-c"), ownedBy("rs-3")), 1},
		{newPod("c-rs3-deleting", onNode("node-c"), ownedBy("rs-3"), deleting()), 1},
		// an owner is namespaced: pods of another namespace whose
		// ownerReference claims rs-3's UID are not its siblings
		{newPod("c-other-ns-claims-rs3-1", onNode("node-c"), ownedBy("rs-3"), inNamespace("other")), 2},
		{newPod("c-other-ns-claims-rs3-2", onNode("node-c"), ownedBy("rs-3"), inNamespace("other")), 2},
	}
	in := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		in[i] = p.pod
	}
	got := Ranks(in)
	if len(got) != len(in) {
		t.Fatalf("Ranks returned %d ranks for %d pods", len(got), len(in))
	}
	for i, p := range pods {
		if got[i] != p.want {
			t.Errorf("rank of %s = %d, want %d", p.pod.Name, got[i], p.want)
		}
	}
	if r := Ranks(nil); len(r) != 0 {
		t.Errorf("Ranks(nil) = %v", r)
	}
}

// TestUpstreamLogScaleTieBreakIsNotTransitive records a property of the
// ReplicaSet controller's comparator that Headroom inherits: two ready times
// (or creation times) that are exactly equal fall through to the next rule,
// while two unequal times in one log2 bucket are ordered by UID. With three
// such pods the comparator has a cycle, so no order satisfies it and the
// result of any sort depends on the input order. If this test fails, upstream
// changed the comparator and the package doc should be revisited.
func TestUpstreamLogScaleTieBreakIsNotTransitive(t *testing.T) {
	// UIDs: uid-a < uid-m < uid-z.
	a := newPod("a", readyFor(100*time.Second))
	z := newPod("z", readyFor(100*time.Second), restarts(1))
	m := newPod("m", readyFor(99*time.Second))
	pods := []*corev1.Pod{a, z, m}
	s := controller.ActivePodsWithRanks{Pods: pods, Rank: Ranks(pods), Now: metav1.NewTime(now)}
	if !s.Less(1, 0) || !s.Less(0, 2) || !s.Less(2, 1) {
		t.Errorf("want the cycle z < a (restarts), a < m (UID), m < z (UID); got z<a=%v a<m=%v m<z=%v",
			s.Less(1, 0), s.Less(0, 2), s.Less(2, 1))
	}
	// Without priorities Headroom's comparator is upstream's, cycle included,
	// and Sort still returns a deterministic permutation.
	o := Order{}.newSorter(slices.Clone(pods), now)
	for _, ij := range [][2]int{{1, 0}, {0, 2}, {2, 1}, {0, 1}, {2, 0}, {1, 2}} {
		if o.Less(ij[0], ij[1]) != s.Less(ij[0], ij[1]) {
			t.Errorf("Less(%d, %d) differs from upstream's", ij[0], ij[1])
		}
	}
	first := slices.Clone(pods)
	Sort(first, now)
	second := slices.Clone(pods)
	Sort(second, now)
	if !slices.Equal(first, second) || len(first) != 3 {
		t.Errorf("Sort is not deterministic: %v vs %v", names(first), names(second))
	}
}
