package relievenodepressure

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"sigs.k8s.io/descheduler/pkg/descheduler/evictions"
	podutil "sigs.k8s.io/descheduler/pkg/descheduler/pod"
	"sigs.k8s.io/descheduler/pkg/framework/pluginregistry"
	frameworktypes "sigs.k8s.io/descheduler/pkg/framework/types"

	"github.com/headroom-k8s/headroom/pkg/deleteorder"
	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// PluginName is the name of the plugin in a DeschedulerPolicy.
const PluginName = "RelieveNodePressure"

// EventReportingController names Headroom as the reporter of the Warning
// Events about malformed pod annotations.
const EventReportingController = "headroom-descheduler"

// Reasons of the Warning Events about malformed pod annotations.
const (
	ReasonMalformedDeletePriority = "MalformedDeletePriority"
	ReasonMalformedPodPIDs        = "MalformedPodPIDs"
)

// maxEventReason is the API server's limit on an Event's reason; the
// evictor uses the eviction reason as the Event's reason.
const maxEventReason = 128

// RelieveNodePressure evicts pods from nodes above a PID or memory-shortfall
// threshold, in the ReplicaSet controller's delete order, until each node is
// projected at or below its target.
type RelieveNodePressure struct {
	logger   klog.Logger
	handle   frameworktypes.Handle
	args     *RelieveNodePressureArgs
	order    deleteorder.Order
	victims  podutil.FilterFunc
	recorder events.EventRecorder
	now      func() time.Time
}

var _ frameworktypes.DeschedulePlugin = &RelieveNodePressure{}

// Utilities returns what the descheduler's registry needs to build the
// plugin from a DeschedulerPolicy.
func Utilities() pluginregistry.PluginUtilities {
	return pluginregistry.PluginUtilities{
		PluginBuilder:      New,
		PluginType:         &RelieveNodePressure{},
		PluginArgInstance:  &RelieveNodePressureArgs{},
		PluginArgValidator: ValidateRelieveNodePressureArgs,
		PluginArgDefaulter: SetDefaults_RelieveNodePressureArgs,
	}
}

// New builds the plugin. It needs no informer beyond the pods the handle
// indexes by node, which the descheduler always runs, and it reads no
// ReplicaSets: delete-order ranks come from the pods' controller owner UIDs,
// so the plugin works the same in dry-run mode, whose sandbox holds no
// workload controllers.
func New(ctx context.Context, args runtime.Object, handle frameworktypes.Handle) (frameworktypes.Plugin, error) {
	recorder, err := newRecorder(ctx, handle)
	if err != nil {
		return nil, err
	}
	return newPlugin(ctx, args, handle, recorder)
}

func newPlugin(ctx context.Context, obj runtime.Object, handle frameworktypes.Handle, recorder events.EventRecorder) (*RelieveNodePressure, error) {
	headroommetrics.Register()
	in, ok := obj.(*RelieveNodePressureArgs)
	if !ok {
		return nil, fmt.Errorf("want args of type RelieveNodePressureArgs, got %T", obj)
	}
	if err := ValidateRelieveNodePressureArgs(in); err != nil {
		return nil, err
	}
	// The descheduler defaults args before it builds plugins; callers that
	// do not are served the same.
	args := in.DeepCopy()
	SetDefaults_RelieveNodePressureArgs(args)

	var include, exclude sets.Set[string]
	if args.Namespaces != nil {
		include = sets.New(args.Namespaces.Include...)
		exclude = sets.New(args.Namespaces.Exclude...)
	}
	// PreEvictionFilter (nodeFit, which lists nodes) runs later, only for the
	// pods the plugin is about to evict.
	victims, err := podutil.NewOptions().
		WithFilter(handle.Evictor().Filter).
		WithNamespaces(include).
		WithoutNamespaces(exclude).
		WithLabelSelector(args.LabelSelector).
		BuildFilterFunc()
	if err != nil {
		return nil, fmt.Errorf("building the pod filter: %w", err)
	}
	return &RelieveNodePressure{
		logger:   klog.FromContext(ctx).WithValues("plugin", PluginName),
		handle:   handle,
		args:     args,
		order:    deleteorder.Order{PriorityAnnotation: args.DeletePriorityAnnotation},
		victims:  victims,
		recorder: recorder,
		now:      time.Now,
	}, nil
}

