package relievenodepressure

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	clientset "k8s.io/client-go/kubernetes"
	policylisters "k8s.io/client-go/listers/policy/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"sigs.k8s.io/descheduler/pkg/framework/pluginregistry"
	frameworktypes "sigs.k8s.io/descheduler/pkg/framework/types"

	"github.com/headroom-k8s/headroom/pkg/deleteorder"
	"github.com/headroom-k8s/headroom/pkg/ipstarved"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure/eventrecorder"
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

// RelieveNodePressure evicts pods from nodes above a PID, memory or
// memory-shortfall threshold, lower priority first and then in the ReplicaSet controller's
// delete order, but only when a plan of evictions within the limits brings
// the node to or below its threshold (ideally its target).
type RelieveNodePressure struct {
	logger klog.Logger
	// ips is where the nodes' pod-IP figures come from (args' ipSource).
	ips      ipstats.Source
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
// Events (ipstarved_events.go), which its first use starts; it reads no ReplicaSets:
// delete-order ranks come from the pods' controller owner UIDs, so the
// plugin works the same in dry-run mode, whose sandbox mirrors pods, nodes
// and PDBs but no workload controllers.
func New(ctx context.Context, args runtime.Object, handle frameworktypes.Handle) (frameworktypes.Plugin, error) {
	RegisterMetrics()
	var rec events.EventRecorder
	if client := handle.ClientSet(); client != nil {
		rec = newRecorder(ctx, client, eventrecorder.DefaultLimits, clock.RealClock{})
	}
	return newPlugin(ctx, args, handle, rec)
}

// newRecorder is the plugin's Event recorder: Headroom's descheduler as
// the reporter, the Events its bounds drop counted in EventsDroppedTotal.
func newRecorder(ctx context.Context, client clientset.Interface, limits eventrecorder.Limits, clk clock.PassiveClock) *eventrecorder.Recorder {
	return eventrecorder.New(ctx, client, EventReportingController, limits, clk, EventsDroppedTotal.Inc)
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
	ips, err := ipSourceOf(args.IPSource)
	if err != nil {
		return nil, fmt.Errorf("%s args: ipSource %s: %w", PluginName, args.IPSource, err)
	}
	p.ips = ips
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

// Name returns PluginName.
func (d *RelieveNodePressure) Name() string { return PluginName }

// StateConfigMap is the namespace and name of the ConfigMap holding the
// plugin's record of the nodes across runs (args.StateConfigMap).
func (d *RelieveNodePressure) StateConfigMap() (namespace, name string) {
	namespace, name, _ = parseStateConfigMap(d.args.StateConfigMap)
	return namespace, name
}
