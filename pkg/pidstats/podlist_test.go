package pidstats

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// uid returns a canonical pod UID ending in n.
func uid(n int) types.UID { return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", n)) }

func withUID(u types.UID) podOpt { return func(p *corev1.Pod) { p.UID = u } }

func terminating() podOpt {
	return func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: now} }
}

func TestParsePodList(t *testing.T) {
	long := make([]string, MaxListedPods+1)
	for i := range long {
		long[i] = string(uid(i)) + "=1"
	}
	tests := []struct {
		name, v string
		want    []PodUsage
		wantErr string
	}{
		{name: "empty", v: ""},
		{name: "one", v: string(uid(1)) + "=1200", want: []PodUsage{{UID: uid(1), Value: 1200}}},
		{name: "largest first, ties", v: string(uid(2)) + "=7," + string(uid(1)) + "=7," + string(uid(3)) + "=0",
			want: []PodUsage{{UID: uid(2), Value: 7}, {UID: uid(1), Value: 7}, {UID: uid(3), Value: 0}}},
		{name: "max figure", v: string(uid(1)) + "=4194304", want: []PodUsage{{UID: uid(1), Value: MaxPodPIDs}}},
		{name: "at the entry limit", v: strings.Join(long[:MaxListedPods], ","), want: nil},
		{name: "over the figure limit", v: string(uid(1)) + "=4194305", wantErr: "not an integer in [0, 4194304]"},
		{name: "eight digits", v: string(uid(1)) + "=10000000", wantErr: "not an integer"},
		{name: "sign", v: string(uid(1)) + "=+5", wantErr: "not an integer"},
		{name: "negative", v: string(uid(1)) + "=-5", wantErr: "not an integer"},
		{name: "leading zero", v: string(uid(1)) + "=05", wantErr: "not an integer"},
		{name: "no figure", v: string(uid(1)) + "=", wantErr: "not an integer"},
		{name: "no equals", v: string(uid(1)), wantErr: "is not <pod UID>=<PIDs>"},
		{name: "uppercase UID", v: "0000000A-0000-4000-8000-00000000000B=1", wantErr: "not a pod UID"},
		{name: "short UID", v: "abc=1", wantErr: "not a pod UID"},
		{name: "UID with braces", v: "{" + string(uid(1))[1:] + "=1", wantErr: "not a pod UID"},
		{name: "ascending", v: string(uid(1)) + "=1," + string(uid(2)) + "=2", wantErr: "must be largest first"},
		{name: "duplicate", v: string(uid(1)) + "=2," + string(uid(1)) + "=1", wantErr: "listed twice"},
		{name: "trailing comma", v: string(uid(1)) + "=2,", wantErr: "entry 2 \"\" is not"},
		{name: "space", v: string(uid(1)) + "=2, " + string(uid(2)) + "=1", wantErr: "not a pod UID"},
		{name: "too many", v: strings.Join(long, ","), wantErr: "more than 32 pods"},
		{name: "too long", v: strings.Repeat("x", MaxPodListBytes+1), wantErr: "more than the limit of 1439"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := ParsePodList(tt.v)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !IsInvalid(err) {
					t.Fatalf("ParsePodList(%q) error %v, want an *InvalidError containing %q", tt.v, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), AnnotationPIDPods) || len(err.Error()) > 300 {
					t.Errorf("error %q does not name the annotation or is not bounded", err)
				}
				if l.Len() != 0 {
					t.Errorf("invalid list has %d entries", l.Len())
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePodList(%q): %v", tt.v, err)
			}
			if tt.want != nil && fmt.Sprint(l.Entries()) != fmt.Sprint(tt.want) {
				t.Errorf("entries %v, want %v", l.Entries(), tt.want)
			}
			if l.String() != tt.v {
				t.Errorf("String() = %q, want the input %q back", l.String(), tt.v)
			}
			for _, e := range l.Entries() {
				if n, ok := l.Lookup(e.UID); !ok || n != e.Value {
					t.Errorf("Lookup(%s) = %d, %v; want %d", e.UID, n, ok, e.Value)
				}
			}
			if _, ok := l.Lookup(uid(999)); ok {
				t.Error("Lookup of an unlisted pod succeeded")
			}
		})
	}
}

