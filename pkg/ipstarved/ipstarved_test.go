package ipstarved

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var t0 = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// Messages as the kubelet records them: the runtime's wrapping of each
// plugin's error.
const (
	hostLocalFull = `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "2a5c": plugin type="bridge" name="headroom" failed (add): failed to allocate for range 0: no IP addresses available in range set: 10.88.0.1-10.88.0.14`
	awsFull       = `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "2585": plugin type="aws-cni" name="aws-cni" failed (add): add cmd: failed to assign an IP address to container`
	ciliumFull    = `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "3948": plugin type="cilium-cni" failed (add): unable to allocate IP via local cilium agent: [POST /ipam][502] postIpamFailure  range is full`
	azureFull     = `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "ac1b": plugin type="azure-vnet" failed (add): IPAM Invoker Add failed with error: Failed to get IP address from CNS with error: AllocateIPConfig failed: not enough IPs available for 9c6a, waiting on Azure CNS to allocate more`
	calicoFull    = `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "77ab": plugin type="calico" failed (add): cannot allocate new block due to per host block limit`
	noLoopback    = `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "d37f": failed to find plugin "loopback" in path [/opt/cni/bin]`
	routeExists   = `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "3c8b": plugin type="calico" failed (add): error adding host side routes for interface: calid29a1cadef5`
)

func waitingPod() *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop", UID: "uid-web-1", CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))},
		Spec:       corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "app"}}},
		Status: corev1.PodStatus{
			Phase: corev1.PodPending,
			Conditions: []corev1.PodCondition{
				{Type: corev1.PodScheduled, Status: corev1.ConditionTrue},
				{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionFalse},
			},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}},
		},
	}
}

// sandboxEvent is the kubelet's Event of node-a on uid, as the API server
// holds it: created when first reported.
func sandboxEvent(uid types.UID, msg string, first, last time.Time) corev1.Event {
	return corev1.Event{
		ObjectMeta:          metav1.ObjectMeta{CreationTimestamp: metav1.NewTime(first)},
		InvolvedObject:      corev1.ObjectReference{Kind: "Pod", UID: uid},
		Reason:              ReasonFailedCreatePodSandBox,
		Message:             msg,
		Source:              corev1.EventSource{Component: "kubelet", Host: "node-a"},
		ReportingController: "kubelet", ReportingInstance: "node-a",
		FirstTimestamp: metav1.NewTime(first),
		LastTimestamp:  metav1.NewTime(last),
		Type:           corev1.EventTypeWarning,
	}
}

func TestClassifyKnowsEachIPAM(t *testing.T) {
	for msg, want := range map[string]string{hostLocalFull: "host-local", awsFull: "aws-cni", ciliumFull: "cilium", azureFull: "azure", calicoFull: "calico"} {
		got, ok := Classify(msg)
		if !ok || got.IPAM != want {
			t.Errorf("Classify(%q) = %v, %v; want %s", msg, got, ok, want)
		}
	}
	for _, msg := range []string{noLoopback, routeExists, "", "Back-off pulling image \"web:1\""} {
		if got, ok := Classify(msg); ok {
			t.Errorf("Classify(%q) = %v: not an exhaustion", msg, got)
		}
	}
}