// newRecorder returns a recorder for Warning Events on pods. The handle
// offers none and the evictor's is private, so the plugin records through
// the handle's client: in dry-run mode that is the descheduler's sandbox,
// so a dry run writes no Events to the cluster, as upstream's evictor does.
func newRecorder(ctx context.Context, handle frameworktypes.Handle) (events.EventRecorder, error) {
	client := handle.ClientSet()
	if client == nil {
		return nil, nil
	}
	broadcaster := events.NewEventBroadcasterAdapterWithContext(ctx, client)
	broadcaster.StartRecordingToSink(ctx.Done())
	go func() {
		<-ctx.Done()
		broadcaster.Shutdown()
	}()
	return broadcaster.NewRecorder(EventReportingController), nil
}

// Name returns PluginName.
func (d *RelieveNodePressure) Name() string { return PluginName }

// Deschedule relieves each node in turn. It stops early only at the
// descheduler's total eviction limit; the per-node limit moves it on to the
// next node and the per-namespace limit excludes that namespace's pods for
// the rest of the cycle.
func (d *RelieveNodePressure) Deschedule(ctx context.Context, nodes []*v1.Node) *frameworktypes.Status {
	logger := klog.FromContext(klog.NewContext(ctx, d.logger)).WithValues("ExtensionPoint", frameworktypes.DescheduleExtensionPoint)
	c := &cycle{RelieveNodePressure: d, logger: logger, now: d.now(), limited: sets.New[string]()}
	for _, node := range nodes {
		stop, err := c.relieve(ctx, node)
		if err != nil {
			return &frameworktypes.Status{Err: err}
		}
		if stop {
			break
		}
	}
	return nil
}

// cycle is the state of one Deschedule call.
type cycle struct {
	*RelieveNodePressure
	logger klog.Logger
	now    time.Time
	// limited holds the namespaces that reached the per-namespace limit.
	limited sets.Set[string]
}

// relieve evicts pods from node until it is projected at or below target.
// stop reports that the total eviction limit is reached.
func (c *cycle) relieve(ctx context.Context, node *v1.Node) (stop bool, err error) {
	logger := c.logger.WithValues("node", klog.KObj(node))
	// Every pod that is not Succeeded or Failed takes part: the figures count
	// them, and the delete order's ranks count a controller's active pods.
	pods, err := podutil.ListPodsOnANode(node.Name, c.handle.GetPodsAssignedToNodeFunc(), nil)
	if err != nil {
		return false, fmt.Errorf("listing the pods on node %s: %w", node.Name, err)
	}
	st := c.assess(logger, node, pods)
	if !st.triggered() {
		logger.V(4).Info("Node within thresholds", st.keysAndValues("")...)
		return false, nil
	}
	logger.V(2).Info("Node above threshold, relieving it", append(st.keysAndValues(""), st.thresholdsAndTargets()...)...)

	order := slices.Clone(pods)
	c.order.Sort(order, c.now)
	candidate := make([]bool, len(order))
	for i, pod := range order {
		if candidate[i] = c.victims(pod); candidate[i] {
			c.checkPriority(logger, pod)
		}
	}

	for i, pod := range order {
		if !st.pending() {
			break
		}
		podLogger := logger.WithValues("pod", klog.KObj(pod), "position", i+1, "of", len(order))
		if !candidate[i] {
			podLogger.V(4).Info("Skipping pod: the evictor's filter, the namespaces or the label selector exclude it")
			continue
		}
		if c.limited.Has(pod.Namespace) {
			podLogger.V(4).Info("Skipping pod: its namespace reached the eviction limit")
			continue
		}
		freedPIDs, reasons := c.gain(podLogger, st, pod)
		if len(reasons) == 0 {
			podLogger.V(4).Info("Skipping pod: evicting it would not move the node toward its target")
			continue
		}
		if !c.handle.Evictor().PreEvictionFilter(pod) {
			podLogger.V(4).Info("Skipping pod: the evictor's pre-eviction filter rejects it")
			continue
		}
		before := st.keysAndValues("before")
		reason := eventReason(fmt.Sprintf("%s: node %s %s", PluginName, node.Name, strings.Join(reasons, ", ")))
		err := c.handle.Evictor().Evict(ctx, pod, evictions.EvictOptions{StrategyName: PluginName, Reason: reason})
		if err == nil {
			if st.pids != nil {
				st.pids.used = max(st.pids.used-freedPIDs, 0)
			}
			if st.oom != nil {
				st.oom.evicted = append(st.oom.evicted, pod)
				st.oom.shortfall = st.oom.model.ShortfallWithout(st.oom.evicted...)
			}
			podLogger.V(2).Info("Evicted pod to relieve node", append(append(before, st.keysAndValues("after")...), "reason", reason)...)
			continue
		}
		var (
			nodeLimit      *evictions.EvictionNodeLimitError
			namespaceLimit *evictions.EvictionNamespaceLimitError
			totalLimit     *evictions.EvictionTotalLimitError
		)
		switch {
		case errors.As(err, &nodeLimit):
			logger.V(2).Info("Node reached the per-node eviction limit; moving on", st.keysAndValues("")...)
			return false, nil
		case errors.As(err, &totalLimit):
			logger.V(2).Info("Reached the total eviction limit; stopping", st.keysAndValues("")...)
			return true, nil
		case errors.As(err, &namespaceLimit):
			podLogger.V(2).Info("Namespace reached the per-namespace eviction limit; skipping its pods")
			c.limited.Insert(pod.Namespace)
		default:
			// E.g. a PodDisruptionBudget refused it: the projection stands,
			// the next pod in order may do.
			podLogger.V(2).Info("Eviction failed; trying the next pod", "err", err.Error())
		}
	}
	if st.pending() {
		logger.V(2).Info("Node still above target: no more pods to evict", st.keysAndValues("")...)
	} else {
		logger.V(2).Info("Node relieved", st.keysAndValues("")...)
	}
	return false, nil
}