func TestMaxPodListBytes(t *testing.T) {
	// The longest list ParsePodList accepts is the longest NewPodList writes.
	usage := make([]PodUsage, 100)
	for i := range usage {
		usage[i] = PodUsage{UID: uid(i), Value: MaxPodPIDs}
	}
	l := NewPodList(usage)
	if got := len(l.String()); got != MaxPodListBytes || MaxPodListBytes != 1439 {
		t.Fatalf("longest list is %d bytes, MaxPodListBytes %d, want both 1439", got, MaxPodListBytes)
	}
	if _, err := ParsePodList(l.String()); err != nil {
		t.Fatalf("the longest list does not parse: %v", err)
	}
}

func TestNewPodList(t *testing.T) {
	var usage []PodUsage
	for i := range 40 {
		usage = append(usage, PodUsage{UID: uid(i), Value: int64(i % 20)})
	}
	usage = append(usage, PodUsage{UID: "", Value: 1000}, PodUsage{UID: uid(99), Value: 1 << 40}, PodUsage{UID: uid(98), Value: -3})
	l := NewPodList(usage)
	e := l.Entries()
	if len(e) != MaxListedPods {
		t.Fatalf("%d entries, want %d", len(e), MaxListedPods)
	}
	if e[0] != (PodUsage{UID: uid(99), Value: MaxPodPIDs}) {
		t.Errorf("first entry %v, want the clamped giant", e[0])
	}
	for i := 1; i < len(e); i++ {
		if e[i].Value > e[i-1].Value || (e[i].Value == e[i-1].Value && e[i].UID < e[i-1].UID) {
			t.Fatalf("entries not largest first, ties by UID: %v", e)
		}
	}
	// After the giant come 19, 19, 18, 18, … 5, 5, 4: a
	// pod not listed held no more PIDs than every listed one.
	if last := e[len(e)-1].Value; last != 4 {
		t.Errorf("smallest listed figure %d, want 4", last)
	}
	back, err := ParsePodList(l.String())
	if err != nil || back.String() != l.String() {
		t.Fatalf("round trip: %v, %q", err, back.String())
	}
	if NewPodList(nil).String() != "" || NewPodList(nil).Len() != 0 {
		t.Error("empty list is not empty")
	}
}

func TestParseNodeKeepsTotalsWhenPodListIsMalformed(t *testing.T) {
	a := NodeStats{Capacity: 32768, Used: 5000, SampledAt: now}.Annotations()
	a[AnnotationPIDPods] = "garbage"
	s, err := ParseNode(a, now, time.Minute)
	if err != nil {
		t.Fatalf("ParseNode: %v", err)
	}
	if s.Used != 5000 || s.Pods.Len() != 0 || !IsInvalid(s.Pods.Err()) {
		t.Fatalf("stats %+v, pods error %v: want the totals, no pods and an *InvalidError", s, s.Pods.Err())
	}
	a[AnnotationPIDPods] = string(uid(1)) + "=300"
	s, err = ParseNode(a, now, time.Minute)
	if err != nil || s.Pods.Err() != nil || s.Pods.String() != a[AnnotationPIDPods] {
		t.Fatalf("ParseNode: %v, pods %q (%v)", err, s.Pods, s.Pods.Err())
	}
}

