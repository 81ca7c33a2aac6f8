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
	// Since is when the API server first recorded the failure: the earliest
	// creationTimestamp of the matching Events.
	Since time.Time
	// Last is the kubelet's latest report, by its clock, at most now.
	Last time.Time
	// IPAM names the plugin whose error the Events carry.
	IPAM string
	// Message is the latest matching Event's message, at most
	// MaxMessageBytes of it.
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

// Kubelet is the name the kubelet reports its Events under: its recorder's
// source.component (k8s.io/kubernetes/cmd/kubelet/app), which client-go's
// recorder also writes as reportingController, with the node's name as
// source.host and reportingInstance (client-go/tools/record).
const Kubelet = "kubelet"

// MaxMessageBytes is how much of an Event's message is read. A core/v1
// Event's message has no size limit; the kubelet's FailedCreatePodSandBox
// message (the runtime's wrapping, the CNI plugin's error, and the
// aggregator's "(combined from similar events): " prefix) is a few hundred
// bytes, and every IPAM's text of Exhaustions comes well within this.
const MaxMessageBytes = 4096

// CapMessage is the part of message that is read: at most MaxMessageBytes.
func CapMessage(message string) string {
	if len(message) <= MaxMessageBytes {
		return message
	}
	return message[:MaxMessageBytes]
}

// FromKubeletOf reports whether every field of e that names its reporter
// names the kubelet of node: source.component and reportingController
// "kubelet", source.host and reportingInstance the node. Anyone who may
// create Events in a namespace may write these fields; the shipped
// ValidatingAdmissionPolicy (manifests/descheduler/sandbox-events-policy.yaml)
// lets only system:node:<node> create or change a FailedCreatePodSandBox
// Event whose reportingInstance is <node>, so that with it the check
// means the node's own kubelet wrote the Event.
func FromKubeletOf(e *corev1.Event, node string) bool {
	return e.Source.Component == Kubelet && e.ReportingController == Kubelet &&
		e.Source.Host == node && e.ReportingInstance == node
}

// Check returns the evidence that pod waits for a pod IP: it is Waiting,
// and the latest of its FailedCreatePodSandBox Events from the kubelet of
// its node (FromKubeletOf) is an IPAM's exhaustion, reported at or after
// fresh (the kubelet still fails now, not only once). Events of other pods,
// other reasons, other reporters or other nodes are ignored, so a pod whose
// last sandbox failure had another cause is not starved.
//
// The times are bounded by the pod's own history and the API server's
// clock:
//   - an Event the API server stamped (metadata.creationTimestamp) before
//     the pod's own creationTimestamp is not about this pod and is ignored,
//     and so is one the kubelet last reported (its clock) before the pod's
//     PodReadyToStartContainers condition last turned False (the same
//     clock): an earlier sandbox's failure;
//   - Since, from which the grace counts, is the API server's stamp of the
//     earliest matching Event, never the kubelet's firstTimestamp, which
//     any writer of the Event sets at will and which comes from another
//     machine's clock;
//   - the last report, which decides freshness, is the kubelet's
//     lastTimestamp, never later than the API server's stamp of the
//     Event's last write (its managedFields) nor than now.
//
// The error says why not, for the log.
func Check(pod *corev1.Pod, events []corev1.Event, now, fresh time.Time) (Starvation, error) {
	if !Waiting(pod) {
		return Starvation{}, fmt.Errorf("not waiting for its sandbox")
	}
	attempt := sandboxAttempt(pod)
	var (
		st     Starvation
		latest time.Time
		last   string
		found  bool
	)
	for i := range events {
		e := &events[i]
		if e.InvolvedObject.UID != pod.UID || e.Reason != ReasonFailedCreatePodSandBox || !FromKubeletOf(e, pod.Spec.NodeName) ||
			e.CreationTimestamp.Before(&pod.CreationTimestamp) {
			continue
		}
		seen := reportedLast(e, now)
		if seen.Before(attempt) {
			continue
		}
		message := CapMessage(e.Message)
		if seen.After(latest) || !found {
			latest, last, found = seen, message, true
		}
		if x, ok := Classify(message); ok {
			created := e.CreationTimestamp.Time
			if created.IsZero() {
				// Never from an API server: it earns no grace.
				created = now
			}
			if st.Since.IsZero() || created.Before(st.Since) {
				st.Since = created
			}
			if seen.After(st.Last) || st.IPAM == "" {
				st.Last, st.IPAM, st.Message = seen, x.IPAM, message
			}
		}
	}
	switch {
	case !found:
		return Starvation{}, fmt.Errorf("no FailedCreatePodSandBox Event from the kubelet of node %s since the pod's sandbox attempt began", pod.Spec.NodeName)
	case st.IPAM == "":
		return Starvation{}, fmt.Errorf("its sandbox fails for another reason: %s", last)
	case latest.After(st.Last):
		return Starvation{}, fmt.Errorf("its latest sandbox failure has another cause: %s", last)
	case st.Last.Before(fresh):
		return Starvation{}, fmt.Errorf("last reported out of pod IPs at %s, before %s", st.Last.UTC().Format(time.RFC3339), fresh.UTC().Format(time.RFC3339))
	}
	return st, nil
}

// sandboxAttempt is when the pod's current sandbox attempt began, by the
// kubelet's clock: when its PodReadyToStartContainers condition last
// turned False (zero when the kubelet gave no time).
func sandboxAttempt(pod *corev1.Pod) time.Time {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReadyToStartContainers {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

// reportedLast is when the kubelet last reported e: its lastTimestamp (or
// series), by its clock, but never after the API server last wrote the
// Event (the latest time of its managedFields, which the API server stamps
// on every change) nor after now. A lastTimestamp set in the future thus
// ages from its write like any other.
func reportedLast(e *corev1.Event, now time.Time) time.Time {
	_, last := eventTimes(e)
	if w := writtenAt(e); !w.IsZero() && w.Before(last) {
		last = w
	}
	if last.After(now) {
		return now
	}
	return last
}

// writtenAt is when the API server last changed e by its managedFields;
// zero when they are absent (a client that stripped them).
func writtenAt(e *corev1.Event) time.Time {
	var at time.Time
	for _, f := range e.ManagedFields {
		if f.Time != nil && f.Time.After(at) {
			at = f.Time.Time
		}
	}
	return at
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
