package memstats

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	st "k8s.io/kubernetes/pkg/scheduler/testing"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

const gi = int64(1) << 30

func uid(n int) types.UID { return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", n)) }

// pod is a running pod bound and started before the sample of now−30s
// unless placed says otherwise.
func pod(n int, request string, placed time.Time) *corev1.Pod {
	w := st.MakePod().Namespace("ns").Name(fmt.Sprintf("p%d", n)).UID(string(uid(n))).Phase(corev1.PodRunning)
	if request != "" {
		w = w.Req(map[corev1.ResourceName]string{corev1.ResourceMemory: request})
	} else {
		w = w.Container("c")
	}
	p := w.Obj()
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(placed)}}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(placed.Add(time.Second))}}}}
	return p
}

func annotations(used, at, pods string) map[string]string {
	a := map[string]string{AnnotationUsed: used, AnnotationSampledAt: at}
	if pods != "-" {
		a[AnnotationPods] = pods
	}
	return a
}

func TestParseNode(t *testing.T) {
	at := sample.FormatTime(now.Add(-30 * time.Second))
	tests := []struct {
		name        string
		a           map[string]string
		maxAge      time.Duration
		wantUsed    int64
		wantErr     func(error) bool
		wantPodsErr bool
		wantPods    int
	}{
		{name: "absent", a: map[string]string{}, wantErr: func(err error) bool { return errors.Is(err, ErrNoStats) }},
		{name: "pods alone belong to no sample", a: map[string]string{AnnotationPods: ""}, wantErr: func(err error) bool { return errors.Is(err, ErrNoStats) }},
		{name: "used only", a: map[string]string{AnnotationUsed: "1"}, wantErr: sample.IsInvalid},
		{name: "negative", a: annotations("-1", at, "-"), wantErr: sample.IsInvalid},
		{name: "above 1 PiB", a: annotations("1125899906842625", at, "-"), wantErr: sample.IsInvalid},
		{name: "not a time", a: annotations("1", "yesterday", "-"), wantErr: sample.IsInvalid},
		{name: "from the future", a: annotations("1", sample.FormatTime(now.Add(time.Hour)), "-"), wantErr: sample.IsInvalid},
		{name: "stale", a: annotations("7", at, "-"), maxAge: 10 * time.Second, wantUsed: 7, wantErr: sample.IsStale},
		{name: "1 PiB", a: annotations("1125899906842624", at, "-"), wantUsed: MaxBytes},
		{name: "malformed pods keep the node's figure", a: annotations("5", at, "x=1"), wantUsed: 5, wantPodsErr: true},
		{name: "pods", a: annotations("5", at, string(uid(1))+"=3,"+string(uid(2))+"=2"), wantUsed: 5, wantPods: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := ParseNode(tt.a, now, tt.maxAge)
			if tt.wantErr != nil {
				if err == nil || !tt.wantErr(err) {
					t.Fatalf("err = %v, want the kind the test names", err)
				}
				if !IsUnknown(err) {
					t.Errorf("IsUnknown(%v) = false", err)
				}
			} else if err != nil {
				t.Fatalf("err = %v", err)
			}
			if s.Used != tt.wantUsed || s.Pods.Len() != tt.wantPods || (s.Pods.Err() != nil) != tt.wantPodsErr {
				t.Errorf("got used %d, %d pods, pods err %v", s.Used, s.Pods.Len(), s.Pods.Err())
			}
		})
	}
}

