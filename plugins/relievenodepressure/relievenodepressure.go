package relievenodepressure

import (
	"context"
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/descheduler/pkg/framework/pluginregistry"
	frameworktypes "sigs.k8s.io/descheduler/pkg/framework/types"

	"github.com/headroom-k8s/headroom/pkg/deleteorder"
	"github.com/headroom-k8s/headroom/pkg/ipstarved"
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
	// ReasonMalformedPIDPods is recorded on a Node above a threshold whose
	// headroom.dev/pid-pods does not parse: its pods' gains fall back to
	// their declared PIDs.
	ReasonMalformedPIDPods = "MalformedPIDPods"
	// ReasonMalformedMemoryPods is recorded on a Node above a threshold
	// whose headroom.dev/memory-pods does not parse: its pods' gains fall
	// back to their declared memory.
	ReasonMalformedMemoryPods = "MalformedMemoryPods"
	// ReasonMalformedSwap is recorded on a Node above the OOM threshold
	// whose headroom.dev/swap-total or headroom.dev/swap-pods does not
	// parse: the OOM model counts no swap on it.
	ReasonMalformedSwap = "MalformedSwap"
)

// maxEventReason is the API server's limit on an Event's reason; the
// evictor uses the eviction reason as the Event's reason.
const maxEventReason = 128

// ReasonNodePressureUnrelievable is the reason of the Warning Event on a
// Node above a threshold that no plan within the limits brings to or below
// it: nothing was evicted.
const ReasonNodePressureUnrelievable = "NodePressureUnrelievable"

// RelieveNodePressure evicts pods from nodes above a PID, memory or
// memory-shortfall threshold, lower priority first and then in the ReplicaSet controller's
// delete order, but only when a plan of evictions within the limits brings
// the node to or below its threshold (ideally its target).
type RelieveNodePressure struct {
	logger   klog.Logger
	handle   frameworktypes.Handle
	args     *RelieveNodePressureArgs
	order    deleteorder.Order
	include  sets.Set[string]
	exclude  sets.Set[string]
	selector labels.Selector
	// schedulers are the args' schedulerNames.
	schedulers sets.Set[string]
	// triggers are the enabled pressure triggers; rooms the figures a
	// replacement's destination is checked by (roomChecks).
	triggers []*trigger
	rooms    []roomCheck
	// pdbs lists PodDisruptionBudgets; nil when the handle has no informers.
	pdbs policylisters.PodDisruptionBudgetLister
	// recorder records the plugin's Events; it lives as long as the
	// plugin, across runs, so that it merges their repeats.
	recorder events.EventRecorder
	now      func() time.Time
	// store keeps the nodes' records across runs; without a client (never
	// in the descheduler) they live in memory only.
	store  *stateStore
	memory *state
	// sandboxFailures caches the kubelet's FailedCreatePodSandBox Events
	// for the ipStarved trigger; nil when it is off or there is no client.
	sandboxFailures *sandboxFailures
	// lookTurn picks the namespace whose waiting pods look at their Events
	// first in a run (byNamespaceInTurn); each cycle takes the next. It
	// starts from the clock, so that one-shot runs (the CronJob) do not
	// all start with the same namespace.
	lookTurn uint64
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

// New builds the plugin. Beyond the pods the handle indexes by node, which
// the descheduler always runs, it requests the PodDisruptionBudget informer
// here (informers requested later never start), and, with the ipStarved
// trigger on, builds its own cache of the kubelet's FailedCreatePodSandBox
// Events (sandboxfailures.go), which its first use starts; it reads no ReplicaSets:
// delete-order ranks come from the pods' controller owner UIDs, so the
// plugin works the same in dry-run mode, whose sandbox mirrors pods, nodes
// and PDBs but no workload controllers.
func New(ctx context.Context, args runtime.Object, handle frameworktypes.Handle) (frameworktypes.Plugin, error) {
	RegisterMetrics()
	var rec events.EventRecorder
	if client := handle.ClientSet(); client != nil {
		rec = newRecorder(ctx, client, defaultEventLimits, clock.RealClock{})
	}
	return newPlugin(ctx, args, handle, rec)
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

	p := &RelieveNodePressure{
		logger:     klog.FromContext(ctx).WithValues("plugin", PluginName),
		handle:     handle,
		args:       args,
		order:      deleteorder.Order{PriorityAnnotation: args.DeletePriorityAnnotation},
		selector:   labels.Everything(),
		schedulers: sets.New(args.SchedulerNames...),
		recorder:   recorder,
		now:        time.Now,
		lookTurn:   uint64(time.Now().UnixNano()),
	}
	if client := handle.ClientSet(); client != nil {
		ns, name, _ := parseStateConfigMap(args.StateConfigMap)
		p.store = &stateStore{client: client, namespace: ns, name: name}
	}
	if args.Namespaces != nil {
		p.include = sets.New(args.Namespaces.Include...)
		p.exclude = sets.New(args.Namespaces.Exclude...)
	}
	if args.LabelSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(args.LabelSelector)
		if err != nil {
			return nil, fmt.Errorf("labelSelector: %w", err)
		}
		p.selector = sel
	}
	found, err := checkFloorAgrees(args.SchedulerConfigFile, args)
	if err != nil {
		return nil, fmt.Errorf("%s args: %w", PluginName, err)
	}
	p.logger.V(1).Info("Room check's floor", "check", found)
	p.triggers = triggersOf(args)
	p.rooms = roomChecks(p.triggers)
	if client := handle.ClientSet(); client != nil && args.IPStarved != nil {
		if p.sandboxFailures, err = newSandboxFailures(ctx, client); err != nil {
			return nil, fmt.Errorf("%s: the cache of %s Events: %w", PluginName, ipstarved.ReasonFailedCreatePodSandBox, err)
		}
	}
	if f := handle.SharedInformerFactory(); f != nil {
		pdbs := f.Policy().V1().PodDisruptionBudgets()
		pdbs.Informer() // requested now, so that the descheduler starts it
		p.pdbs = pdbs.Lister()
	}
	return p, nil
}

