// Package nodeips is Headroom's NodeIPs scheduler plugin. It keeps pods off
// nodes whose CNI IPAM has no pod IPs left and prefers nodes with more free
// pod IPs. The scheduler never sees pod IPs (maxPods says nothing about the
// IPAM's pool, and leaked allocations shrink it silently), so the figures
// come from the headroom.dev/ip-* annotations that headroom-node-agent
// writes, read and estimated by pkg/ipstats. See README.md.
package nodeips

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
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/plugins/internal/cyclestate"
	"github.com/headroom-k8s/headroom/plugins/internal/nodecache"
	"github.com/headroom-k8s/headroom/plugins/internal/nodesample"
	"github.com/headroom-k8s/headroom/plugins/internal/nodestate"
)

// Name is the plugin's name in the registry and in KubeSchedulerConfiguration.
const Name = "NodeIPs"

const (
	// ErrReasonNoFreeIPs is Filter's reason. It names no node and no number
	// so that the scheduler can aggregate it across nodes in the pod's
	// FailedScheduling event: "0/5 nodes are available: 2 node(s) had no
	// free pod IPs, ...".
	ErrReasonNoFreeIPs = "node(s) had no free pod IPs"
	// EventReasonInvalidIPs is the reason of the Warning Event on a Node
	// whose pod-IP annotations are invalid (NodeIPs then counts its pod-IP
	// headroom as unknown), named as NodePIDs names its Events.
	EventReasonInvalidIPs = "InvalidIPAnnotation"

	preFilterStateKey fwk.StateKey = "PreFilter" + Name
	preScoreStateKey  fwk.StateKey = "PreScore" + Name
	// hostNetworkSignerName follows the framework's rule for signers that
	// return one field: the field's path.
	hostNetworkSignerName = "v1.Pod.Spec.HostNetwork"
)

// NodeIPs is a PreFilter, Filter, PreScore and Score plugin. Its wiring, its
// per-node cache, the unknown-node rule and NormalizeScore are the ones
// NodePIDs has (nodesample.Core).
type NodeIPs struct {
	minFreeIPs int64
	cycles     cyclestate.Last[*cycleState] // the cycle's time
	nodesample.Core[nodeEntry]
}

var (
	_ fwk.PreFilterPlugin   = &NodeIPs{}
	_ fwk.FilterPlugin      = &NodeIPs{}
	_ fwk.PreScorePlugin    = &NodeIPs{}
	_ fwk.ScorePlugin       = &NodeIPs{}
	_ fwk.ScoreExtensions   = &NodeIPs{}
	_ fwk.EnqueueExtensions = &NodeIPs{}
	_ fwk.SignPlugin        = &NodeIPs{}
)

// New builds the plugin from its args, which the kube-scheduler's scheme has
// decoded and defaulted into the internal *config.NodeIPsArgs. Nil args mean
// the defaults.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := scheme.PluginArgs[config.NodeIPsArgs](Name, obj, &configv1.NodeIPsArgs{})
	if err != nil {
		return nil, err
	}
	if err := validation.ValidateNodeIPsArgs(field.NewPath("NodeIPsArgs"), args); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	pl := &NodeIPs{
		minFreeIPs: args.MinFreeIPs,
		Core:       nodesample.NewCore[nodeEntry](h, args.MaxSampleAge.Duration, args.UnknownNodeScore, args.AmpleFreeIPs),
	}
	pl.Cache = nodesample.NewCache(h, pl.computeEntry, (*nodeEntry).summary)
	nodestate.Start(ctx, h, pl.nodeStateConfig())
	headroommetrics.Register()
	return pl, nil
}

// nodeStateConfig is what the count of nodes by headroom state
// (nodestate) needs to judge a node as this plugin does: the sample read
// as computeEntry reads it, without an age limit, and maxSampleAge.
func (pl *NodeIPs) nodeStateConfig() nodestate.Config {
	return nodestate.Config{Plugin: Name, Kind: kind, MaxSampleAge: pl.MaxSampleAge, Read: readSample}
}

// readSample reads a node's sample as computeEntry does, without an age
// limit.
func readSample(node *corev1.Node, now time.Time) (time.Time, error) {
	s, err := ipstats.ParseNode(node.Annotations, now, 0)
	return s.SampledAt, err
}

// Name returns the plugin's name.
func (pl *NodeIPs) Name() string { return Name }

// podIPs is what a pod that takes pod IPs takes of a node's published
// figures: one (ipstats: the figures are one family's, and every pod on the
// pod network takes one address of each family).
const podIPs = 1

// cycleState is the cycle's time, against which the age of every node's
// sample is judged. The pod's need is always one IP: PreFilter and PreScore
// skip pods that take none.
type cycleState struct {
	now time.Time
	// fitsEvery covers the NodeInfos where the pod passes Filter for
	// certain (nodesample.Core.FitsEveryNode); PreFilter sets it.
	fitsEvery nodecache.Bounds
}

// Clone returns the state itself: it is never modified.
func (s *cycleState) Clone() fwk.StateData { return s }

