package nodepids

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
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
// may now pass Filter where it did not before:
//
//   - the node's PID headroom became unknown (Filter passes such nodes);
//   - a node was added, or its figures show more free PIDs than before, and
//     at its reported use it has room for the pod above the floor;
//   - the node carries a newer sample with room for the pod at its reported
//     use. Filter estimates use as the sample plus the declared PIDs of pods
//     placed after it; a newer sample replaces those declarations with the
//     pods' measured use, which is often less. The hint cannot see the
//     node's pods, so it lets the pod try again.
//
// Everything else — a sample without room, an unchanged sample (another
// annotation changed), a node whose headroom was and is unknown — is
// QueueSkip.
func (pl *NodePIDs) isSchedulableAfterNodeChange(logger klog.Logger, pod *corev1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	oldNode, newNode, err := schedutil.As[*corev1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	now := pl.clock.Now()
	need, _ := pidstats.PodPIDs(pod, pl.defaultPodPIDs)
	newStats, newErr := pidstats.ParseNode(newNode.Annotations, now, pl.maxSampleAge)
	var oldStats pidstats.NodeStats
	var oldErr error
	if oldNode != nil {
		oldStats, oldErr = pidstats.ParseNode(oldNode.Annotations, now, pl.maxSampleAge)
	}

	if newErr != nil {
		if oldNode == nil || oldErr == nil {
			logger.V(5).Info("Node's PID headroom is unknown now, which Filter passes", "pod", klog.KObj(pod), "node", klog.KObj(newNode), "reason", newErr)
			return fwk.Queue, nil
		}
		logger.V(5).Info("Node's PID headroom was and is unknown", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
		return fwk.QueueSkip, nil
	}
	if !pl.strategy.fits(newStats.Free(), newStats.Allocatable(), need) {
		logger.V(5).Info("Node has too few free PIDs for the pod even at its reported use", "pod", klog.KObj(pod), "node", klog.KObj(newNode),
			"podPIDs", need, "free", newStats.Free())
		return fwk.QueueSkip, nil
	}
	switch {
	case oldNode == nil:
		logger.V(5).Info("Node added with room for the pod's PIDs", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
		return fwk.Queue, nil
	case pidstats.IsStale(oldErr):
		// Fresh, and maybe rejecting, when the pod was last tried.
		logger.V(5).Info("Node's stale PID sample was replaced by one with room", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
		return fwk.Queue, nil
	case oldErr != nil:
		// No or invalid annotations before: Filter passed the node already.
		logger.V(5).Info("Node's PID headroom was unknown before, NodePIDs did not reject the pod there", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
		return fwk.QueueSkip, nil
	case newStats.Free() > oldStats.Free():
		logger.V(5).Info("Node reports more free PIDs", "pod", klog.KObj(pod), "node", klog.KObj(newNode),
			"oldFree", oldStats.Free(), "newFree", newStats.Free())
		return fwk.Queue, nil
	case newStats.SampledAt.After(oldStats.SampledAt):
		logger.V(5).Info("Node has a newer PID sample with room for the pod", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
		return fwk.Queue, nil
	}
	logger.V(5).Info("Node's PID figures show no more room", "pod", klog.KObj(pod), "node", klog.KObj(newNode))
	return fwk.QueueSkip, nil
}

// isSchedulableAfterPodDelete queues the pod when a deleted pod lowers the
// estimated use of a node whose PID headroom is known: it was placed after
// the node's sample, so its declared PIDs were added to the reported use.
// A pod that was in the sample frees its PIDs in the next sample, which
// comes as a node update. Without a node lister, every deletion of an
// assigned pod queues.
func (pl *NodePIDs) isSchedulableAfterPodDelete(logger klog.Logger, pod *corev1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	deleted, _, err := schedutil.As[*corev1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	nodeName := deleted.Spec.NodeName
	if nodeName == "" {
		nodeName = deleted.Status.NominatedNodeName
	}
	if nodeName == "" {
		logger.V(5).Info("Deleted pod was not on a node", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted))
		return fwk.QueueSkip, nil
	}
	if pl.nodeLister == nil {
		return fwk.Queue, nil
	}
	node, err := pl.nodeLister.Get(nodeName)
	if err != nil {
		// The node is gone too; its deletion is no reason to retry.
		logger.V(5).Info("Deleted pod's node is not known", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted), "node", nodeName)
		return fwk.QueueSkip, nil
	}
	stats, err := pidstats.ParseNode(node.Annotations, pl.clock.Now(), pl.maxSampleAge)
	switch {
	case pidstats.IsStale(err):
		// Filter passes the node now, though it may have rejected the pod
		// while the sample was fresh; nothing else requeues for age.
		return fwk.Queue, nil
	case err != nil:
		logger.V(5).Info("Deleted pod's node has unknown PID headroom, which NodePIDs does not filter", "pod", klog.KObj(pod), "node", nodeName)
		return fwk.QueueSkip, nil
	}
	// Terminal pods leave the scheduler's cache through this event too, and
	// stop counting then, so the phase is not looked at.
	if !pidstats.PlacedAfterSample(deleted, stats.SampledAt) {
		logger.V(5).Info("Deleted pod was in its node's PID sample; the next sample shows the room", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted), "node", nodeName)
		return fwk.QueueSkip, nil
	}
	if pids, _ := pidstats.PodPIDs(deleted, pl.defaultPodPIDs); pids == 0 {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("Deleted pod's PIDs no longer count on its node", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted), "node", nodeName)
	return fwk.Queue, nil
}
