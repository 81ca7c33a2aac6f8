package figure

import (
	"time"

	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	schedutil "k8s.io/kubernetes/pkg/scheduler/util"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

// EventsToRegister returns the events that can lift a rejection: a node
// added, a node's annotations changed (the node agent writes a sample) and
// a pod leaving a node. Other node updates, such as the kubelet's status,
// never reach the hints.
//
// An update of the rejected pod itself (a lower need annotation) is not
// registered: only the general Pod/Update event carries annotation changes,
// and registering it would run the hints on every status update of every
// assigned pod. Such a pod is retried when the scheduler flushes its
// unschedulable pods (5 minutes by default).
func (pl *Plugin[S]) EventsToRegister(_ context.Context) ([]fwk.ClusterEventWithHint, error) {
	return []fwk.ClusterEventWithHint{
		{Event: fwk.ClusterEvent{Resource: fwk.Node, ActionType: fwk.Add | fwk.UpdateNodeAnnotation}, QueueingHintFn: pl.isSchedulableAfterNodeChange},
		{Event: fwk.ClusterEvent{Resource: fwk.Pod, ActionType: fwk.Delete}, QueueingHintFn: pl.isSchedulableAfterPodDelete},
	}, nil
}

// reading is what a queueing hint reads from one version of a Node: the
// sample with the plugin's age limit.
type reading struct {
	// err is nil when the headroom is known, a stale error
	// (sample.IsStale) when the sample is too old, another error when the
	// annotations are missing or invalid.
	err error
	// room is the free units above the floor at the reported use, free
	// the free units; sampledAt the sample's time. Meaningful when err is
	// nil.
	free, room int64
	sampledAt  time.Time
}

// read reads the node's sample as the hints see it.
func (pl *Plugin[S]) read(node *corev1.Node) reading {
	now := pl.Clock.Now()
	s, err := pl.figure.Read(node, now)
	if err != nil {
		return reading{err: err}
	}
	r := reading{sampledAt: s.SampleTime(), free: s.Free()}
	r.err = sample.CheckAge(pl.names.Kind, r.sampledAt, now, pl.settings.MaxSampleAge)
	r.room = max(r.free, 0) - pl.figure.Floor(s)
	return r
}

// isSchedulableAfterNodeChange queues the pod when the added or updated
// node may now pass Filter where it did not before. It queues when
//
//   - the node's headroom became unknown (Filter passes such nodes);
//   - a node was added, or its figures show more free than before, and at
//     its reported use it has room for the pod;
//   - the node carries a newer sample with room for the pod at its reported
//     use (the estimate adds pods placed after the sample; a newer sample
//     takes them in at their measured use, which the hint cannot see), or
//     the old sample was stale;
//
// and skips otherwise: a sample without room, an unchanged sample (another
// annotation changed), a node whose headroom was and is unknown.
func (pl *Plugin[S]) isSchedulableAfterNodeChange(logger klog.Logger, pod *corev1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	oldNode, node, err := schedutil.As[*corev1.Node](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	kind := pl.names.Kind
	cur := pl.read(node)
	var old *reading
	if oldNode != nil {
		r := pl.read(oldNode)
		old = &r
	}
	if cur.err != nil {
		if old == nil || old.err == nil {
			logger.V(5).Info("Node's "+kind+" headroom is unknown now, which Filter passes", "pod", klog.KObj(pod), "node", klog.KObj(node), "reason", cur.err)
			return fwk.Queue, nil
		}
		logger.V(5).Info("Node's "+kind+" headroom was and is unknown", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.QueueSkip, nil
	}
	if need, _, _ := pl.figure.Need(pod); need > cur.room {
		logger.V(5).Info("Node has too little "+kind+" headroom for the pod even at its reported use", "pod", klog.KObj(pod), "node", klog.KObj(node),
			"free", cur.free)
		return fwk.QueueSkip, nil
	}
	if isLive(pl.figure) {
		// Live figures are read now for both objects: the old one's are
		// not known, and the node has room.
		logger.V(5).Info("Node has "+kind+" headroom for the pod now", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.Queue, nil
	}
	switch {
	case old == nil:
		logger.V(5).Info("Node added with "+kind+" headroom for the pod", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.Queue, nil
	case sample.IsStale(old.err):
		// Fresh, and maybe rejecting, when the pod was last tried.
		logger.V(5).Info("Node's stale "+kind+" sample was replaced by one with room", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.Queue, nil
	case old.err != nil:
		// No or invalid annotations before: Filter passed the node already.
		logger.V(5).Info("Node's "+kind+" headroom was unknown before, so it did not reject the pod there", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.QueueSkip, nil
	case cur.free > old.free:
		logger.V(5).Info("Node reports more free "+kind+"s", "pod", klog.KObj(pod), "node", klog.KObj(node),
			"oldFree", old.free, "newFree", cur.free)
		return fwk.Queue, nil
	case cur.sampledAt.After(old.sampledAt):
		logger.V(5).Info("Node has a newer "+kind+" sample with room for the pod", "pod", klog.KObj(pod), "node", klog.KObj(node))
		return fwk.Queue, nil
	}
	logger.V(5).Info("Node's "+kind+" figures show no more room", "pod", klog.KObj(pod), "node", klog.KObj(node))
	return fwk.QueueSkip, nil
}

// isSchedulableAfterPodDelete queues the pod when the deleted pod was
// placed after its node's sample and counted (Figure.Counted), since the
// estimate drops by its share, and when the node's sample is stale (Filter
// passes the node now, though it may have rejected the pod while the sample
// was fresh; nothing else requeues for age). A pod that was in the sample
// frees its share in the next sample, which comes as a node update. Without
// a node lister, every deletion of an assigned pod queues.
//
// Terminal pods leave the scheduler's cache through this event too, and
// stop counting then, so Counted must not look at the phase.
func (pl *Plugin[S]) isSchedulableAfterPodDelete(logger klog.Logger, pod *corev1.Pod, oldObj, newObj interface{}) (fwk.QueueingHint, error) {
	deleted, _, err := schedutil.As[*corev1.Pod](oldObj, newObj)
	if err != nil {
		return fwk.Queue, err
	}
	kind := pl.names.Kind
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
	r := pl.read(node)
	switch {
	case sample.IsStale(r.err):
		return fwk.Queue, nil
	case r.err != nil:
		logger.V(5).Info("Deleted pod's node has unknown "+kind+" headroom, which is not filtered", "pod", klog.KObj(pod), "node", nodeName)
		return fwk.QueueSkip, nil
	}
	if sample.InSample(deleted, r.sampledAt) {
		logger.V(5).Info("Deleted pod was in its node's "+kind+" sample; the next sample shows the room", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted), "node", nodeName)
		return fwk.QueueSkip, nil
	}
	if !pl.figure.Counted(deleted) {
		return fwk.QueueSkip, nil
	}
	logger.V(5).Info("Deleted pod's "+kind+"s no longer count on its node", "pod", klog.KObj(pod), "deletedPod", klog.KObj(deleted), "node", nodeName)
	return fwk.Queue, nil
}