func TestCheckCountsFromTheFirstFailure(t *testing.T) {
	pod := waitingPod()
	events := []corev1.Event{
		sandboxEvent(pod.UID, hostLocalFull, t0.Add(30*time.Second), t0.Add(90*time.Second)),
		sandboxEvent(pod.UID, "(combined from similar events): "+hostLocalFull, t0.Add(40*time.Second), t0.Add(3*time.Minute)),
		// Another pod's failure is not this pod's.
		sandboxEvent("uid-other", hostLocalFull, t0, t0.Add(4*time.Minute)),
	}
	st, err := Check(pod, events, t0.Add(4*time.Minute), t0.Add(2*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Since.Equal(t0.Add(30*time.Second)) || !st.Last.Equal(t0.Add(3*time.Minute)) || st.IPAM != "host-local" {
		t.Errorf("Check = %+v; want since %s, last %s, host-local", st, t0.Add(30*time.Second), t0.Add(3*time.Minute))
	}
}

func TestCheckLeavesOtherWaitsAlone(t *testing.T) {
	full := []corev1.Event{sandboxEvent("uid-web-1", hostLocalFull, t0, t0.Add(time.Minute))}
	cases := map[string]struct {
		pod    func(*corev1.Pod)
		events []corev1.Event
		fresh  time.Time
		reason string
	}{
		"pulling an image: its sandbox is ready": {
			pod: func(p *corev1.Pod) {
				p.Status.Conditions[1].Status = corev1.ConditionTrue
				p.Status.ContainerStatuses[0].State.Waiting.Reason = "ContainerCreating"
			},
			events: full, reason: "not waiting",
		},
		"no condition (an older kubelet)": {
			pod:    func(p *corev1.Pod) { p.Status.Conditions = p.Status.Conditions[:1] },
			events: full, reason: "not waiting",
		},
		"running": {
			pod:    func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning },
			events: full, reason: "not waiting",
		},
		"host network": {
			pod:    func(p *corev1.Pod) { p.Spec.HostNetwork = true },
			events: full, reason: "not waiting",
		},
		"terminating": {
			pod:    func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t0} },
			events: full, reason: "not waiting",
		},
		"unbound": {
			pod:    func(p *corev1.Pod) { p.Spec.NodeName = "" },
			events: full, reason: "not waiting",
		},
		"a container ran once": {
			pod: func(p *corev1.Pod) {
				p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1}
			},
			events: full, reason: "not waiting",
		},
		"no Event": {reason: "no FailedCreatePodSandBox"},
		"another cause": {
			events: []corev1.Event{sandboxEvent("uid-web-1", noLoopback, t0, t0.Add(time.Minute))},
			reason: "another reason",
		},
		"another cause since": {
			events: append([]corev1.Event{sandboxEvent("uid-web-1", routeExists, t0.Add(2*time.Minute), t0.Add(2*time.Minute))}, full...),
			reason: "latest sandbox failure has another cause",
		},
		"not failing any more": {
			events: full, fresh: t0.Add(5 * time.Minute), reason: "last reported",
		},
		"an Event from another node's kubelet": {
			events: func() []corev1.Event {
				e := sandboxEvent("uid-web-1", hostLocalFull, t0, t0.Add(time.Minute))
				e.Source.Host = "node-b"
				return []corev1.Event{e}
			}(),
			reason: "no FailedCreatePodSandBox",
		},
		"an Event not from the kubelet": {
			events: forged(func(e *corev1.Event) { e.Source.Component = "tenant" }),
			reason: "no FailedCreatePodSandBox",
		},
		// A tenant's forgery copies source but not the reporting fields, or
		// names another reporter in them.
		"reportingController not the kubelet": {
			events: forged(func(e *corev1.Event) { e.ReportingController = "tenant" }),
			reason: "no FailedCreatePodSandBox",
		},
		"no reportingController": {
			events: forged(func(e *corev1.Event) { e.ReportingController = "" }),
			reason: "no FailedCreatePodSandBox",
		},
		"reportingInstance another node": {
			events: forged(func(e *corev1.Event) { e.ReportingInstance = "node-b" }),
			reason: "no FailedCreatePodSandBox",
		},
		"no reportingInstance": {
			events: forged(func(e *corev1.Event) { e.ReportingInstance = "" }),
			reason: "no FailedCreatePodSandBox",
		},
		"no source.host": {
			events: forged(func(e *corev1.Event) { e.Source.Host = "" }),
			reason: "no FailedCreatePodSandBox",
		},
		// Made before the pod by the API server's clock: not this pod's.
		"created before the pod": {
			events: forged(func(e *corev1.Event) { e.CreationTimestamp = metav1.NewTime(t0.Add(-2 * time.Hour)) }),
			reason: "no FailedCreatePodSandBox",
		},
		// Reported before the current sandbox attempt began (the kubelet's
		// clock on both sides): an earlier sandbox's failure.
		"an earlier sandbox attempt": {
			pod: func(p *corev1.Pod) {
				p.Status.Conditions[1].LastTransitionTime = metav1.NewTime(t0.Add(2 * time.Minute))
			},
			events: full, reason: "no FailedCreatePodSandBox",
		},
		// A lastTimestamp in the future does not keep the evidence fresh:
		// it counts from the API server's stamp of its write.
		"last reported in the future, written long ago": {
			events: forged(func(e *corev1.Event) {
				e.LastTimestamp = metav1.NewTime(t0.Add(365 * 24 * time.Hour))
				e.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate, Time: &metav1.Time{Time: t0.Add(time.Minute)}}}
			}),
			fresh: t0.Add(5 * time.Minute), reason: "last reported",
		},
		// The IPAM's words past the bytes read are not read.
		"exhaustion beyond the message cap": {
			events: forged(func(e *corev1.Event) { e.Message = strings.Repeat("x", MaxMessageBytes) + hostLocalFull }),
			reason: "another reason",
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			pod := waitingPod()
			if c.pod != nil {
				c.pod(pod)
			}
			st, err := Check(pod, c.events, t0.Add(10*time.Minute), c.fresh)
			if err == nil || !strings.Contains(err.Error(), c.reason) {
				t.Fatalf("Check = %+v, %v; want an error saying %q", st, err, c.reason)
			}
		})
	}
}

