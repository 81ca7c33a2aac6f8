package pidstats

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

type podOpt func(*corev1.Pod)

func withPIDs(v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[AnnotationPodPIDs] = v
	}
}

func scheduledAt(t time.Time) podOpt {
	return func(p *corev1.Pod) {
		p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(t),
		})
	}
}

func phase(ph corev1.PodPhase) podOpt {
	return func(p *corev1.Pod) { p.Status.Phase = ph }
}

func mkPod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func TestPodPIDs(t *testing.T) {
	tests := []struct {
		name    string
		pod     *corev1.Pod
		def     int64
		want    int64
		wantErr bool
	}{
		{name: "nil pod", pod: nil, def: 10, want: 10},
		{name: "absent", pod: mkPod("a"), def: 10, want: 10},
		{name: "declared", pod: mkPod("a", withPIDs("250")), def: 10, want: 250},
		{name: "declared zero", pod: mkPod("a", withPIDs("0")), def: 10, want: 0},
		{name: "declared max", pod: mkPod("a", withPIDs("4194304")), def: 10, want: MaxPodPIDs},
		{name: "above 2^22 fails closed", pod: mkPod("a", withPIDs("4194305")), def: 10, want: MaxPodPIDs, wantErr: true},
		{name: "max int64", pod: mkPod("a", withPIDs("9223372036854775807")), def: 10, want: MaxPodPIDs, wantErr: true},
		{name: "empty", pod: mkPod("a", withPIDs("")), def: 10, want: 10, wantErr: true},
		{name: "malformed", pod: mkPod("a", withPIDs("many")), def: 10, want: 10, wantErr: true},
		{name: "quantity suffix", pod: mkPod("a", withPIDs("1k")), def: 10, want: 10, wantErr: true},
		{name: "negative", pod: mkPod("a", withPIDs("-3")), def: 10, want: 10, wantErr: true},
		{name: "overflow", pod: mkPod("a", withPIDs("9223372036854775808")), def: 10, want: MaxPodPIDs, wantErr: true},
		{name: "negative overflow", pod: mkPod("a", withPIDs("-9223372036854775809")), def: 10, want: 10, wantErr: true},
		{name: "long value quoted short", pod: mkPod("a", withPIDs(strings.Repeat("9", 5000))), def: 10, want: MaxPodPIDs, wantErr: true},
		{name: "negative default counts as 0", pod: mkPod("a"), def: -7, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PodPIDs(tc.pod, tc.def)
			if got != tc.want {
				t.Errorf("PodPIDs = %d, want %d", got, tc.want)
			}
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				v := tc.pod.Annotations[AnnotationPodPIDs]
				if len(err.Error()) > 300 {
					t.Errorf("error of %d bytes: the value must be cut", len(err.Error()))
				}
				for _, s := range []string{"ns/a", AnnotationPodPIDs, sample.Quote(v)} {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %s", err, s)
					}
				}
			}
		})
	}
}