// now returns the cycle's time that PreFilter or PreScore wrote under key,
// or the clock's when that extension point did not run.
func (pl *NodeIPs) now(state fwk.CycleState, key fwk.StateKey) time.Time {
	return pl.cycle(state, key).now
}

// cycle returns what PreFilter or PreScore wrote under key, or the clock's
// time when that extension point did not run.
func (pl *NodeIPs) cycle(state fwk.CycleState, key fwk.StateKey) *cycleState {
	if s, ok := pl.cycles.Read(state, key); ok && s != nil {
		return s
	}
	return &cycleState{now: pl.Clock.Now()}
}

// PreFilter skips Filter for a pod that takes no pod IP (spec.hostNetwork):
// no node's IPAM pool is a reason to keep it off. For the others it notes
// the cycle's time, and whether every node has a free IP for it (then Filter
// passes the snapshot's nodes without a look at them).
func (pl *NodeIPs) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	if !ipstats.TakesIP(pod) {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	pl.Cache.Prune()
	pl.cycles.Write(state, preFilterStateKey, &cycleState{now: pl.Clock.Now(), fitsEvery: pl.FitsEveryNode(ctx, state, podIPs)})
	return nil, nil
}

// PreFilterExtensions returns nil: Filter reads the pods of the NodeInfo it
// is given, so nominated pods and preemption victims need no extra state.
func (pl *NodeIPs) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter rejects a node whose estimated free pod IPs, less the pod's one,
// would fall below MinFreeIPs. A node whose pod-IP headroom is unknown
// passes.
func (pl *NodeIPs) Filter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	node := ni.Node()
	if node == nil {
		return fwk.AsStatus(errors.New("node not found"))
	}
	s := pl.cycle(state, preFilterStateKey)
	if s.fitsEvery.Covers(ni) {
		return nil
	}
	now := s.now
	sum, ok := pl.Known(ctx, ni, now)
	if !ok {
		if v := klog.FromContext(ctx).V(4); v.Enabled() {
			v.Info("Node's pod-IP headroom is unknown, not filtered", "pod", klog.KObj(pod), "node", klog.KObj(node),
				"reason", pl.Cache.Get(ctx, ni).unknownReason(now, pl.MaxSampleAge))
		}
		return nil
	}
	if nodesample.Room(sum) >= podIPs {
		return nil
	}
	if v := klog.FromContext(ctx).V(4); v.Enabled() {
		e := pl.Cache.Get(ctx, ni)
		v.Info("Node has no free pod IP for the pod", "pod", klog.KObj(pod), "node", klog.KObj(node),
			"estimatedFree", e.free, "floor", pl.minFreeIPs, "capacity", e.stats.Capacity,
			"reportedUsed", e.stats.Used, "estimatedUsed", e.estimatedUsed, "sampledAt", e.stats.SampledAt)
	}
	return fwk.NewStatus(fwk.Unschedulable, ErrReasonNoFreeIPs)
}

// PreScore skips scoring for a pod that takes no pod IP, and when no
// candidate node has known pod-IP headroom: all of them would get
// UnknownNodeScore.
func (pl *NodeIPs) PreScore(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	if !ipstats.TakesIP(pod) {
		return fwk.NewStatus(fwk.Skip)
	}
	s, _ := pl.cycles.Read(state, preFilterStateKey)
	if s == nil {
		s = &cycleState{now: pl.Clock.Now()}
		pl.Cache.Prune()
	}
	if pl.AmpleEverywhere(ctx, state, nodes, podIPs, s.now) || !pl.AnyKnown(ctx, nodes, s.now) {
		return fwk.NewStatus(fwk.Skip)
	}
	pl.cycles.Write(state, preScoreStateKey, s)
	return nil
}

// Score returns the node's estimated free pod IPs after placing the pod;
// NormalizeScore turns them into [0, MaxNodeScore].
func (pl *NodeIPs) Score(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	node := ni.Node()
	if node == nil {
		return 0, fwk.AsStatus(errors.New("node not found"))
	}
	now := pl.now(state, preScoreStateKey)
	sum, ok := pl.Known(ctx, ni, now)
	if !ok {
		if v := klog.FromContext(ctx).V(4); v.Enabled() {
			v.Info("Node's pod-IP headroom is unknown, neutral score", "pod", klog.KObj(pod), "node", klog.KObj(node),
				"reason", pl.Cache.Get(ctx, ni).unknownReason(now, pl.MaxSampleAge), "score", pl.UnknownScore)
		}
		return nodesample.UnknownRaw, nil
	}
	return pl.ScoreOf(sum, podIPs), nil
}

// ScoreExtensions returns the plugin itself: raw scores are IP counts.
func (pl *NodeIPs) ScoreExtensions() fwk.ScoreExtensions { return pl }

// SignPod lets the scheduler's opportunistic batching reuse results for
// pods that NodeIPs treats alike: every pod on the pod network takes one
// IP, a host-network pod none. A profile with an enabled plugin that cannot
// sign pods loses batching altogether.
func (pl *NodeIPs) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return []fwk.SignFragment{{Key: hostNetworkSignerName, Value: pod.Spec.HostNetwork}}, nil
}