func TestAnnotationsRoundTrip(t *testing.T) {
	s := NodeStats{Used: 3 * gi, SampledAt: now.Truncate(time.Second), Pods: PodListFormat.New([]sample.PodFigure{{UID: uid(2), Value: gi}, {UID: uid(1), Value: 2 * gi}})}
	got, err := ParseNode(s.Annotations(), now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.Used != s.Used || !got.SampledAt.Equal(s.SampledAt) || got.Pods.String() != s.Pods.String() {
		t.Errorf("round trip: got %+v, want %+v", got, s)
	}
	if want := string(uid(1)) + "=2147483648," + string(uid(2)) + "=1073741824"; got.Pods.String() != want {
		t.Errorf("pods = %q, want largest first %q", got.Pods.String(), want)
	}
	// Nothing measured: no list is written, so readers do not take every
	// pod for one that held nothing.
	if _, ok := (NodeStats{Used: 1, SampledAt: now}).Annotations()[AnnotationPods]; ok {
		t.Error("an unmeasured list was written")
	}
}

func TestEstimate(t *testing.T) {
	sampled := now.Add(-30 * time.Second)
	before, after := sampled.Add(-time.Minute), sampled.Add(10*time.Second)
	list := PodListFormat.New([]sample.PodFigure{{UID: uid(1), Value: 3 * gi}, {UID: uid(2), Value: gi}})
	s := NodeStats{Used: 6 * gi, SampledAt: sampled, Pods: list}
	stay := pod(1, "1Gi", before)
	terminating := pod(2, "1Gi", before)
	terminating.DeletionTimestamp = &metav1.Time{Time: now}
	newcomer := pod(3, "2Gi", after)
	bestEffortNewcomer := pod(4, "", after)
	unlistedOld := pod(5, "4Gi", before) // in the sample, complete list: held ~0
	tests := []struct {
		name        string
		pods        []*corev1.Pod
		held, leave int64
	}{
		{name: "the sample as it is", pods: []*corev1.Pod{stay, terminating}, held: 6 * gi, leave: gi},
		{name: "a listed pod that left is subtracted", pods: []*corev1.Pod{stay}, held: 5 * gi},
		{name: "a pod placed after the sample adds its request", pods: []*corev1.Pod{stay, terminating, newcomer}, held: 8 * gi, leave: gi},
		{name: "without a request it adds the minimum", pods: []*corev1.Pod{stay, terminating, bestEffortNewcomer}, held: 6*gi + 512<<20, leave: gi},
		{name: "an unlisted pod of the sample adds nothing", pods: []*corev1.Pod{stay, terminating, unlistedOld}, held: 6 * gi, leave: gi},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := Estimate(s, tt.pods, func(p *corev1.Pod) int64 { return Declared(p, 512<<20) })
			if u.Held != tt.held || u.Leaving != tt.leave {
				t.Errorf("Estimate = %+v, want held %d leaving %d", u, tt.held, tt.leave)
			}
		})
	}
}

func TestPodHeld(t *testing.T) {
	sampled := now.Add(-30 * time.Second)
	before := sampled.Add(-time.Minute)
	var full []sample.PodFigure
	for i := range MaxListedPods {
		full = append(full, sample.PodFigure{UID: uid(100 + i), Value: gi + int64(i)})
	}
	tests := []struct {
		name     string
		list     sample.PodList
		pod      *corev1.Pod
		want     int64
		measured bool
	}{
		{name: "listed", list: PodListFormat.New([]sample.PodFigure{{UID: uid(1), Value: 7}}), pod: pod(1, "1Gi", before), want: 7, measured: true},
		{name: "complete list, unlisted", list: PodListFormat.New([]sample.PodFigure{{UID: uid(1), Value: 7}}), pod: pod(2, "1Gi", before), want: 0},
		{name: "full list, unlisted: at most the smallest", list: PodListFormat.New(full), pod: pod(2, "4Gi", before), want: gi},
		{name: "no list: declared", pod: pod(2, "4Gi", before), want: 4 * gi},
		{name: "placed after: declared", list: PodListFormat.New(full), pod: pod(2, "4Gi", sampled.Add(time.Minute)), want: 4 * gi},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NodeStats{Used: 10 * gi, SampledAt: sampled, Pods: tt.list}
			got, measured := s.PodHeld(tt.pod, Declared(tt.pod, 0))
			if got != tt.want || measured != tt.measured {
				t.Errorf("PodHeld = %d, %v; want %d, %v", got, measured, tt.want, tt.measured)
			}
		})
	}
}

func TestPodRequestIsBounded(t *testing.T) {
	p := pod(1, "8Ei", now)
	if got := PodRequest(p); got != MaxBytes {
		t.Errorf("PodRequest = %d, want MaxBytes", got)
	}
}

func FuzzParseNode(f *testing.F) {
	at := sample.FormatTime(now)
	f.Add("1073741824", at, string(uid(1))+"=5,"+string(uid(2))+"=4")
	f.Add("0", at, "")
	f.Add("1125899906842625", "x", "=")
	f.Add("01", at, string(uid(1))+"=01")
	f.Fuzz(func(t *testing.T, used, at, pods string) {
		s, err := ParseNode(annotations(used, at, pods), now, 0)
		if err != nil {
			if !IsUnknown(err) {
				t.Fatalf("error %v is not one IsUnknown knows", err)
			}
			if len(err.Error()) > 1024 {
				t.Fatalf("error of %d bytes: an Event note would be refused", len(err.Error()))
			}
			return
		}
		if s.Used < 0 || s.Used > MaxBytes || s.Pods.Total() > MaxListedPods*MaxBytes {
			t.Fatalf("figures out of bounds: %+v", s)
		}
		if e := s.Pods.Err(); e != nil && len(e.Error()) > 1024 {
			t.Fatalf("pods error of %d bytes", len(e.Error()))
		}
		again, err := ParseNode(s.Annotations(), now, 0)
		if err != nil || again.Used != s.Used || again.Pods.String() != s.Pods.String() {
			t.Fatalf("round trip of %+v: %+v, %v", s, again, err)
		}
		if strings.Count(s.Pods.String(), ",") >= MaxListedPods {
			t.Fatalf("more than %d pods", MaxListedPods)
		}
	})
}