// StateConfigMap is the namespace and name of the ConfigMap holding the
// plugin's record of the nodes across runs (args.StateConfigMap).
func (d *RelieveNodePressure) StateConfigMap() (namespace, name string) {
	namespace, name, _ = parseStateConfigMap(d.args.StateConfigMap)
	return namespace, name
}

// Name returns PluginName.
func (d *RelieveNodePressure) Name() string { return PluginName }

// Deschedule relieves each node in turn. It stops early only at the
// descheduler's total eviction limit or a spent total eviction budget; the
// per-node limit or budget moves it on to the next node and the
// per-namespace limit or budget excludes that namespace's pods for the
// rest of the cycle. It never waits for its Events to be written (see
// recorder).
func (d *RelieveNodePressure) Deschedule(ctx context.Context, nodes []*v1.Node) *frameworktypes.Status {
	logger := klog.FromContext(klog.NewContext(ctx, d.logger)).WithValues("ExtensionPoint", frameworktypes.DescheduleExtensionPoint)
	if r, ok := d.recorder.(*recorder); ok {
		r.beginRun(logger)
	}
	records, err := d.loadState(ctx)
	if err != nil {
		// Without its records the plugin could evict twice for one
		// pressure or skip the debounce: it evicts nothing this run.
		logger.Error(err, "Not relieving any node this run: the record of earlier runs could not be read")
		return &frameworktypes.Status{Err: err}
	}
	c := d.newCycle(logger, nodes, records)
	for _, node := range nodes {
		stop, err := c.relieve(ctx, node)
		if err == nil && !stop {
			stop, err = c.relieveStarved(ctx, node)
		}
		if err != nil {
			return &frameworktypes.Status{Err: err}
		}
		if stop {
			break
		}
	}
	if d.store == nil {
		d.memory = records
		return nil
	}
	if err := d.store.save(ctx, records, c.now, d.stateHorizon()); err != nil {
		// The evictions are made; the next run may not know of them and
		// waits, without the record, only for what the sample shows.
		logger.Error(err, "Could not record this run's observations and reliefs")
		return &frameworktypes.Status{Err: err}
	}
	return nil
}

