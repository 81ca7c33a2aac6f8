package figure

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/plugins/internal/cyclestate"
	"github.com/headroom-k8s/headroom/plugins/internal/nodecache"
	"github.com/headroom-k8s/headroom/plugins/internal/nodestate"
	"github.com/headroom-k8s/headroom/plugins/internal/pluginlog"
)

// Plugin is a PreFilter, Filter, PreScore and Score plugin over one figure
// of samples S.
type Plugin[S Sample] struct {
	names    Names
	settings Settings
	figure   Figure[S]
	handle   fwk.Handle
	// Clock is the scheduler's clock: the age of every node's sample is
	// judged against it. Tests replace it.
	Clock clock.PassiveClock
	// nodeLister lets the pod-deletion queueing hint look at the pod's
	// node; nil when the handle has no informer factory.
	nodeLister corelisters.NodeLister
	nodes      nodecache.Store[entry[S]]
	cycles     cyclestate.Last[*cycle]
	// preFilter and preScore are the keys of what PreFilter and PreScore
	// write to the cycle's state.
	preFilter, preScore fwk.StateKey
}

var (
	_ fwk.PreFilterPlugin   = &Plugin[Sample]{}
	_ fwk.FilterPlugin      = &Plugin[Sample]{}
	_ fwk.PreScorePlugin    = &Plugin[Sample]{}
	_ fwk.ScorePlugin       = &Plugin[Sample]{}
	_ fwk.ScoreExtensions   = &Plugin[Sample]{}
	_ fwk.EnqueueExtensions = &Plugin[Sample]{}
	_ fwk.SignPlugin        = &Plugin[Sample]{}
)

func newPlugin[S Sample](ctx context.Context, h fwk.Handle, names Names, s Settings, f Figure[S]) *Plugin[S] {
	pl := &Plugin[S]{names: names, settings: s, figure: f, handle: h, Clock: clock.RealClock{},
		preFilter: fwk.StateKey("PreFilter" + names.Plugin), preScore: fwk.StateKey("PreScore" + names.Plugin)}
	if h != nil && h.SharedInformerFactory() != nil {
		pl.nodeLister = h.SharedInformerFactory().Core().V1().Nodes().Lister()
	}
	pl.nodes = nodecache.New(h, pl.computeEntry, (*entry[S]).summary, bounds...)
	nodestate.Start(ctx, h, pl.NodeStateConfig())
	headroommetrics.Register()
	return pl
}

// Name returns the plugin's name.
func (pl *Plugin[S]) Name() string { return pl.names.Plugin }

// Settings returns the args every figure plugin has, as configured.
func (pl *Plugin[S]) Settings() Settings { return pl.settings }

// NodeStateConfig is what the count of nodes by headroom state
// (nodestate) needs to judge a node as the plugin does: the sample read as
// the plugin reads it, without an age limit, and maxSampleAge.
func (pl *Plugin[S]) NodeStateConfig() nodestate.Config {
	return nodestate.Config{Plugin: pl.names.Plugin, Kind: pl.names.Kind, MaxSampleAge: pl.settings.MaxSampleAge, Read: pl.readSampledAt}
}

func (pl *Plugin[S]) readSampledAt(node *corev1.Node, now time.Time) (time.Time, error) {
	s, err := pl.figure.Read(node, now)
	if err != nil {
		return time.Time{}, err
	}
	return s.SampleTime(), nil
}

// cycle is what PreFilter and PreScore work out once per cycle: the pod's
// need and the cycle's time, against which the age of every node's sample
// is judged.
type cycle struct {
	need int64
	now  time.Time
	// fitsEvery covers the NodeInfos where the pod passes Filter for
	// certain (fitsEveryNode); PreFilter sets it.
	fitsEvery nodecache.Bounds
}

// Clone returns the state itself: it is never modified.
func (s *cycle) Clone() fwk.StateData { return s }

// newCycle works the pod's need out, and tells its owner when its
// annotation is malformed: a log line, a metric and a Warning Event on the
// pod. It returns nil for a pod that takes none of the figure.
func (pl *Plugin[S]) newCycle(ctx context.Context, pod *corev1.Pod) *cycle {
	need, takes, err := pl.figure.Need(pod)
	if !takes {
		return nil
	}
	if err != nil && pl.names.PodAnnotation != "" {
		// Structured logging has no warning level; Info at V(0) is its warning.
		klog.FromContext(ctx).Info("Malformed "+pl.names.Kind+"s annotation on pod", "pod", klog.KObj(pod), "err", err)
		headroommetrics.InvalidAnnotation(pl.names.Plugin, pl.names.PodAnnotation)
		if pl.handle != nil && pl.handle.EventRecorder() != nil {
			pl.handle.EventRecorder().Eventf(pod, nil, corev1.EventTypeWarning, pl.names.InvalidPodEvent, "Scheduling", "%s", err)
		}
	}
	return &cycle{need: need, now: pl.Clock.Now()}
}

// cycleOf returns what PreFilter or PreScore wrote under key, or works it
// out afresh (without warning again) when that extension point did not run.
func (pl *Plugin[S]) cycleOf(state fwk.CycleState, key fwk.StateKey, pod *corev1.Pod) *cycle {
	if s, ok := pl.cycles.Read(state, key); ok && s != nil {
		return s
	}
	need, _, _ := pl.figure.Need(pod)
	return &cycle{need: need, now: pl.Clock.Now()}
}