func TestEstimateSubtractsListedPodsThatLeft(t *testing.T) {
	list := NewPodList([]PodUsage{{UID: uid(1), Value: 3000}, {UID: uid(2), Value: 800}, {UID: uid(3), Value: 200}, {UID: uid(4), Value: 50}})
	stats := NodeStats{Capacity: 32768, Used: 5000, SampledAt: now, Pods: list}
	before := scheduledAt(now.Add(-time.Hour))
	after := scheduledAt(now.Add(time.Minute))
	tests := []struct {
		name string
		pods []*corev1.Pod
		want int64
	}{
		{"all still there", []*corev1.Pod{
			mkPod("a", withUID(uid(1)), before), mkPod("b", withUID(uid(2)), before),
			mkPod("c", withUID(uid(3)), before), mkPod("d", withUID(uid(4)), before)}, 5000},
		{"two left the node", []*corev1.Pod{
			mkPod("a", withUID(uid(1)), before), mkPod("d", withUID(uid(4)), before)}, 5000 - 800 - 200},
		// A terminating pod's processes run until the kubelet has stopped
		// them: its PIDs are still held (Settled drops them, below).
		{"terminal counts as gone, terminating still holds", []*corev1.Pod{
			mkPod("a", withUID(uid(1)), before, terminating()), mkPod("b", withUID(uid(2)), before, phase(corev1.PodFailed)),
			mkPod("c", withUID(uid(3)), before), mkPod("d", withUID(uid(4)), before)}, 5000 - 800},
		{"unlisted pods change nothing, new pods add", []*corev1.Pod{
			mkPod("a", withUID(uid(1)), before), mkPod("b", withUID(uid(2)), before),
			mkPod("c", withUID(uid(3)), before), mkPod("d", withUID(uid(4)), before),
			mkPod("old", withUID(uid(50)), before), mkPod("new", withUID(uid(51)), after, withPIDs("70"))}, 5000 + 70},
		{"everyone left", nil, 5000 - 4050},
		{"nil pods are skipped", []*corev1.Pod{nil, mkPod("a", withUID(uid(1)), before)}, 5000 - 1050},
		// A listed pod was measured: it never adds its declared PIDs too,
		// even when it looks placed after the sample (bound in the same
		// second, or no PodScheduled condition).
		{"listed pods bound in the sample's second count once", []*corev1.Pod{
			mkPod("a", withUID(uid(1)), scheduledAt(now.Truncate(time.Second)), withPIDs("900")), mkPod("b", withUID(uid(2)), before),
			mkPod("c", withUID(uid(3)), after), mkPod("d", withUID(uid(4)))}, 5000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := EstimateUsed(stats, tt.pods, 100); got != tt.want {
				t.Errorf("EstimateUsed = %d, want %d", got, tt.want)
			}
			seq := func(yield func(*corev1.Pod) bool) {
				for _, p := range tt.pods {
					if !yield(p) {
						return
					}
				}
			}
			if got := EstimateUsedSeq(stats, seq, 100); got != tt.want {
				t.Errorf("EstimateUsedSeq = %d, want %d", got, tt.want)
			}
		})
	}
	// The listed figures exceed the reported use (a sample taken as pods
	// started): the estimate stops at 0.
	small := NodeStats{Capacity: 32768, Used: 1000, SampledAt: now, Pods: list}
	if got := EstimateUsed(small, nil, 100); got != 0 {
		t.Errorf("EstimateUsed with more listed than used = %d, want 0", got)
	}
	// Reported 1000, a listed pod of 300 bound in the sample's second is
	// still there: the estimate is what was reported.
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	one := NewPodList([]PodUsage{{UID: uid(1), Value: 300}})
	sameSecond := NodeStats{Capacity: 10000, Used: 1000, SampledAt: at.Add(500 * time.Millisecond), Pods: one}
	if got := EstimateUsed(sameSecond, []*corev1.Pod{mkPod("a", withUID(uid(1)), scheduledAt(at))}, 100); got != 1000 {
		t.Errorf("EstimateUsed with a listed pod bound in the sample's second = %d, want 1000", got)
	}
	// Without a list, nothing is subtracted.
	if got := EstimateUsed(NodeStats{Capacity: 32768, Used: 5000, SampledAt: now}, nil, 100); got != 5000 {
		t.Errorf("EstimateUsed without a list = %d, want 5000", got)
	}
}

func TestCompleteAndSmallest(t *testing.T) {
	full := make([]PodUsage, MaxListedPods)
	for i := range full {
		full[i] = PodUsage{UID: uid(i), Value: int64(1000 - i)}
	}
	fullList, err := ParsePodList(NewPodList(full).String())
	if err != nil {
		t.Fatal(err)
	}
	empty, err := ParsePodList("")
	if err != nil {
		t.Fatal(err)
	}
	short, err := ParsePodList(string(uid(1)) + "=300," + string(uid(2)) + "=7")
	if err != nil {
		t.Fatal(err)
	}
	at := now.Format(time.RFC3339)
	malformed, _ := ParseNode(map[string]string{AnnotationCapacity: "100", AnnotationUsed: "5", AnnotationSampledAt: at,
		AnnotationPIDPods: "nonsense"}, now, 0)
	for _, tt := range []struct {
		name     string
		l        PodList
		complete bool
		smallest int64
		listed   bool
	}{
		{"no annotation", PodList{}, false, 0, false},
		{"malformed", malformed.Pods, false, 0, false},
		{"written empty: the agent measured no pod", empty, true, 0, false},
		{"fewer than the bound", short, true, 7, true},
		{"at the bound", fullList, false, 1000 - MaxListedPods + 1, true},
	} {
		if got := tt.l.Complete(); got != tt.complete {
			t.Errorf("%s: Complete() = %v, want %v", tt.name, got, tt.complete)
		}
		if got, ok := tt.l.Smallest(); got != tt.smallest || ok != tt.listed {
			t.Errorf("%s: Smallest() = %d, %v, want %d, %v", tt.name, got, ok, tt.smallest, tt.listed)
		}
	}
}