// assess computes the node's figures for the enabled triggers.
func (c *cycle) assess(logger klog.Logger, node *v1.Node, pods []*v1.Pod) *pressure {
	st := &pressure{}
	if t := c.args.PIDs; t != nil {
		p, err := assessPIDs(t, node, pods, c.now)
		if err != nil {
			logger.V(4).Info("PID use unknown; the PID trigger leaves the node alone", "reason", err.Error())
		}
		st.pids = p
	}
	if t := c.args.OOM; t != nil {
		p, err := assessOOM(t, node, pods)
		if err != nil {
			logger.V(4).Info("Memory unknown; the OOM trigger leaves the node alone", "reason", err.Error())
		}
		st.oom = p
	}
	return st
}

// gain returns the PIDs evicting pod frees, and a reason for each pending
// trigger the eviction moves toward its target (none: it helps none).
func (c *cycle) gain(logger klog.Logger, st *pressure, pod *v1.Pod) (freedPIDs int64, reasons []string) {
	if p := st.pids; p != nil {
		n, err := pidstats.PodPIDs(pod, p.defaultPodPIDs)
		if err != nil {
			c.warn(logger, pod, ReasonMalformedPodPIDs, err)
		}
		freedPIDs = n
		if p.pending() && n > 0 {
			reasons = append(reasons, fmt.Sprintf("PIDs %s used > threshold %d%%", percent(p.start, p.allocatable), p.threshold))
		}
	}
	if p := st.oom; p.pending() && p.shortfallWithout(pod) < p.shortfall {
		reasons = append(reasons, fmt.Sprintf("OOM shortfall %s of memory > threshold %d%%",
			percent(p.start, p.model.Allocatable()), p.threshold))
	}
	return freedPIDs, reasons
}

// checkPriority reports a malformed delete-priority annotation; the order
// already counts it as 0.
func (c *cycle) checkPriority(logger klog.Logger, pod *v1.Pod) {
	if _, err := c.order.Priority(pod); err != nil {
		c.warn(logger, pod, ReasonMalformedDeletePriority, err)
	}
}

// warn logs err about pod, records a Warning Event on it and counts it in
// headroom_invalid_annotations_total.
func (c *cycle) warn(logger klog.Logger, pod *v1.Pod, reason string, err error) {
	logger.Info("Warning: malformed pod annotation", "pod", klog.KObj(pod), "reason", reason, "err", err.Error())
	annotation := pidstats.AnnotationPodPIDs
	if reason == ReasonMalformedDeletePriority {
		annotation = c.order.PriorityAnnotation
	}
	headroommetrics.InvalidAnnotation(PluginName, annotation)
	if c.recorder != nil {
		c.recorder.Eventf(pod, nil, v1.EventTypeWarning, reason, PluginName, "%s", err.Error())
	}
}

// eventReason keeps an eviction reason within the API server's limit on an
// Event's reason, which the evictor copies it into.
func eventReason(s string) string {
	if len(s) <= maxEventReason {
		return s
	}
	return strings.ToValidUTF8(s[:maxEventReason], "")
}