// PreFilter skips Filter for a pod that takes none of the figure; for the
// others it works the pod's need out once for the cycle, and whether every
// node has room for it (then Filter passes the snapshot's nodes without a
// look at them).
func (pl *Plugin[S]) PreFilter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	s := pl.newCycle(ctx, pod)
	if s == nil {
		return nil, fwk.NewStatus(fwk.Skip)
	}
	pl.nodes.Prune()
	s.fitsEvery = pl.fitsEveryNode(ctx, state, s.need)
	pl.cycles.Write(state, pl.preFilter, s)
	return nil, nil
}

// PreFilterExtensions returns nil: Filter reads the pods of the NodeInfo it
// is given, so nominated pods and preemption victims need no extra state.
func (pl *Plugin[S]) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

// Filter rejects a node whose estimated free units, less the pod's need,
// would fall below the floor. A node whose headroom is unknown passes.
func (pl *Plugin[S]) Filter(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	node := ni.Node()
	if node == nil {
		return fwk.AsStatus(errors.New("node not found"))
	}
	s := pl.cycleOf(state, pl.preFilter, pod)
	if s.fitsEvery.Covers(ni) {
		return nil
	}
	sum, ok := pl.known(ctx, ni, s.now)
	if !ok {
		if v := pluginlog.V(ctx, 4); v.Enabled() {
			v.Info("Node's "+pl.names.Kind+" headroom is unknown, not filtered", "pod", klog.KObj(pod), "node", klog.KObj(node),
				"reason", pl.nodes.Get(ctx, ni).unknownReason(pl.names.Kind, s.now, pl.settings.MaxSampleAge))
		}
		return nil
	}
	if s.need <= room(sum) {
		return nil
	}
	if v := pluginlog.V(ctx, 4); v.Enabled() {
		e := pl.nodes.Get(ctx, ni)
		v.Info("Node has too little "+pl.names.Kind+" headroom for the pod", "pod", klog.KObj(pod), "node", klog.KObj(node),
			"need", s.need, "estimatedFree", e.free, "floor", e.floor, "estimatedUsed", e.used,
			"reportedUsed", e.sample.ReportedUsed(), "sampledAt", e.sample.SampleTime(), "sample", e.sample)
	}
	return fwk.NewStatus(fwk.Unschedulable, pl.names.FilterReason)
}

// PreScore skips scoring for a pod that takes none of the figure, when
// every candidate keeps Ample free after placement, and when no candidate
// has known headroom: all of them would score the same.
func (pl *Plugin[S]) PreScore(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, nodes []fwk.NodeInfo) *fwk.Status {
	s, _ := pl.cycles.Read(state, pl.preFilter)
	if s == nil {
		if s = pl.newCycle(ctx, pod); s == nil {
			return fwk.NewStatus(fwk.Skip)
		}
		pl.nodes.Prune()
	}
	if pl.ampleEverywhere(ctx, state, nodes, s.need, s.now) || !pl.anyKnown(ctx, nodes, s.now) {
		return fwk.NewStatus(fwk.Skip)
	}
	pl.cycles.Write(state, pl.preScore, s)
	return nil
}

// Score returns the node's estimated free units after placing the pod, up
// to Ample; NormalizeScore turns them into [0, MaxNodeScore].
func (pl *Plugin[S]) Score(ctx context.Context, state fwk.CycleState, pod *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	node := ni.Node()
	if node == nil {
		return 0, fwk.AsStatus(errors.New("node not found"))
	}
	s := pl.cycleOf(state, pl.preScore, pod)
	sum, ok := pl.known(ctx, ni, s.now)
	if !ok {
		if v := pluginlog.V(ctx, 4); v.Enabled() {
			v.Info("Node's "+pl.names.Kind+" headroom is unknown, neutral score", "pod", klog.KObj(pod), "node", klog.KObj(node),
				"reason", pl.nodes.Get(ctx, ni).unknownReason(pl.names.Kind, s.now, pl.settings.MaxSampleAge), "score", pl.settings.UnknownScore)
		}
		return UnknownRaw, nil
	}
	return pl.scoreOf(sum, s.need), nil
}

// ScoreExtensions returns the plugin itself: raw scores are free units.
func (pl *Plugin[S]) ScoreExtensions() fwk.ScoreExtensions { return pl }

// NormalizeScore scales the free units after placement (Score's raw
// scores) so that the node with the most scores MaxNodeScore and the
// others in proportion; nodes with unknown headroom get UnknownScore, by
// default the mean of the known nodes' scores.
func (pl *Plugin[S]) NormalizeScore(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, scores fwk.NodeScoreList) *fwk.Status {
	Normalize(scores, pl.settings.UnknownScore)
	return nil
}

// SignPod lets the scheduler's opportunistic batching reuse results for
// pods that the figure treats alike; a profile with an enabled plugin that
// cannot sign pods loses batching altogether.
func (pl *Plugin[S]) SignPod(_ context.Context, pod *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return []fwk.SignFragment{pl.figure.Sign(pod)}, nil
}

var errNotObject = errors.New("args are not a runtime.Object")

func errorf(plugin string, err error) error { return fmt.Errorf("%s: %w", plugin, err) }
