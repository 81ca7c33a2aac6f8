package nodeagent

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/watchcache"
)

// Cross-check defaults; see PodIPCrossCheck.
const (
	// DefaultIPCrossCheckTolerance is the absolute part of the tolerance:
	// pods between their CNI ADD and the kubelet's next status update, or
	// between their last container's exit and the CNI DEL, are counted by
	// one side and not yet by the other. The kubelet starts a node's pods
	// a few at a time (its serialized image pulls and per-pod workers), so
	// a handful in flight is normal on a quiet node.
	DefaultIPCrossCheckTolerance = 3
	// DefaultIPCrossCheckTolerancePercent of the counted pods is the part
	// that grows with a busy node: a rolling update of a node's 110 pods
	// keeps some 5 in flight.
	DefaultIPCrossCheckTolerancePercent = 5.0
	// DefaultIPCrossCheckSamples is how many consecutive samples must
	// disagree beyond the tolerance before it is reported: three 10 s
	// samples outlast any pod's start or stop, which a single sample may
	// catch half done.
	DefaultIPCrossCheckSamples = 3
)

// PodIPFilter tells whether a pod's address comes from the source's pool:
// the AWS VPC CNI's pods with a branch ENI (security groups for pods), for
// one, do not. nil counts every pod with an address.
type PodIPFilter func(*corev1.Pod) bool

// NodePodLister lists the pods bound to the agent's node.
type NodePodLister interface {
	// List returns the node's pods, not to be modified; ErrPodsNotSynced
	// until they are known.
	List(ctx context.Context) ([]*corev1.Pod, error)
	Stop()
}

// ErrPodsNotSynced is what NodePodLister.List returns before its first
// list completed.
var ErrPodsNotSynced = errors.New("the watch of the node's pods has not completed its first list")

// PodIPCrossCheck compares what a pod-IP source says its pods hold with the
// pods the API server shows on the node holding an address: not on the
// host network, Running, or Pending with status.podIPs set (its sandbox is
// up and holds its address while images are pulled), and taken by the
// source's filter. Every source of IPProbe goes through it (IPProbe.
// crossCheck), so that a source whose figures drift from what the node
// visibly runs is reported, not trusted:
//
//   - a source that counts fewer addresses than the pods hold would let
//     the scheduler place pods onto addresses that are taken: once that is
//     reported, the published use is raised to the pods' count;
//   - a source that counts more (leaked or cooling addresses, addresses of
//     the node's own interfaces) is believed: the addresses are taken
//     whoever holds them; it is reported all the same.
//
// A disagreement is reported once it exceeded the tolerance, max(Tolerance,
// ⌈TolerancePercent % of the counted pods⌉), for Samples consecutive
// samples: a Warning Event PodIPFiguresDisagree on the Node and the
// metrics pod_ip_cross_check_difference and
// pod_ip_cross_check_disagreements_total; a Normal Event PodIPFiguresAgree
// when it ends.
type PodIPCrossCheck struct {
	Pods             NodePodLister
	Tolerance        int64
	TolerancePercent float64
	Samples          int
	// Event records an Event on the Node; may be nil.
	Event func(ctx context.Context, eventType, reason, message string)
	// Metrics may be nil.
	Metrics *Metrics

	unknownLogged string
	disagreeing   int  // consecutive samples beyond the tolerance
	reported      bool // a disagreement is reported and not yet over
}

// CrossCheckResult is one comparison.
type CrossCheckResult struct {
	// Known is false when the pods could not be listed: nothing compared.
	Known bool
	// Pods is the count of pods holding an address of the source.
	Pods int64
	// SourcePods is the source's count of addresses held by pods.
	SourcePods int64
	// Tolerance is the difference allowed this time.
	Tolerance int64
	// Reported is true while a disagreement is reported.
	Reported bool
}

// Difference is SourcePods − Pods.
func (r CrossCheckResult) Difference() int64 { return r.SourcePods - r.Pods }

// Used is the use to publish, given the source's: raised to the pods'
// count while a source that counts fewer is reported.
func (r CrossCheckResult) Used(sourceUsed int64) int64 {
	if r.Reported && r.Known && r.Pods > r.SourcePods {
		return sourceUsed + (r.Pods - r.SourcePods)
	}
	return sourceUsed
}

// HoldsPodIP tells whether the API server shows pod holding an address of
// the pod network: not on the host network, with status.podIPs, Running
// or Pending (its sandbox is up).
func HoldsPodIP(pod *corev1.Pod) bool {
	return pod != nil && !pod.Spec.HostNetwork && len(pod.Status.PodIPs) > 0 &&
		(pod.Status.Phase == corev1.PodRunning || pod.Status.Phase == corev1.PodPending)
}

