// Package ipstarved tells a pod whose sandbox cannot be created for want of
// a pod IP from a pod that waits for anything else. The evidence is the
// kubelet's own: its FailedCreatePodSandBox Events, whose message carries the
// CNI plugin's error, and the pod's PodReadyToStartContainers condition,
// which turns True once the sandbox and its network exist (a pod pulling an
// image has it True, and is never starved).
package ipstarved

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ReasonFailedCreatePodSandBox is the reason of the kubelet's Event when
// RunPodSandbox fails (k8s.io/kubernetes/pkg/kubelet/events).
const ReasonFailedCreatePodSandBox = "FailedCreatePodSandBox"

// Exhaustion is what one IPAM says when it has no address left for a pod.
type Exhaustion struct {
	// IPAM names the plugin.
	IPAM string
	// Says is a part of its error that no other failure carries.
	Says string
}

// Exhaustions are the IPAMs' own errors for "no address left", as they reach
// a FailedCreatePodSandBox Event (the runtime wraps them: "failed to setup
// network for sandbox …: plugin type=… failed (add): <the error>"). Each is
// the plugin's error text, not a guess at a class of failures: a sandbox
// failure that matches none is never taken for starvation.
var Exhaustions = []Exhaustion{
	// containernetworking/plugins host-local, allocator.Get.
	{IPAM: "host-local", Says: "no IP addresses available in range set"},
	// The AWS VPC CNI when ipamd has no address for the pod.
	{IPAM: "aws-cni", Says: "failed to assign an IP address to container"},
	// Cilium's agent answering the CNI plugin's POST /ipam.
	{IPAM: "cilium", Says: "postIpamFailure  range is full"},
	{IPAM: "cilium", Says: "postIpamFailure range is full"},
	// Calico IPAM, when no block can be claimed or borrowed.
	{IPAM: "calico", Says: "cannot allocate new block due to per host block limit"},
	{IPAM: "calico", Says: "IPAM allocated only 0"},
	// Azure CNI: CNS with no IP to hand out (dynamic allocation), and the
	// azure-vnet-ipam plugin's own pool.
	{IPAM: "azure", Says: "not enough IPs available"},
	{IPAM: "azure", Says: "No available addresses"},
}

// Starvation is the evidence that a pod waits for a pod IP.
type Starvation struct {
	// Since is the first time the kubelet reported the failure: the earliest
	// FirstTimestamp of the matching Events.
	Since time.Time
	// Last is the latest report.
	Last time.Time
	// IPAM names the plugin whose error the Events carry.
	IPAM string
	// Message is the latest matching Event's message.
	Message string
}

// Classify returns which IPAM's exhaustion message says, if any.
func Classify(message string) (Exhaustion, bool) {
	for _, e := range Exhaustions {
		if strings.Contains(message, e.Says) {
			return e, true
		}
	}
	return Exhaustion{}, false
}

// Waiting reports whether pod is bound to a node and waits for its sandbox:
// Pending, not terminating, not on the host's network, its
// PodReadyToStartContainers condition present and not True, and no
// container started. Any other pod is not waiting for a pod IP, whatever
// its Events say; a pod without the condition (a kubelet that does not set
// it) is never taken to wait.
func Waiting(pod *corev1.Pod) bool {
	if pod.Spec.NodeName == "" || pod.DeletionTimestamp != nil || pod.Spec.HostNetwork ||
		pod.Status.Phase != corev1.PodPending {
		return false
	}
	present := false
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReadyToStartContainers {
			if c.Status == corev1.ConditionTrue {
				return false
			}
			present = true
		}
	}
	if !present {
		return false
	}
	for _, statuses := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, s := range statuses {
			if s.State.Running != nil || s.State.Terminated != nil || s.LastTerminationState.Terminated != nil {
				return false
			}
		}
	}
	return true
}

// Check returns the evidence that pod waits for a pod IP: it is Waiting,
// and the latest of its FailedCreatePodSandBox Events from the kubelet on
// its node is an IPAM's exhaustion, reported at or after fresh (the kubelet
// still fails now, not only once). Events of other pods, other reasons,
// other reporters or other nodes are ignored, so a pod whose last sandbox
// failure had another cause is not starved. The error says why not, for the
// log.
func Check(pod *corev1.Pod, events []corev1.Event, fresh time.Time) (Starvation, error) {
	if !Waiting(pod) {
		return Starvation{}, fmt.Errorf("not waiting for its sandbox")
	}
	var (
		st     Starvation
		latest time.Time
		last   string
		found  bool
	)
	for i := range events {
		e := &events[i]
		if e.InvolvedObject.UID != pod.UID || e.Reason != ReasonFailedCreatePodSandBox ||
			e.Source.Component != "kubelet" || (e.Source.Host != "" && e.Source.Host != pod.Spec.NodeName) {
			continue
		}
		first, seen := eventTimes(e)
		if seen.After(latest) || !found {
			latest, last, found = seen, e.Message, true
		}
		if x, ok := Classify(e.Message); ok {
			if st.Since.IsZero() || first.Before(st.Since) {
				st.Since = first
			}
			if seen.After(st.Last) {
				st.Last, st.IPAM, st.Message = seen, x.IPAM, e.Message
			}
		}
	}
	switch {
	case !found:
		return Starvation{}, fmt.Errorf("no FailedCreatePodSandBox Event from the kubelet")
	case st.Since.IsZero():
		return Starvation{}, fmt.Errorf("its sandbox fails for another reason: %s", last)
	case latest.After(st.Last):
		return Starvation{}, fmt.Errorf("its latest sandbox failure has another cause: %s", last)
	case st.Last.Before(fresh):
		return Starvation{}, fmt.Errorf("last reported out of pod IPs at %s, before %s", st.Last.UTC().Format(time.RFC3339), fresh.UTC().Format(time.RFC3339))
	}
	return st, nil
}

// eventTimes are when an Event was first and last reported: the legacy
// timestamps the kubelet's recorder sets, or the event time (and its
// series) of the events.k8s.io form.
func eventTimes(e *corev1.Event) (first, last time.Time) {
	first, last = e.FirstTimestamp.Time, e.LastTimestamp.Time
	if first.IsZero() {
		first = e.EventTime.Time
	}
	if e.Series != nil && e.Series.LastObservedTime.After(last) {
		last = e.Series.LastObservedTime.Time
	}
	if last.Before(first) {
		last = first
	}
	return first, last
}
