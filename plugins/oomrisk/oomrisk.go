// Package oomrisk is Headroom's OOMRisk scheduler plugin. It scores nodes by
// what a placement does to the node's risk of a node-level OOM kill: how much
// of the incoming pod the kernel's OOM killer would take, and how much memory
// of pods already there the placement newly puts in its way. The model is
// pkg/oomkill; the README describes it with a worked example.
package oomrisk

import (
	"context"
	"fmt"
	"sync/atomic"
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
	"github.com/headroom-k8s/headroom/pkg/memstats"
	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/plugins/internal/cyclestate"
	"github.com/headroom-k8s/headroom/plugins/internal/nodecache"
	"github.com/headroom-k8s/headroom/plugins/internal/nodestate"
	"github.com/headroom-k8s/headroom/plugins/internal/pluginlog"
)

// Name is the plugin's name in the registry and in KubeSchedulerConfiguration.
const Name = "OOMRisk"

const preScoreStateKey fwk.StateKey = "PreScore" + Name

// EventReasonInvalidMemory is the reason of the Warning Event on a Node
// whose memory annotations OOMRisk ignores.
const EventReasonInvalidMemory = "InvalidMemoryAnnotation"

// neutralScore is the score of a node whose memory is unknown: neither
// favoured nor avoided.
const neutralScore = (fwk.MaxNodeScore + fwk.MinNodeScore) / 2

// OOMRisk is a PreScore and Score plugin.
type OOMRisk struct {
	handle   fwk.Handle
	strategy strategy
	est      oomkill.Estimate
	// maxSampleAge: an older memory sample leaves the node declared-only.
	maxSampleAge time.Duration
	cache        *nodecache.Cache[nodeEntry]
	shapes       shapeIDs
	pods         cyclestate.Last[*preScoreState] // the incoming pod, prepared
}

var (
	_ fwk.PreScorePlugin = &OOMRisk{}
	_ fwk.ScorePlugin    = &OOMRisk{}
	_ fwk.SignPlugin     = &OOMRisk{}
)

// New builds the plugin from its args, which the kube-scheduler's scheme has
// decoded and defaulted into the internal *config.OOMRiskArgs. Nil args mean
// the defaults.
func New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := scheme.PluginArgs[config.OOMRiskArgs](Name, obj, &configv1.OOMRiskArgs{})
	if err != nil {
		return nil, err
	}
	if err := validation.ValidateOOMRiskArgs(field.NewPath("OOMRiskArgs"), args); err != nil {
		return nil, fmt.Errorf("%s: %w", Name, err)
	}
	pl := &OOMRisk{
		handle:       h,
		strategy:     strategy{ownRiskWeight: args.OwnRiskWeight, collateralWeight: args.CollateralWeight},
		est:          estimateOf(args),
		maxSampleAge: args.MaxSampleAge.Duration,
	}
	pl.cache = nodecache.New(h, pl.computeEntry, (*nodeEntry).summary, everyNodeBounds...)
	nodestate.Start(ctx, h, nodestate.Config{Plugin: Name, Kind: "memory", MaxSampleAge: pl.maxSampleAge, Read: readSample})
	headroommetrics.Register()
	return pl, nil
}

// readSample reads a node's memory sample as computeEntry does, for the
// count of nodes by sample state (nodestate).
func readSample(node *corev1.Node, now time.Time) (time.Time, error) {
	s, err := memstats.ParseNode(node.Annotations, now, 0)
	return s.SampledAt, err
}

func estimateOf(args *config.OOMRiskArgs) oomkill.Estimate {
	return oomkill.Estimate{
		RequestMultiplierPercent:      args.NoLimitRequestPercent,
		FractionOfAllocatablePermille: args.NoLimitAllocatablePermille,
	}
}

// Name returns the plugin's name.
func (pl *OOMRisk) Name() string { return Name }

// preScoreState carries the incoming pod, prepared once per cycle, to Score.
type preScoreState struct {
	in *oomkill.Incoming
	// shape numbers the pod's memory shape (shapeKey), on which alone, with
	// the node's model, its score depends: Score reuses a node's score for
	// the last pod of the same shape (scoreNote). 0 when unknown.
	shape uint32
	// now is when the cycle judges memory samples' age: once per cycle,
	// not once per node.
	now time.Time
	// worst is the pod's worst case on the allocatable memory Score saw
	// last: the nodes of a cluster mostly share a few shapes, and the worst
	// case depends only on the allocatable memory (the estimate is the
	// plugin's).
	worst atomic.Pointer[shapeWorst]
}

type shapeWorst struct {
	allocatable, podWorst int64
}

// podWorst returns the pod's worst-case memory on the summarised node,
// in.WorstOn(node) for the node's model (built with est), from the cycle's
// last allocatable memory when it matches. It reads neither the node's
// model nor the pod's plan for the node's shape (the kubelet's
// oom_score_adj), which the worst case does not depend on: WorstWithin.
func (s *preScoreState) podWorst(sum nodecache.Summary, est oomkill.Estimate) int64 {
	allocatable := sum[sumAllocatable]
	if w := s.worst.Load(); w != nil && w.allocatable == allocatable {
		return w.podWorst
	}
	w := &shapeWorst{allocatable: allocatable, podWorst: s.in.WorstWithin(allocatable, est)}
	s.worst.Store(w)
	return w.podWorst
}

// Clone returns the state itself: it describes the same pod, and it is safe
// for concurrent use (Incoming is, and worst is an atomic memo).
func (s *preScoreState) Clone() fwk.StateData { return s }