// Check compares sourcePods, the source's count of addresses held by pods,
// with the node's pods that hold one (HoldsPodIP and filter).
func (c *PodIPCrossCheck) Check(ctx context.Context, source string, sourcePods int64, filter PodIPFilter) CrossCheckResult {
	logger := klog.FromContext(ctx)
	r := CrossCheckResult{SourcePods: sourcePods}
	pods, err := c.Pods.List(ctx)
	if err != nil {
		if msg := err.Error(); msg != c.unknownLogged {
			logger.Info("Pod-IP figures not cross-checked with the node's pods", "source", source, "reason", msg)
			c.unknownLogged = msg
		}
		c.setMetrics(source, r)
		return r
	}
	c.unknownLogged = ""
	r.Known = true
	for _, p := range pods {
		if HoldsPodIP(p) && (filter == nil || filter(p)) {
			r.Pods++
			logger.V(6).Info("Pod holds a pod IP", "pod", klog.KObj(p), "podIPs", p.Status.PodIPs)
		}
	}
	r.Tolerance = crossCheckTolerance(r.Pods, c.Tolerance, c.TolerancePercent)
	diff := r.Difference()
	if max(diff, -diff) > r.Tolerance {
		c.disagreeing++
	} else {
		c.disagreeing = 0
	}
	samples := max(c.Samples, 1)
	switch {
	case c.disagreeing >= samples && !c.reported:
		c.reported = true
		if c.Metrics != nil {
			c.Metrics.podIPCrossCheckDisagreements.WithLabelValues(source).Inc()
		}
		msg := fmt.Sprintf("Pod-IP source %s counts %d addresses held by pods but %d pods of this node hold one; more than the tolerance of %d for %d samples", source, sourcePods, r.Pods, r.Tolerance, c.disagreeing)
		if diff < 0 {
			msg += fmt.Sprintf(": publishing the pods' count, %d more in use than the source says", -diff)
		} else {
			msg += ": publishing the source's figure (leaked, cooling or non-pod addresses are taken all the same)"
		}
		logger.Info("Pod-IP figures disagree with the node's pods", "source", source, "sourcePods", sourcePods, "pods", r.Pods, "tolerance", r.Tolerance)
		if c.Event != nil {
			c.Event(ctx, corev1.EventTypeWarning, "PodIPFiguresDisagree", msg)
		}
	case c.disagreeing == 0 && c.reported:
		c.reported = false
		logger.Info("Pod-IP figures agree with the node's pods again", "source", source, "sourcePods", sourcePods, "pods", r.Pods)
		if c.Event != nil {
			c.Event(ctx, corev1.EventTypeNormal, "PodIPFiguresAgree", fmt.Sprintf("Pod-IP source %s counts %d addresses held by pods, %d pods of this node hold one: within the tolerance of %d", source, sourcePods, r.Pods, r.Tolerance))
		}
	}
	r.Reported = c.reported
	c.setMetrics(source, r)
	return r
}

func (c *PodIPCrossCheck) setMetrics(source string, r CrossCheckResult) {
	if c.Metrics == nil {
		return
	}
	if !r.Known {
		c.Metrics.podIPCrossCheckDifference.Reset()
		return
	}
	c.Metrics.podIPCrossCheckDifference.Reset() // one source at a time
	c.Metrics.podIPCrossCheckDifference.WithLabelValues(source).Set(float64(r.Difference()))
}

// Stop ends the pods' watch, if any.
func (c *PodIPCrossCheck) Stop() {
	if c != nil && c.Pods != nil {
		c.Pods.Stop()
	}
}

// crossCheckTolerance is max(abs, ⌈percent % of pods⌉); pods is at most a
// node's pod count, far from overflow.
func crossCheckTolerance(pods, abs int64, percent float64) int64 {
	return max(abs, (pods*int64(percent*100)+9999)/10000)
}

// NodePodWatch lists the pods bound to one node from a cache filled by a
// list and watch with fieldSelector spec.nodeName=<node>, as the kubelet
// watches its own: reading it every tick costs the API server nothing.
// The watch starts at the first List and runs until Stop. Only the fields
// HoldsPodIP and the sources' filters read are kept.
type NodePodWatch struct {
	*watchcache.Watch
}

// NewNodePodWatch returns a NodePodWatch of nodeName's pods.
func NewNodePodWatch(client kubernetes.Interface, nodeName string) *NodePodWatch {
	w := &NodePodWatch{watchcache.New("the node's pods", func() []cache.SharedIndexInformer {
		factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", nodeName).String()
		}))
		inf := factory.Core().V1().Pods().Informer()
		_ = inf.SetTransform(trimPod)
		return []cache.SharedIndexInformer{inf}
	})}
	// A tick's context ends with the tick; the watch runs on until Stop.
	w.Detached = true
	return w
}

// List implements NodePodLister.
func (w *NodePodWatch) List(ctx context.Context) ([]*corev1.Pod, error) {
	informers, err := w.Synced(ctx)
	if errors.Is(err, watchcache.ErrNotSynced) {
		return nil, ErrPodsNotSynced
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPodsNotSynced, err)
	}
	objs := informers[0].GetStore().List()
	pods := make([]*corev1.Pod, 0, len(objs))
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok {
			pods = append(pods, p)
		}
	}
	return pods, nil
}

// trimPod keeps what the cross-check reads: a node's pods' specs and
// statuses would otherwise sit in the agent's memory whole.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Annotations: p.Annotations},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIPs: p.Status.PodIPs},
	}, nil
}

// crossCheck passes a source's sample through the probe's PodIPCrossCheck,
// if any: s with its use raised while the source is reported to count
// fewer addresses than the node's pods hold. sourcePods is the source's
// count of addresses held by pods.
func (p *IPProbe) crossCheck(ctx context.Context, source string, s ipstats.NodeStats, sourcePods int64, filter PodIPFilter) ipstats.NodeStats {
	if p.CrossCheck == nil {
		return s
	}
	r := p.CrossCheck.Check(ctx, source, sourcePods, filter)
	if used := r.Used(s.Used); used != s.Used {
		s.Used = min(used, ipstats.MaxCount)
		s.Capacity = max(s.Capacity, s.Used)
	}
	return s
}
