// Package nodepids is Headroom's NodePIDs scheduler plugin. It keeps pods
// off nodes that are short of process IDs and prefers nodes with more free
// PIDs. Kubernetes keeps no PID account in the scheduler (Node allocatable has
// no pids), so the figures come from the headroom.dev/pid-* annotations that
// headroom-node-agent writes, read and estimated by pkg/pidstats. See
// README.md for the model and its arguments.
package nodepids

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/apis/config/scheme"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/apis/config/validation"
	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/internal/cyclestate"
	"github.com/headroom-k8s/headroom/plugins/internal/nodecache"
	"github.com/headroom-k8s/headroom/plugins/internal/nodesample"
	"github.com/headroom-k8s/headroom/plugins/internal/nodestate"
)

// Name is the plugin's name in the registry and in KubeSchedulerConfiguration.
const Name = "NodePIDs"

const (
	// ErrReasonTooFewPIDs is Filter's reason. It names no node and no number
	// so that the scheduler can aggregate it across nodes in the pod's
	// FailedScheduling event: "0/5 nodes are available: 2 node(s) had too
	// few free PIDs, ...".
	ErrReasonTooFewPIDs = "node(s) had too few free PIDs"
	// EventReasonInvalidPIDs is the reason of the Warning Event on a pod
	// whose headroom.dev/pids annotation is malformed.
	EventReasonInvalidPIDs = "InvalidPIDsAnnotation"
	// EventReasonInvalidNodePIDs is the reason of the Warning Event on a
	// Node whose headroom.dev/pid-* annotations are invalid.
	EventReasonInvalidNodePIDs = "InvalidPIDAnnotation"

	preFilterStateKey fwk.StateKey = "PreFilter" + Name
	preScoreStateKey  fwk.StateKey = "PreScore" + Name
	podPIDsSignerName              = "headroom.dev/NodePIDs.PodPIDs"
)

// NodePIDs is a PreFilter, Filter, PreScore and Score plugin. Its wiring, its
// per-node cache, the unknown-node rule and NormalizeScore are the ones
// NodeIPs has (nodesample.Core).
type NodePIDs struct {
	strategy       strategy
	defaultPodPIDs int64
	pods           cyclestate.Last[*podState] // the pod's PIDs and the cycle's time
	nodesample.Core[nodeEntry]
}

var (
	_ fwk.PreFilterPlugin   = &NodePIDs{}
	_ fwk.FilterPlugin      = &NodePIDs{}
	_ fwk.PreScorePlugin    = &NodePIDs{}
	_ fwk.ScorePlugin       = &NodePIDs{}
	_ fwk.ScoreExtensions   = &NodePIDs{}
	_ fwk.EnqueueExtensions = &NodePIDs{}
	_ fwk.SignPlugin        = &NodePIDs{}
)

// New builds the plugin from its args, which the kube-scheduler's scheme has
// decoded and defaulted into the internal *config.NodePIDsArgs. Nil args mean
// the defaults.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := scheme.PluginArgs[config.NodePIDsArgs](Name, obj, &configv1.NodePIDsArgs{})
	if err != nil {
		return nil, err
	}
	if err := validation.ValidateNodePIDsArgs(field.NewPath("NodePIDsArgs"), args); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	pl := &NodePIDs{
		strategy:       strategy{minFreePIDs: args.MinFreePIDs, minFreePercent: args.MinFreePercent},
		defaultPodPIDs: args.DefaultPodPIDs,
		Core:           nodesample.NewCore[nodeEntry](h, args.MaxSampleAge.Duration, args.UnknownNodeScore, args.AmpleFreePIDs),
	}
	pl.Cache = nodesample.NewCache(h, pl.computeEntry, (*nodeEntry).summary)
	nodestate.Start(ctx, h, pl.nodeStateConfig())
	headroommetrics.Register()
	return pl, nil
}

// nodeStateConfig is what the count of nodes by headroom state
// (nodestate) needs to judge a node as this plugin does: the sample read
// as computeEntry reads it, without an age limit, and maxSampleAge.
func (pl *NodePIDs) nodeStateConfig() nodestate.Config {
	return nodestate.Config{Plugin: Name, Kind: "PID", MaxSampleAge: pl.MaxSampleAge, Read: readSample}
}

// readSample reads a node's sample as computeEntry does, without an age
// limit.
func readSample(node *corev1.Node, now time.Time) (time.Time, error) {
	s, err := pidstats.ParseNode(node.Annotations, now, 0)
	return s.SampledAt, err
}

// Name returns the plugin's name.
func (pl *NodePIDs) Name() string { return Name }

// podState is the incoming pod's PIDs, worked out once per cycle, and the
// cycle's time, against which the age of every node's sample is judged.
type podState struct {
	pids int64
	now  time.Time
	// fitsEvery covers the NodeInfos where the pod passes Filter for
	// certain (nodesample.Core.FitsEveryNode); PreFilter sets it.
	fitsEvery nodecache.Bounds
}

// Clone returns the state itself: it is never modified.
func (s *podState) Clone() fwk.StateData { return s }