// A node with swap publishes its swap total and its pods' swap with the
// memory sample; malformed swap annotations are ignored with SwapErr (the
// node's memory sample stays usable, the model counts no swap), and a swap
// list without the total belongs to no sample.
func TestSwapAnnotations(t *testing.T) {
	s := NodeStats{Used: 3 * gi, SampledAt: now.Truncate(time.Second), SwapTotal: 2 * gi,
		SwapPods: SwapPodListFormat.New([]sample.PodFigure{{UID: uid(1), Value: gi}})}
	got, err := ParseNode(s.Annotations(), now, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got.SwapTotal != 2*gi || got.SwapErr != nil || got.PodSwap(pod(1, "", now)) != gi || got.PodSwap(pod(2, "", now)) != 0 {
		t.Errorf("round trip: swap total %d, err %v, pod 1 %d", got.SwapTotal, got.SwapErr, got.PodSwap(pod(1, "", now)))
	}
	if _, ok := (NodeStats{Used: 1, SampledAt: now, SwapPods: s.SwapPods}).Annotations()[AnnotationSwapPods]; ok {
		t.Error("a swap list was written for a node without swap")
	}
	at := sample.FormatTime(now.Add(-30 * time.Second))
	for name, c := range map[string]struct {
		total, pods string
		wantTotal   int64
		wantErr     bool
	}{
		"no swap":                {total: "-", pods: "-"},
		"list without total":     {total: "-", pods: string(uid(1)) + "=5"},
		"total, no list":         {total: "7", pods: "-", wantTotal: 7},
		"malformed total":        {total: "lots", pods: "-", wantErr: true},
		"total beyond 1 PiB":     {total: "1125899906842625", pods: "-", wantErr: true},
		"malformed list":         {total: "7", pods: "x=1", wantTotal: 7, wantErr: true},
		"list not largest first": {total: "7", pods: string(uid(1)) + "=1," + string(uid(2)) + "=2", wantTotal: 7, wantErr: true},
	} {
		a := annotations("5", at, "-")
		if c.total != "-" {
			a[AnnotationSwapTotal] = c.total
		}
		if c.pods != "-" {
			a[AnnotationSwapPods] = c.pods
		}
		got, err := ParseNode(a, now, 0)
		if err != nil || got.Used != 5 {
			t.Errorf("%s: the memory sample is unusable (%v)", name, err)
		}
		if got.SwapTotal != c.wantTotal || (got.SwapErr != nil) != c.wantErr || got.PodSwap(pod(1, "", now)) != 0 && c.wantErr {
			t.Errorf("%s: swap total %d, err %v; want %d, error %v", name, got.SwapTotal, got.SwapErr, c.wantTotal, c.wantErr)
		}
	}
}

// FuzzParseSwap: whatever the swap annotations hold, ParseNode never
// panics, never loses the memory sample over them, and what it accepts
// stays within bounds.
func FuzzParseSwap(f *testing.F) {
	f.Add("1073741824", string(uid(1))+"=5")
	f.Add("x", "")
	f.Add("-1", "=")
	f.Fuzz(func(t *testing.T, total, pods string) {
		a := annotations("5", sample.FormatTime(now), "-")
		a[AnnotationSwapTotal], a[AnnotationSwapPods] = total, pods
		s, err := ParseNode(a, now, 0)
		if err != nil || s.Used != 5 {
			t.Fatalf("memory sample lost: %v", err)
		}
		if s.SwapTotal < 0 || s.SwapTotal > MaxBytes || s.SwapPods.Total() < 0 {
			t.Fatalf("out of bounds: %d, %d", s.SwapTotal, s.SwapPods.Total())
		}
		if s.SwapErr == nil && s.Validate() != nil {
			t.Fatalf("accepted what the agent may not write: %v", s.Validate())
		}
	})
}
