package relievenodepressure

import (
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

func TestMalformedPodPIDsCountsAsDefault(t *testing.T) {
	n1, n2 := pidNode("n1", 10000, 9700), spareNode("n2")
	pods := []*v1.Pod{
		testPod("garbled", "n1", annotate(pidstats.AnnotationPodPIDs, "lots"), restarts(2)),
		testPod("plain", "n1", pids(300), restarts(1)),
	}
	// defaultPodPIDs 600: garbled frees 600 (9100, 91 %), plain 300 more.
	e := newEnv(t, setup{args: RelieveNodePressureArgs{PIDs: &PIDsTrigger{DefaultPodPIDs: ptr.To[int64](600)}}},
		objects([]*v1.Node{n1, n2}, pods)...)
	if got, want := e.run(t, n1, n2), []string{"garbled", "plain"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if w := e.warningEvents(); len(w) != 1 || !strings.HasPrefix(w[0], "Warning "+ReasonMalformedPodPIDs+" ") {
		t.Fatalf("Warning Events %q, want one %s", w, ReasonMalformedPodPIDs)
	}
}

func TestGainIsWhatThePodHolds(t *testing.T) {
	// 9700 of 10000 used. The complete list says the hog holds 2000 and the
	// small pod 150; "idle" declares 5000 PIDs but is not listed, so it held
	// none at the sample: evicting it, first in delete order, frees nothing.
	// The small pod, next in the order, is planned and then pruned: the
	// hog alone takes the node to 7700, under the target of 9000.
	idle := testPod("idle", "n1", pids(5000), priority("9"))
	small := testPod("small", "n1", priority("5"))
	hog := testPod("hog", "n1")
	n1 := listed(pidNode("n1", 10000, 9700), map[*v1.Pod]int64{hog: 2000, small: 150})
	RegisterMetrics()
	before, pidEvictionsBefore := nodeCount(t, ResultRelieved), evictionCount(t, keyPIDs)
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{idle, small, hog})...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"hog"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if got := nodeCount(t, ResultRelieved) - before; got != 1 {
		t.Errorf("counted %v relieved nodes, want 1", got)
	}
	if got := evictionCount(t, keyPIDs) - pidEvictionsBefore; got != 1 {
		t.Errorf("counted %v evictions for PIDs, want 1", got)
	}
}

func TestUnlistedPodsOfAFullListHoldLessThanTheSmallestListed(t *testing.T) {
	// 32 listed pods of 200 PIDs fill the list; an unlisted pod declaring
	// 5000 held at most 200 at the sample.
	var pods []*v1.Pod
	usage := map[*v1.Pod]int64{}
	for i := range pidstats.MaxListedPods {
		p := testPod("listed-"+string(rune('a'+i%26))+string(rune('a'+i/26)), "n1", restarts(int32(i)))
		pods = append(pods, p)
		usage[p] = 200
	}
	unlisted := testPod("unlisted", "n1", pids(5000), priority("9"))
	pods = append(pods, unlisted)

	full := listed(pidNode("n1", 10000, 9700), usage)
	e := newEnv(t, setup{}, objects([]*v1.Node{full, spareNode("n2")}, pods)...)
	// 9700 − 200 (unlisted, at most) − 3 × 200 = 8900 ≤ 9000.
	got := e.run(t, full, spareNode("n2"))
	if len(got) != 4 || got[0] != "unlisted" {
		t.Fatalf("evicted %v, want unlisted and three listed pods", got)
	}

	// A workload of its own, without annotations, it ranks across workloads
	// by that bound, 200, but after the listed pods of 200: the list says it
	// held less than each of them, and the kubelet, which has its stats,
	// ranks it there. Not Ready, it leads the neutral order that breaks
	// other ties.
	alone := withOpts(unlisted, ownedBy("other"), notReady, func(p *v1.Pod) { delete(p.Annotations, "controller.alpha.kubernetes.io/delete-priority") })
	e = newEnv(t, setup{}, objects([]*v1.Node{full, spareNode("n2")}, append(slices.Clone(pods[:len(pods)-1]), alone))...)
	if got := e.run(t, full, spareNode("n2")); len(got) != 4 || slices.Contains(got, "unlisted") {
		t.Fatalf("evicted %v, want four listed pods", got)
	}

	// Without a list its declared PIDs count: it alone relieves the node.
	bare := pidNode("n1", 10000, 9700)
	e = newEnv(t, setup{}, objects([]*v1.Node{bare, spareNode("n2")}, pods)...)
	if got, want := e.run(t, bare, spareNode("n2")), []string{"unlisted"}; !equal(got, want) {
		t.Fatalf("without a list evicted %v, want %v", got, want)
	}
}

func TestMalformedPodListFallsBackToDeclaredPIDs(t *testing.T) {
	n1 := pidNode("n1", 10000, 9700)
	n1.Annotations[pidstats.AnnotationPIDPods] = "not a list"
	e := newEnv(t, setup{}, objects([]*v1.Node{n1, spareNode("n2")}, []*v1.Pod{testPod("a", "n1", pids(1000))})...)
	if got, want := e.run(t, n1, spareNode("n2")), []string{"a"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	if w := e.warningEvents(); len(w) != 1 || !strings.HasPrefix(w[0], "Warning "+ReasonMalformedPIDPods+" ") || !strings.Contains(w[0], pidstats.AnnotationPIDPods) {
		t.Fatalf("Warning Events %q, want one %s naming the annotation", w, ReasonMalformedPIDPods)
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 10 * gib: "10Gi", 9728 * mib: "9728Mi", 107374182: "102.4Mi", 1: "0.0Mi"} {
		if got := formatBytes(n); got != want {
			t.Errorf("formatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}