// newPodState reads the pod's headroom.dev/pids annotation. A malformed
// value counts as DefaultPodPIDs, one above the most a pod can hold as that
// most (it fits nowhere): its owner is told with a log line and a Warning
// Event on the pod.
func (pl *NodePIDs) newPodState(ctx context.Context, pod *corev1.Pod) *podState {
	pids, err := pidstats.PodPIDs(pod, pl.defaultPodPIDs)
	if err != nil {
		// Structured logging has no warning level; Info at V(0) is its warning.
		klog.FromContext(ctx).Info("Malformed PIDs annotation on pod", "pod", klog.KObj(pod), "err", err)
		headroommetrics.InvalidAnnotation(Name, pidstats.AnnotationPodPIDs)
		if pl.Handle != nil && pl.Handle.EventRecorder() != nil {
			pl.Handle.EventRecorder().Eventf(pod, nil, corev1.EventTypeWarning, EventReasonInvalidPIDs, "Scheduling", "%s", err)
		}
	}
	return &podState{pids: pids, now: pl.Clock.Now()}
}

// stateOf returns the state PreFilter or PreScore wrote under key, or works
// it out afresh (without warning again) when that extension point did not
// run.
func (pl *NodePIDs) stateOf(state fwk.CycleState, key fwk.StateKey, pod *corev1.Pod) *podState {
	if s, ok := pl.pods.Read(state, key); ok && s != nil {
		return s
	}
	pids, _ := pidstats.PodPIDs(pod, pl.defaultPodPIDs)
	return &podState{pids: pids, now: pl.Clock.Now()}
}

// PreFilter works out the pod's PIDs once for the cycle, and whether every
// node has room for them (then Filter passes the snapshot's nodes without a
// look at them).
func (pl *NodePIDs) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	s := pl.newPodState(ctx, pod)
	pl.Cache.Prune()
	s.fitsEvery = pl.FitsEveryNode(ctx, state, s.pids)
	pl.pods.Write(state, preFilterStateKey, s)
	return nil, nil
}

// PreFilterExtensions returns nil: Filter reads the pods of the NodeInfo it
// is given, so nominated pods and preemption victims need no extra state.
func (pl *NodePIDs) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter rejects a node whose estimated free PIDs, less the pod's, would
// fall below the floor. A node whose PID headroom is unknown passes.
func (pl *NodePIDs) Filter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	node := ni.Node()
	if node == nil {
		return fwk.AsStatus(errors.New("node not found"))
	}
	s := pl.stateOf(state, preFilterStateKey, pod)
	if s.fitsEvery.Covers(ni) {
		return nil
	}
	sum, ok := pl.Known(ctx, ni, s.now)
	if !ok {
		if v := klog.FromContext(ctx).V(4); v.Enabled() {
			v.Info("Node's PID headroom is unknown, not filtered", "pod", klog.KObj(pod), "node", klog.KObj(node),
				"reason", pl.Cache.Get(ctx, ni).unknownReason(s.now, pl.MaxSampleAge))
		}
		return nil
	}
	if s.pids <= nodesample.Room(sum) {
		return nil
	}
	if v := klog.FromContext(ctx).V(4); v.Enabled() {
		e := pl.Cache.Get(ctx, ni)
		alloc := e.stats.Allocatable()
		v.Info("Node has too few free PIDs for the pod", "pod", klog.KObj(pod), "node", klog.KObj(node),
			"podPIDs", s.pids, "estimatedFree", e.free, "floor", pl.strategy.floor(alloc), "allocatable", alloc,
			"reportedUsed", e.stats.Used, "estimatedUsed", e.estimatedUsed, "sampledAt", e.stats.SampledAt)
	}
	return fwk.NewStatus(fwk.Unschedulable, ErrReasonTooFewPIDs)
}

// PreScore carries the pod's PIDs to Score (working them out here when
// PreFilter is not enabled), and skips scoring when no candidate node has
// known PID headroom: all of them would get UnknownNodeScore.
func (pl *NodePIDs) PreScore(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	s, _ := pl.pods.Read(state, preFilterStateKey)
	if s == nil {
		s = pl.newPodState(ctx, pod)
		pl.Cache.Prune()
	}
	if pl.AmpleEverywhere(ctx, state, nodes, s.pids, s.now) || !pl.AnyKnown(ctx, nodes, s.now) {
		return fwk.NewStatus(fwk.Skip)
	}
	pl.pods.Write(state, preScoreStateKey, s)
	return nil
}

// Score returns the node's estimated free PIDs after placing the pod;
// NormalizeScore turns them into [0, MaxNodeScore].
func (pl *NodePIDs) Score(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	node := ni.Node()
	if node == nil {
		return 0, fwk.AsStatus(errors.New("node not found"))
	}
	s := pl.stateOf(state, preScoreStateKey, pod)
	sum, ok := pl.Known(ctx, ni, s.now)
	if !ok {
		if v := klog.FromContext(ctx).V(4); v.Enabled() {
			v.Info("Node's PID headroom is unknown, neutral score", "pod", klog.KObj(pod), "node", klog.KObj(node),
				"reason", pl.Cache.Get(ctx, ni).unknownReason(s.now, pl.MaxSampleAge), "score", pl.UnknownScore)
		}
		return nodesample.UnknownRaw, nil
	}
	return pl.ScoreOf(sum, s.pids), nil
}

// ScoreExtensions returns the plugin itself: raw scores are PID counts.
func (pl *NodePIDs) ScoreExtensions() fwk.ScoreExtensions { return pl }

// SignPod lets the scheduler's opportunistic batching reuse results for pods
// that need the same number of PIDs; a profile with an enabled plugin that
// cannot sign pods loses batching altogether.
func (pl *NodePIDs) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	pids, _ := pidstats.PodPIDs(pod, pl.defaultPodPIDs)
	return []fwk.SignFragment{{Key: podPIDsSignerName, Value: pids}}, nil
}