func TestPlacedAfterSample(t *testing.T) {
	sample := time.Date(2026, 5, 1, 12, 0, 0, 700_000_000, time.UTC) // 12:00:00.7
	tests := []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{name: "nil pod", pod: nil, want: false},
		{name: "assumed, no conditions", pod: mkPod("a"), want: true},
		{name: "PodScheduled=False (unschedulable before)", pod: func() *corev1.Pod {
			p := mkPod("a")
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
				LastTransitionTime: metav1.NewTime(sample.Add(-time.Hour))}}
			return p
		}(), want: true},
		{name: "bound a minute before", pod: mkPod("a", scheduledAt(sample.Add(-time.Minute))), want: false},
		{name: "bound one second before the truncated sample", pod: mkPod("a", scheduledAt(time.Date(2026, 5, 1, 11, 59, 59, 0, time.UTC))), want: false},
		// Same second as the sample: the condition cannot tell before from after.
		{name: "bound in the sample's second", pod: mkPod("a", scheduledAt(time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))), want: true},
		{name: "bound after", pod: mkPod("a", scheduledAt(sample.Add(5*time.Second))), want: true},
		{name: "other condition types ignored", pod: func() *corev1.Pod {
			p := mkPod("a", scheduledAt(sample.Add(-time.Minute)))
			p.Status.Conditions = append([]corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(sample.Add(time.Minute))}}, p.Status.Conditions...)
			return p
		}(), want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PlacedAfterSample(tc.pod, sample); got != tc.want {
				t.Errorf("PlacedAfterSample = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestEstimateUsed(t *testing.T) {
	forPressure, forPlacement := sample.ForPressure, sample.ForPlacement
	sample := now.Add(-20 * time.Second)
	stats := NodeStats{Capacity: 32768, Reserved: 1000, Used: 5000, SampledAt: sample}
	before := scheduledAt(sample.Add(-time.Minute))
	after := scheduledAt(sample.Add(5 * time.Second))

	tests := []struct {
		name  string
		stats NodeStats
		pods  []*corev1.Pod
		def   int64
		want  int64
	}{
		{name: "no pods", stats: stats, want: 5000},
		{name: "pods in the sample do not count", stats: stats, def: 100,
			pods: []*corev1.Pod{mkPod("a", before, withPIDs("300")), mkPod("b", before)}, want: 5000},
		{name: "bound after the sample count, declared or default", stats: stats, def: 100,
			pods: []*corev1.Pod{mkPod("a", after, withPIDs("300")), mkPod("b", after)}, want: 5400},
		{name: "assumed pods count", stats: stats, def: 100,
			pods: []*corev1.Pod{mkPod("a", withPIDs("50")), mkPod("b")}, want: 5150},
		{name: "terminal pods never count", stats: stats, def: 100,
			pods: []*corev1.Pod{mkPod("a", after, phase(corev1.PodSucceeded), withPIDs("300")), mkPod("b", phase(corev1.PodFailed))}, want: 5000},
		{name: "running and pending pods count", stats: stats, def: 100,
			pods: []*corev1.Pod{mkPod("a", after, phase(corev1.PodRunning)), mkPod("b", after, phase(corev1.PodPending))}, want: 5200},
		{name: "malformed annotation counts as default", stats: stats, def: 100,
			pods: []*corev1.Pod{mkPod("a", after, withPIDs("-1")), mkPod("b", after, withPIDs("x"))}, want: 5200},
		{name: "nil pods are skipped", stats: stats, def: 100, pods: []*corev1.Pod{nil, mkPod("a", after)}, want: 5100},
		{name: "mix", stats: stats, def: 100,
			pods: []*corev1.Pod{mkPod("a", before, withPIDs("9999")), mkPod("b", after, withPIDs("10")), mkPod("c"),
				mkPod("d", after, phase(corev1.PodFailed))}, want: 5110},
		{name: "saturates", stats: NodeStats{Capacity: math.MaxInt64, Used: math.MaxInt64 - 5, SampledAt: sample}, def: 100,
			pods: []*corev1.Pod{mkPod("a", after), mkPod("b", withPIDs("9223372036854775807"))}, want: math.MaxInt64},
		{name: "negative used counts as 0", stats: NodeStats{Used: -50, SampledAt: sample}, def: 100,
			pods: []*corev1.Pod{mkPod("a")}, want: 100},
		{name: "negative default counts as 0", stats: stats, def: -100,
			pods: []*corev1.Pod{mkPod("a", after)}, want: 5000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := EstimateUsed(tc.stats, tc.pods, tc.def); got != tc.want {
				t.Errorf("EstimateUsed = %d, want %d", got, tc.want)
			}
			seq := func(yield func(*corev1.Pod) bool) {
				for _, p := range tc.pods {
					if !yield(p) {
						return
					}
				}
			}
			if got := EstimateUsedSeq(tc.stats, seq, tc.def); got != tc.want {
				t.Errorf("EstimateUsedSeq = %d, want %d", got, tc.want)
			}
			var sum int64 = max(tc.stats.Used, 0)
			for _, p := range tc.pods {
				c, _ := PodContribution(p, tc.stats.SampledAt, tc.def)
				sum = SaturatingAdd(sum, c)
			}
			if sum != tc.want {
				t.Errorf("sum of PodContribution = %d, want %d", sum, tc.want)
			}
			// The trigger's basis counts no declaration: what the sample
			// measured (nothing is listed here).
			if got, want := EstimateOn(forPressure, tc.stats, tc.pods, tc.def).Held, max(tc.stats.Used, 0); got != want {
				t.Errorf("EstimateOn(ForPressure) = %d, want the sample's %d", got, want)
			}
			if got := EstimateOn(forPlacement, tc.stats, tc.pods, tc.def).Held; got != tc.want {
				t.Errorf("EstimateOn(ForPlacement) = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestPodContributionReportsMalformed(t *testing.T) {
	c, err := PodContribution(mkPod("bad", withPIDs("ten")), now, 64)
	if c != 64 || err == nil || !strings.Contains(err.Error(), "ns/bad") {
		t.Errorf("PodContribution = %d, %v; want 64 and an error naming the pod", c, err)
	}
	// A malformed pod that does not count must not raise a warning either.
	c, err = PodContribution(mkPod("bad", withPIDs("ten"), phase(corev1.PodSucceeded)), now, 64)
	if c != 0 || err != nil {
		t.Errorf("terminal pod: PodContribution = %d, %v; want 0, nil", c, err)
	}
}

// Filter runs for every node of every scheduling cycle: over a slice the
// estimate must not allocate, and over an iterator (which escapes to the
// heap unless the caller inlines it) no more than a constant per call,
// whatever the number of pods.
func TestEstimateDoesNotAllocate(t *testing.T) {
	stats := NodeStats{Capacity: 32768, Used: 5000, SampledAt: now}
	pods := []*corev1.Pod{
		mkPod("a", withPIDs("10")), mkPod("b", scheduledAt(now.Add(-time.Hour))),
		mkPod("c", scheduledAt(now.Add(time.Second))), mkPod("d", phase(corev1.PodFailed)),
	}
	seqAllocs := func(pods []*corev1.Pod) float64 {
		return testing.AllocsPerRun(100, func() {
			EstimateUsedSeq(stats, func(yield func(*corev1.Pod) bool) {
				for _, p := range pods {
					if !yield(p) {
						return
					}
				}
			}, 100)
		})
	}
	many := slices.Repeat(pods[1:2], 500)
	if few, lots := seqAllocs(pods), seqAllocs(many); few != lots || few > 2 {
		t.Errorf("EstimateUsedSeq allocates %.1f times over %d pods, %.1f over %d: want the same small constant", few, len(pods), lots, len(many))
	}
	var sink int64
	allocs := testing.AllocsPerRun(100, func() {
		sink = EstimateUsed(stats, pods, 100) + EstimateUsed(stats, pods, 100)
	})
	if allocs != 0 {
		t.Errorf("EstimateUsed allocates %.1f times per run", allocs)
	}
	if sink != 2*(5000+10+100) {
		t.Errorf("sink = %d", sink)
	}
}
