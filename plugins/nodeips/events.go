package nodeips

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/internal/nodesample"
)

// kind names the figure in the shared hints' log lines.
const kind = "pod IP"

// EventsToRegister returns the events that can lift a NodeIPs rejection, as
// NodePIDs registers them: a node added, a node's annotations changed
// (headroom-node-agent writes a sample) and a pod leaving a node. Other node
// updates, such as the kubelet's status, never reach the hints. The pending
// pod's own updates are not registered: a pod that takes an IP keeps taking
// one (spec.hostNetwork is immutable).
func (pl *NodeIPs) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAnnotation}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: pl.isSchedulableAfterPodDelete},
	}, nil
}

// isSchedulableAfterNodeChange queues the pod when the added or updated node
// may now pass Filter where it did not before (nodesample.NodeChangeHint):
// its pod-IP headroom became unknown, or it has a free IP above the floor
// at its reported use and was added, reports more free IPs, or carries a
// newer sample (which takes in the pods placed after the old one at their
// real allocations: some may have failed or left).
func (pl *NodeIPs) isSchedulableAfterNodeChange(logger klog.Logger, pod *corev1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	oldNode, newNode, err := schedutil.As[*corev1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	cur := pl.reading(newNode)
	var old *nodesample.Reading
	if oldNode != nil {
		r := pl.reading(oldNode)
		old = &r
	}
	fits := cur.Err == nil && cur.Free-pl.minFreeIPs >= podIPs
	return nodesample.NodeChangeHint(logger, kind, pod, newNode, old, cur, fits), nil
}

// isSchedulableAfterPodDelete queues the pod when a deleted pod lowers the
// estimated use of a node whose pod-IP headroom is known: it was placed on
// the pod network after the node's sample, so it was added to the reported
// use (nodesample.PodDeleteHint).
func (pl *NodeIPs) isSchedulableAfterPodDelete(logger klog.Logger, pod *corev1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	deleted, _, err := schedutil.As[*corev1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	return nodesample.PodDeleteHint(logger, kind, pod, deleted, pl.NodeLister, pl.reading, onPodNetwork), nil
}

// reading is the node's pod-IP sample as the hints see it.
func (pl *NodeIPs) reading(node *corev1.Node) nodesample.Reading {
	s, err := ipstats.ParseNode(node.Annotations, pl.Clock.Now(), pl.MaxSampleAge)
	return nodesample.Reading{Err: err, Free: s.Free(), SampledAt: s.SampledAt}
}

// onPodNetwork reports whether a deleted pod placed after its node's sample
// was counted in the node's estimate. Unlike ipstats.TakesIP it ignores the
// phase: a pod that turned terminal leaves the scheduler's cache through the
// deletion event, and stops counting only then.
func onPodNetwork(p *corev1.Pod) bool { return !p.Spec.HostNetwork }
