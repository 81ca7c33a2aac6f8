package nodepids

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/internal/nodesample"
)

// EventsToRegister returns the events that can lift a NodePIDs rejection: a
// node added, a node's annotations changed (headroom-node-agent writes a
// sample) and a pod leaving a node. Other node updates, such as the
// kubelet's status, never reach the hints.
//
// An update of the rejected pod itself (a lower headroom.dev/pids) is not
// registered: only the general Pod/Update event carries annotation changes,
// and registering it would run the hints on every status update of every
// assigned pod. Such a pod is retried when the scheduler flushes its
// unschedulable pods (5 minutes by default).
func (pl *NodePIDs) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAnnotation}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: pl.isSchedulableAfterPodDelete},
	}, nil
}

// isSchedulableAfterNodeChange queues the pod when the added or updated node
// may now pass Filter where it did not before (nodesample.NodeChangeHint):
// its PID headroom became unknown, or it has room for the pod at its
// reported use and was added, reports more free PIDs, or carries a newer
// sample (which replaces the declared PIDs of pods placed after the old one
// with their measured use, often less).
func (pl *NodePIDs) isSchedulableAfterNodeChange(logger klog.Logger, pod *corev1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	oldNode, newNode, err := schedutil.As[*corev1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	now := pl.Clock.Now()
	need, _ := pidstats.PodPIDs(pod, pl.defaultPodPIDs)
	newStats, newErr := pidstats.ParseNode(newNode.Annotations, now, pl.MaxSampleAge)
	cur := nodesample.Reading{Err: newErr, Free: newStats.Free(), SampledAt: newStats.SampledAt}
	var old *nodesample.Reading
	if oldNode != nil {
		oldStats, oldErr := pidstats.ParseNode(oldNode.Annotations, now, pl.MaxSampleAge)
		old = &nodesample.Reading{Err: oldErr, Free: oldStats.Free(), SampledAt: oldStats.SampledAt}
	}
	fits := newErr == nil && pl.strategy.fits(newStats.Free(), newStats.Allocatable(), need)
	return nodesample.NodeChangeHint(logger, "PID", pod, newNode, old, cur, fits), nil
}

// isSchedulableAfterPodDelete queues the pod when a deleted pod lowers the
// estimated use of a node whose PID headroom is known: it was placed after
// the node's sample, so its declared PIDs were added to the reported use
// (nodesample.PodDeleteHint).
func (pl *NodePIDs) isSchedulableAfterPodDelete(logger klog.Logger, pod *corev1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	deleted, _, err := schedutil.As[*corev1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	return nodesample.PodDeleteHint(logger, "PID", pod, deleted, pl.NodeLister, pl.reading, pl.declaresPIDs), nil
}

// reading is the node's PID sample as the hints see it.
func (pl *NodePIDs) reading(node *corev1.Node) nodesample.Reading {
	s, err := pidstats.ParseNode(node.Annotations, pl.Clock.Now(), pl.MaxSampleAge)
	return nodesample.Reading{Err: err, Free: s.Free(), SampledAt: s.SampledAt}
}

// declaresPIDs reports whether a pod placed after its node's sample adds
// PIDs to the node's estimate (whatever its phase).
func (pl *NodePIDs) declaresPIDs(p *corev1.Pod) bool {
	pids, _ := pidstats.PodPIDs(p, pl.defaultPodPIDs)
	return pids > 0
}