// PreScore prepares the pod for Score, or skips scoring for a Guaranteed pod
// and for a pod that fits every node's slack (nothingAtRisk): in both cases
// every node would score the same.
//
// A Guaranteed pod gets oom_score_adj −997, which puts it behind every
// Burstable and BestEffort container in the kill order, and its worst case
// equals its request, which NodeResourcesFit already fits into allocatable.
// Its own risk is nil wherever the others can cover a shortfall, and it adds
// no memory beyond its request: its score would be the same on every node,
// so there is nothing to rank.
func (pl *OOMRisk) PreScore(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	in := oomkill.NewIncoming(pod)
	if in.QOS() == corev1.PodQOSGuaranteed {
		return fwk.NewStatus(fwk.Skip)
	}
	pl.cache.Prune()
	// A lower least slack or capacity, or a greater allocatable memory,
	// can only put more at risk: a claim for nodecache.Claim.
	if b, ok := pl.cache.Claim(ctx, state, nodes, func(b nodecache.Bounds) bool { return pl.nothingAtRisk(in, b) }); ok {
		if v := klog.FromContext(ctx).V(4); v.Enabled() {
			v.Info("OOMRisk: the pod fits every node's memory slack, every node would score the same", "pod", klog.KObj(pod),
				"podWorst", in.WorstWithin(b.Greatest[sumAllocatable], pl.est), "leastSlack", b.Least[sumSlack], "score", fwk.MaxNodeScore)
		}
		return fwk.NewStatus(fwk.Skip)
	}
	pl.pods.Write(state, preScoreStateKey, &preScoreState{in: in, shape: pl.shapes.id(shapeKey(pod)), now: time.Now()})
	return nil
}

// everyNodeBounds are what OOMRisk's cache keeps over the snapshot's nodes
// (nodecache.Refresh) for nothingAtRisk: the least slack, the least
// capacity (unknownMemory when a node's memory is unknown) and the greatest
// allocatable memory.
var everyNodeBounds = []nodecache.Bound{{Figure: sumSlack}, {Figure: sumCapacity}, {Figure: sumAllocatable, Greatest: true}}

// nothingAtRisk reports whether Score would give every node the bounds hold
// for (every node of the snapshot, and PreScore's candidates) MaxNodeScore:
// every node's memory is known, and the pod's worst case, at its greatest
// (on the node with the most allocatable memory), fits the least slack, so
// that no node has a shortfall with the pod (Score's first case). Scoring
// would then change no ranking, and PreScore skips it.
func (pl *OOMRisk) nothingAtRisk(in *oomkill.Incoming, b nodecache.Bounds) bool {
	if b.Least[sumCapacity] == unknownMemory || b.Greatest[sumAllocatable] < 0 {
		return false // a node of unknown memory scores neutralScore; or no nodes
	}
	return in.WorstWithin(b.Greatest[sumAllocatable], pl.est) <= b.Least[sumSlack]
}

// Score scores the node by the cost of the placement's OOM risk: MaxNodeScore
// when it puts nothing at risk, less the weighted share at risk.
func (pl *OOMRisk) Score(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	s := pl.incoming(state, pod)
	in := s.in
	if in.QOS() == corev1.PodQOSGuaranteed {
		return fwk.MaxNodeScore, nil // as PreScore's Skip: the same everywhere
	}
	if ni.Node() == nil {
		return 0, fwk.AsStatus(fmt.Errorf("node not found"))
	}
	v := pluginlog.V(ctx, 4)
	sum, note := pl.cache.SummaryNote(ctx, ni)
	if sum[sumCapacity] == unknownMemory {
		if v.Enabled() {
			v.Info("OOMRisk: node memory unknown, neutral score", "pod", klog.KObj(pod), "node", klog.KObj(ni.Node()), "err", pl.cache.Get(ctx, ni).err, "score", neutralScore)
		}
		return neutralScore, nil
	}
	podWorst := s.podWorst(sum, pl.est)
	if podWorst <= sum[sumSlack] && !v.Enabled() {
		// No shortfall even with the pod: Assess would find no risk and no
		// collateral, a cost of 0.
		return fwk.MaxNodeScore, nil
	}
	// The slack above is the measured model's, never more than the
	// declared-only model's (a measured worst case is at least the declared
	// one), so its shortcut holds for a stale sample too; the note does not.
	fresh := s.now.UnixNano() <= sum[sumFreshUntil]
	if score, ok := s.noted(note); ok && fresh && !v.Enabled() {
		return score, nil
	}
	model, stale := pl.cache.Get(ctx, ni).model(s.now, pl.est)
	a := model.Assess(in)
	score, cost := pl.strategy.score(a, podWorst)
	if !stale {
		s.note(note, score)
	}
	if v.Enabled() {
		v.Info("OOMRisk score", "pod", klog.KObj(pod), "node", klog.KObj(ni.Node()),
			"shortfallBefore", a.ShortfallBefore, "shortfallAfter", a.ShortfallAfter,
			"rank", a.Rank, "riskPPM", a.RiskPPM, "collateralBytes", a.CollateralBytes,
			"costPPM", cost, "score", score)
	}
	return score, nil
}

// incoming returns the pod prepared by PreScore, or prepares it when Score
// is called without PreScore.
func (pl *OOMRisk) incoming(state fwk.CycleState, pod *corev1.Pod) *preScoreState {
	if s, ok := pl.pods.Read(state, preScoreStateKey); ok && s != nil && s.in.Pod() == pod {
		return s
	}
	return &preScoreState{in: oomkill.NewIncoming(pod), now: time.Now()}
}

// ScoreExtensions returns nil: scores are absolute (a node that risks nothing
// scores MaxNodeScore however the others fare), so there is nothing to
// normalize.
func (pl *OOMRisk) ScoreExtensions() fwk.ScoreExtensions { return nil }
