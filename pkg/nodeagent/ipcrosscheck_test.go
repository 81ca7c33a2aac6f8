package nodeagent

import (
	"context"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

type staticPods struct {
	pods []*corev1.Pod
	err  error
}

func (s *staticPods) List(context.Context) ([]*corev1.Pod, error) { return s.pods, s.err }
func (s *staticPods) Stop()                                       {}

// podsWithIPs returns n Running pods with an address, and one pod of each
// kind that holds none of the pod network's.
func podsWithIPs(n int) []*corev1.Pod {
	var pods []*corev1.Pod
	for i := range n {
		pods = append(pods, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("p", i)},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: fmt.Sprintf("10.0.0.%d", i+1)}}}})
	}
	return append(pods,
		&corev1.Pod{Spec: corev1.PodSpec{HostNetwork: true}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "192.0.2.1"}}}},
		&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodSucceeded, PodIPs: []corev1.PodIP{{IP: "10.0.1.1"}}}},
		&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodPending}},
	)
}

type recordedEvent struct{ eventType, reason, message string }

func TestPodIPCrossCheck(t *testing.T) {
	ctx := context.Background()
	var events []recordedEvent
	m := NewMetrics()
	lister := &staticPods{pods: podsWithIPs(20)}
	c := &PodIPCrossCheck{Pods: lister, Tolerance: DefaultIPCrossCheckTolerance, TolerancePercent: DefaultIPCrossCheckTolerancePercent,
		Samples: 3, Metrics: m, Event: func(_ context.Context, eventType, reason, message string) {
			events = append(events, recordedEvent{eventType, reason, message})
		}}

	// Within the tolerance (max(3, 5 % of 20)): agreed.
	if r := c.Check(ctx, "test", 17, nil); !r.Known || r.Pods != 20 || r.Tolerance != 3 || r.Reported || r.Used(17) != 17 {
		t.Fatalf("17 of 20: %+v", r)
	}
	// The source counts 12: reported on the third sample only.
	for i := 1; i <= 3; i++ {
		r := c.Check(ctx, "test", 12, nil)
		if r.Reported != (i == 3) || len(events) != map[bool]int{true: 1, false: 0}[i == 3] {
			t.Fatalf("sample %d: %+v, events %v", i, r, events)
		}
		if i == 3 && r.Used(14) != 22 {
			t.Fatalf("the published use must be raised by the 8 pods the source misses: %d", r.Used(14))
		}
	}
	if events[0].eventType != corev1.EventTypeWarning || events[0].reason != "PodIPFiguresDisagree" {
		t.Fatalf("event %+v", events[0])
	}
	if got := gaugeValue(t, m, "headroom_node_agent_pod_ip_cross_check_difference"); got != -8 {
		t.Fatalf("difference metric %v", got)
	}
	if got := gaugeValue(t, m, "headroom_node_agent_pod_ip_cross_check_disagreements_total"); got != 1 {
		t.Fatalf("disagreements metric %v", got)
	}
	// Still disagreeing: no second Event.
	c.Check(ctx, "test", 12, nil)
	if len(events) != 1 {
		t.Fatalf("events %v", events)
	}
	// Agreement again.
	if r := c.Check(ctx, "test", 20, nil); r.Reported || len(events) != 2 || events[1].reason != "PodIPFiguresAgree" {
		t.Fatalf("%+v, events %v", r, events)
	}
	// A source counting more is reported but believed.
	for range 3 {
		c.Check(ctx, "test", 30, nil)
	}
	if r := c.Check(ctx, "test", 30, nil); !r.Reported || r.Used(30) != 30 {
		t.Fatalf("%+v", r)
	}
	// A filter leaves pods out.
	c2 := &PodIPCrossCheck{Pods: lister, Samples: 1}
	if r := c2.Check(ctx, "test", 10, func(p *corev1.Pod) bool { return p.Name < "p18" }); r.Pods != 10 || r.Reported {
		t.Fatalf("filtered: %+v", r)
	}
	// Pods unknown: nothing compared, nothing raised.
	lister.err = ErrPodsNotSynced
	if r := c.Check(ctx, "test", 0, nil); r.Known || r.Used(0) != 0 {
		t.Fatalf("unknown pods: %+v", r)
	}
}

func TestCrossCheckTolerance(t *testing.T) {
	for _, tc := range []struct {
		pods, want int64
	}{{0, 3}, {60, 3}, {61, 4}, {110, 6}, {1 << 24, 838861}} {
		if got := crossCheckTolerance(tc.pods, 3, 5); got != tc.want {
			t.Errorf("crossCheckTolerance(%d) = %d, want %d", tc.pods, got, tc.want)
		}
	}
}