// Terminating pods hold their PIDs until they are gone (Held) and are
// on their way out (Leaving): the scheduler counts them, a descheduler plans
// from Settled.
func TestTerminatingPodsHoldUntilGone(t *testing.T) {
	list, err := ParsePodList(string(uid(1)) + "=3000," + string(uid(2)) + "=800")
	if err != nil {
		t.Fatal(err)
	}
	stats := NodeStats{Capacity: 10000, Used: 5000, SampledAt: now.Add(-time.Minute), Pods: list}
	before, after := scheduledAt(now.Add(-time.Hour)), scheduledAt(now)
	pods := []*corev1.Pod{
		mkPod("listed-leaving", withUID(uid(1)), before, terminating()),
		mkPod("listed", withUID(uid(2)), before),
		mkPod("new", after, withPIDs("50")),
		mkPod("new-leaving", after, withPIDs("70"), terminating()),
		mkPod("new-done", after, withPIDs("90"), phase(corev1.PodSucceeded)),
	}
	got := Estimate(stats, pods, 100)
	if want := (Usage{Held: 5000 + 50 + 70, Leaving: 3000 + 70}); got != want {
		t.Errorf("Estimate = %+v, want %+v", got, want)
	}
	if got.Settled() != 5000-3000+50 {
		t.Errorf("Settled = %d, want %d", got.Settled(), 5000-3000+50)
	}
	if got := (Usage{Held: 5, Leaving: 9}).Settled(); got != 0 {
		t.Errorf("Settled of more leaving than held = %d, want 0", got)
	}
}

// A pod bound before the sample whose containers had not started then
// held nothing the sample saw: it counts as placed after it.
func TestPodsNotStartedAtTheSampleCount(t *testing.T) {
	stats := NodeStats{Capacity: 10000, Used: 1000, SampledAt: now}
	before := scheduledAt(now.Add(-time.Minute))
	creating := func(p *corev1.Pod) {
		p.Status.Phase = corev1.PodPending
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
	}
	startedAt := func(at time.Time) podOpt {
		return func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodRunning
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(at)}}}}
		}
	}
	pods := []*corev1.Pod{
		mkPod("creating", before, withPIDs("40"), creating),
		mkPod("started-after", before, withPIDs("30"), startedAt(now.Add(2*time.Second))),
		mkPod("started-before", before, withPIDs("20"), startedAt(now.Add(-30*time.Second))),
	}
	if got := EstimateUsed(stats, pods, 100); got != 1000+40+30 {
		t.Errorf("EstimateUsed = %d, want %d: the two pods not started at the sample add their PIDs", got, 1000+40+30)
	}
}

func TestFloor(t *testing.T) {
	for _, tt := range []struct {
		f           Floor
		alloc, want int64
		free, need  int64
		fits        bool
	}{
		{DefaultFloor, 100000, 5000, 6000, 1000, true},
		{DefaultFloor, 100000, 5000, 6000, 1001, false},
		{DefaultFloor, 1000, 512, 612, 100, true},
		{DefaultFloor, 1000, 512, 611, 100, false},
		{Floor{MinFreePercent: 100}, 1<<62 + 99, 1<<62 + 99, 1<<62 + 99, 0, true},
		{Floor{MinFreePIDs: -5, MinFreePercent: 200}, 300, 300, 300, 1, false},
		{Floor{}, -7, 0, 0, 0, true},
	} {
		if got := tt.f.Of(tt.alloc); got != tt.want {
			t.Errorf("%+v.Of(%d) = %d, want %d", tt.f, tt.alloc, got, tt.want)
		}
		if got := tt.f.Fits(tt.free, tt.alloc, tt.need); got != tt.fits {
			t.Errorf("%+v.Fits(free %d, alloc %d, need %d) = %v, want %v", tt.f, tt.free, tt.alloc, tt.need, got, tt.fits)
		}
	}
}
