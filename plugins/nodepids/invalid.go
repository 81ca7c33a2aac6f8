package nodepids

import (
	"context"
	"errors"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// invalidAnnotation returns the annotation of e's node that NodePIDs
// ignores, and why: an invalid pid-* figure (the node's headroom counts as
// unknown) or, failing that, an invalid pid-pods list (the reported use
// counts alone). key is "" when nothing is ignored.
func (e *nodeEntry) invalidAnnotation() (key string, err error) {
	var ie *pidstats.InvalidError
	if errors.As(e.parseErr, &ie) {
		return ie.Key, e.parseErr
	}
	if err := e.stats.Pods.Err(); e.parseErr == nil && err != nil {
		return pidstats.AnnotationPIDPods, err
	}
	return "", nil
}

// reportInvalid tells the operator that a node's PID annotation is
// ignored, once per distinct problem rather than per scheduling cycle or
// Node update: a log line, a Warning Event on the Node and a count in
// headroom_invalid_annotations_total. prev is the node's previous entry,
// nil when there is none.
func (pl *NodePIDs) reportInvalid(ctx context.Context, node *corev1.Node, prev, e *nodeEntry) {
	key, err := e.invalidAnnotation()
	if key == "" {
		return
	}
	if prev != nil {
		if prevKey, prevErr := prev.invalidAnnotation(); prevKey == key && prevErr.Error() == err.Error() {
			return
		}
	}
	msg := "Node has an invalid PID annotation; its PID headroom counts as unknown"
	note := err.Error() + "; the node's PID headroom counts as unknown"
	if key == pidstats.AnnotationPIDPods {
		msg = "Node has an invalid per-pod PID list; its reported use counts alone"
		note = err.Error() + "; the node's reported PID use counts alone"
	}
	// Structured logging has no warning level; Info at V(0) is its warning.
	klog.FromContext(ctx).Info(msg, "node", klog.KObj(node), "annotation", key, "err", err)
	headroommetrics.InvalidAnnotation(Name, key)
	if pl.Handle != nil && pl.Handle.EventRecorder() != nil {
		pl.Handle.EventRecorder().Eventf(node, nil, corev1.EventTypeWarning, EventReasonInvalidNodePIDs, "Scheduling", "%s", note)
	}
}
