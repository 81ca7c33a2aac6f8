package nodestate

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
)

// IgnoredAnnotation is a node annotation a plugin ignores, why, and what that means
// for the node; the zero IgnoredAnnotation is none.
type IgnoredAnnotation struct {
	Key         string
	Err         error
	Consequence string
}

func (i IgnoredAnnotation) same(o IgnoredAnnotation) bool {
	return i.Key == o.Key && (i.Err == nil) == (o.Err == nil) && (i.Err == nil || i.Err.Error() == o.Err.Error())
}

// Reporter tells the operator that a node's annotation is ignored, once per
// distinct problem rather than per scheduling cycle or Node update: a log
// line, a Warning Event on the Node and a count in
// headroom_invalid_annotations_total. Every scheduler plugin that reads a
// node sample reports through one.
type Reporter struct {
	Handle fwk.Handle
	// Plugin labels the metric; Noun names the figure ("PID", "memory");
	// EventReason is the Warning Event's reason.
	Plugin, Noun, EventReason string
}

// Report reports cur unless it is none or the same as prev, the node's
// previous problem.
func (r Reporter) Report(ctx context.Context, node *corev1.Node, prev, cur IgnoredAnnotation) {
	if cur.Key == "" || cur.same(prev) {
		return
	}
	// Structured logging has no warning level; Info at V(0) is its warning.
	klog.FromContext(ctx).Info("Node has an invalid "+r.Noun+" annotation; "+cur.Consequence, "node", klog.KObj(node), "annotation", cur.Key, "err", cur.Err)
	headroommetrics.InvalidAnnotation(r.Plugin, cur.Key)
	if r.Handle != nil && r.Handle.EventRecorder() != nil {
		r.Handle.EventRecorder().Eventf(node, nil, corev1.EventTypeWarning, r.EventReason, "Scheduling", "%s; %s", cur.Err, cur.Consequence)
	}
}