// forged is the kubelet's Event of "full" changed by f.
func forged(f func(*corev1.Event)) []corev1.Event {
	e := sandboxEvent("uid-web-1", hostLocalFull, t0, t0.Add(time.Minute))
	f(&e)
	return []corev1.Event{e}
}

// TestCheckBoundsTheTimes: the grace counts from the API server's stamp of
// the first Event, whatever firstTimestamp says (here before the pod
// existed), and a lastTimestamp in the future is taken as now.
func TestCheckBoundsTheTimes(t *testing.T) {
	pod := waitingPod()
	now := t0.Add(10 * time.Minute)
	e := sandboxEvent(pod.UID, hostLocalFull, t0.Add(-24*time.Hour), t0.Add(365*24*time.Hour))
	e.CreationTimestamp = metav1.NewTime(t0.Add(8 * time.Minute))
	st, err := Check(pod, []corev1.Event{e}, now, now.Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Since.Equal(t0.Add(8*time.Minute)) || !st.Last.Equal(now) {
		t.Errorf("Check = since %s, last %s; want since %s (the API server's stamp), last %s (now)", st.Since, st.Last, t0.Add(8*time.Minute), now)
	}
}

// TestCheckCapsTheMessage: an oversize message is read up to
// MaxMessageBytes, within which the IPAM's text is found.
func TestCheckCapsTheMessage(t *testing.T) {
	pod := waitingPod()
	e := sandboxEvent(pod.UID, hostLocalFull+strings.Repeat(" padding", 1<<17), t0, t0.Add(time.Minute))
	st, err := Check(pod, []corev1.Event{e}, t0.Add(2*time.Minute), t0)
	if err != nil {
		t.Fatal(err)
	}
	if st.IPAM != "host-local" || len(st.Message) != MaxMessageBytes || !strings.HasPrefix(st.Message, hostLocalFull) {
		t.Errorf("Check = %s, message of %d bytes; want host-local, %d bytes", st.IPAM, len(st.Message), MaxMessageBytes)
	}
}

func TestCheckReadsTheEventsAPIForm(t *testing.T) {
	pod := waitingPod()
	e := sandboxEvent(pod.UID, ciliumFull, time.Time{}, time.Time{})
	e.FirstTimestamp, e.LastTimestamp = metav1.Time{}, metav1.Time{}
	e.EventTime = metav1.NewMicroTime(t0)
	e.CreationTimestamp = metav1.NewTime(t0)
	e.Series = &corev1.EventSeries{Count: 4, LastObservedTime: metav1.NewMicroTime(t0.Add(2 * time.Minute))}
	st, err := Check(pod, []corev1.Event{e}, t0.Add(3*time.Minute), t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !st.Since.Equal(t0) || !st.Last.Equal(t0.Add(2*time.Minute)) || st.IPAM != "cilium" {
		t.Errorf("Check = %+v", st)
	}
}

func FuzzCheck(f *testing.F) {
	f.Add(hostLocalFull, int64(0), int64(60), "kubelet", true)
	f.Add(noLoopback, int64(-5), int64(-10), "", false)
	f.Fuzz(func(t *testing.T, msg string, first, last int64, component string, waiting bool) {
		pod := waitingPod()
		if !waiting {
			pod.Status.Phase = corev1.PodRunning
		}
		e := sandboxEvent(pod.UID, msg, t0.Add(time.Duration(first)*time.Second), t0.Add(time.Duration(last)*time.Second))
		e.Source.Component = component
		st, err := Check(pod, []corev1.Event{e, sandboxEvent(pod.UID, hostLocalFull, t0, t0)}, t0.Add(time.Hour), t0.Add(-time.Hour))
		if err != nil {
			return
		}
		if !waiting || st.Last.After(t0.Add(time.Hour)) || st.IPAM == "" || len(st.Message) > MaxMessageBytes {
			t.Fatalf("Check(%q) = %+v for a pod waiting=%v", msg, st, waiting)
		}
	})
}