// stateHorizon is how long the records are kept: stateHorizon, or twice
// the longest sample age of the triggers whose reliefs wait for a sample
// where that is longer; 0 where such a trigger's samples never go stale.
func (d *RelieveNodePressure) stateHorizon() time.Duration {
	horizon := stateHorizon
	for _, t := range d.triggers {
		if !t.recorded {
			continue
		}
		if t.sampleAge == 0 {
			return 0
		}
		horizon = max(horizon, 2*t.sampleAge)
	}
	return horizon
}

// loadState returns the nodes' records from earlier runs.
func (d *RelieveNodePressure) loadState(ctx context.Context) (*state, error) {
	if d.store == nil {
		if d.memory == nil {
			d.memory = newState()
		}
		return d.memory, nil
	}
	return d.store.load(ctx)
}

// cycle is the state of one Deschedule call.
type cycle struct {
	*RelieveNodePressure
	logger klog.Logger
	now    time.Time
	nodes  []*v1.Node
	// limited holds the namespaces that reached the per-namespace limit.
	limited sets.Set[string]
	// room is the other nodes' headroom, built on first use.
	room *room
	// readings caches the nodes' measured figures.
	readings map[figureKey]nodeFigure
	// disrupted counts this cycle's evictions by PodDisruptionBudget UID.
	disrupted map[types.UID]int32
	// state holds the nodes' records from earlier runs; the cycle updates
	// them.
	state *state
	// waiting tells, for each node above a threshold in fewer consecutive
	// samples than pressureSamples, how many it was seen in.
	waiting map[string]string
	// firstNamespace is the plugin's lookTurn for this cycle.
	firstNamespace uint64
}

// relieve plans the relief of node and carries the plan out; stop reports
// that the total eviction limit is reached.
func (c *cycle) relieve(ctx context.Context, node *v1.Node) (stop bool, err error) {
	n, st, p, err := c.planNode(node)
	if err != nil || p == nil {
		return false, err
	}
	if p.aboveThreshold {
		if budget, why := n.budgetHit(p); budget != "" {
			// Not unrelievable: the window slides, and the plan runs once
			// the budget allows it. No Event: a spent budget would repeat
			// it every run; the metric and the plan say so.
			n.budgetStop(budget, why)
			left, _, _, _ := n.windowLeft()
			return budget == BudgetTotal && left == 0, nil
		}
		n.unrelievable(st, p)
		return false, nil
	}
	n.logger.V(2).Info("Relief planned", "pods", podNames(p.steps))
	NodesTotal.WithLabelValues(ResultRelieved).Inc()
	defer c.recordRelief(n, st)
	return n.carryOut(ctx, st, p, func() *plan { return n.plan(st) })
}

// assess computes the node's projections by the enabled triggers.
func (c *cycle) assess(logger klog.Logger, node *v1.Node, pods []*v1.Pod) *pressure {
	st := &pressure{triggers: c.triggers, by: make([]projection, len(c.triggers))}
	for i, t := range c.triggers {
		p, err := c.assessTrigger(t, node, pods)
		if err != nil {
			logger.V(4).Info("Figure unknown; its trigger leaves the node alone", "figure", t.name, "reason", err.Error())
		}
		st.by[i] = p
	}
	return st
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

// warnNode logs err about an annotation of node, with what the plugin does
// instead (consequence), records a Warning Event on the Node and counts it in
// headroom_invalid_annotations_total, as warn does for a pod.
func (c *cycle) warnNode(logger klog.Logger, node *v1.Node, reason, annotation string, err error, consequence string) {
	logger.Info("Warning: malformed node annotation; "+consequence, "reason", reason, "annotation", annotation, "err", err.Error())
	headroommetrics.InvalidAnnotation(PluginName, annotation)
	if c.recorder != nil {
		c.recorder.Eventf(node, nil, v1.EventTypeWarning, reason, PluginName, "%s; %s", err.Error(), consequence)
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
