package figure

import (
	"context"
	"errors"
	"iter"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/pkg/sample"
	"github.com/headroom-k8s/headroom/plugins/internal/nodecache"
	"github.com/headroom-k8s/headroom/plugins/internal/nodestate"
)

// entry is what the plugin knows of one node at one NodeInfo generation,
// kept in the per-node state. Everything Filter and Score compare is worked
// out here, once per change of the node or its pods, so that they cost a
// lookup and a comparison.
type entry[S Sample] struct {
	// free is the estimated free units; room is free less the floor, the
	// most a pod may need and still pass Filter (negative when none).
	free, room int64
	// staleAfter is when the sample becomes too old to use; zero without
	// an age limit.
	staleAfter time.Time
	err        error // from Figure.Read: the headroom is unknown

	// node is the Node object the sample was read from. Pod changes bump
	// the generation but keep the object, so the annotations need not be
	// read (nor an invalid one reported) again.
	node   *corev1.Node
	sample S
	// used is the sample's use estimated with the node's pods; floor is
	// what the node keeps free.
	used, floor int64
}

// summary is what Filter and Score read of the entry on a hit.
func (e *entry[S]) summary() nodecache.Summary {
	return summarize(e.free, e.room, e.staleAfter, e.err)
}

// unknownReason returns why the node's headroom is unknown at now, or nil;
// it allocates, so it is for log lines only.
func (e *entry[S]) unknownReason(kind string, now time.Time, maxAge time.Duration) error {
	if e.err != nil {
		return e.err
	}
	return sample.CheckAge(kind, e.sample.SampleTime(), now, maxAge)
}

// computeEntry is the per-node state's ComputeFunc: it reads the node's
// sample (unless prev was read from the same Node object) and estimates its
// use from the node's pods. The clock is only used by Read's clock-skew
// check; the age of a sample is judged at each use, since it changes
// without the generation changing.
func (pl *Plugin[S]) computeEntry(ctx context.Context, ni fwk.NodeInfo, prev *entry[S]) entry[S] {
	node := ni.Node()
	e := entry[S]{node: node}
	if prev != nil && prev.node == node && !isLive(pl.figure) {
		e.sample, e.err, e.staleAfter = prev.sample, prev.err, prev.staleAfter
	} else {
		e.sample, e.err = pl.figure.Read(node, pl.Clock.Now())
		pl.reportInvalid(ctx, node, prev, &e)
		if e.err == nil && pl.settings.MaxSampleAge > 0 {
			e.staleAfter = e.sample.SampleTime().Add(pl.settings.MaxSampleAge)
		}
	}
	if e.err == nil {
		est := pl.figure.Estimate(e.sample, pods(ni))
		e.used, e.free, e.floor = est.ReportedUsed(), est.Free(), pl.figure.Floor(est)
		e.room = max(e.free, 0) - e.floor
	}
	return e
}

// live is a Figure whose samples change without the Node object changing
// (NodeIPs with Calico's figures): it is read at every change of the
// NodeInfo, not only of the Node.
type live interface{ Live() bool }

func isLive(f any) bool {
	l, ok := f.(live)
	return ok && l.Live()
}

// pods yields the pods of a NodeInfo without copying them.
func pods(ni fwk.NodeInfo) iter.Seq[*corev1.Pod] {
	return func(yield func(*corev1.Pod) bool) {
		for _, pi := range ni.GetPods() {
			if !yield(pi.GetPod()) {
				return
			}
		}
	}
}

// invalid returns the annotation of e's node that the plugin ignores, and
// why: an invalid figure (the node's headroom counts as unknown) or, the
// sample valid, one the figure ignores (Sample.Ignored); none when nothing
// is ignored.
func (pl *Plugin[S]) invalid(e *entry[S]) nodestate.IgnoredAnnotation {
	if e == nil {
		return nodestate.IgnoredAnnotation{}
	}
	var ie *sample.InvalidError
	if errors.As(e.err, &ie) {
		return nodestate.IgnoredAnnotation{Key: ie.Key, Err: e.err, Consequence: "the node's " + pl.names.Noun + " headroom counts as unknown"}
	}
	if ig, ok := any(e.sample).(ignorer); ok && e.err == nil {
		if key, err := ig.IgnoredAnnotation(); key != "" {
			return nodestate.IgnoredAnnotation{Key: key, Err: err, Consequence: "the node's reported " + pl.names.Noun + " use counts alone"}
		}
	}
	return nodestate.IgnoredAnnotation{}
}

// ignorer is a sample that names an annotation of its own the figure
// ignores while the sample counts (pidstats.NodeStats: an invalid
// per-pod list).
type ignorer interface {
	IgnoredAnnotation() (key string, err error)
}

// reportInvalid reports e's ignored annotation once per distinct problem
// (nodestate.Reporter); prev is the node's previous entry, nil when there
// is none.
func (pl *Plugin[S]) reportInvalid(ctx context.Context, node *corev1.Node, prev, e *entry[S]) {
	nodestate.Reporter{Handle: pl.handle, Plugin: pl.names.Plugin, Noun: pl.names.Noun, EventReason: pl.names.InvalidNodeEvent}.
		Report(ctx, node, pl.invalid(prev), pl.invalid(e))
}

// Estimate is what the plugin knows of a node at one NodeInfo generation.
type Estimate struct {
	// Err is why the node's headroom is unknown, whatever the sample's
	// age: missing or invalid annotations. The other fields are
	// meaningful when it is nil.
	Err error
	// SampledAt is the sample's time.
	SampledAt time.Time
	// Used is the sample's use estimated with the node's pods, Free the
	// free units that leaves, Floor what the node keeps free.
	Used, Free, Floor int64
}

// Estimate returns what the plugin knows of ni, as Filter and Score judge
// it (from the per-node state).
func (pl *Plugin[S]) Estimate(ctx context.Context, ni fwk.NodeInfo) Estimate {
	e := pl.nodes.Get(ctx, ni)
	if e.err != nil {
		return Estimate{Err: e.err}
	}
	return Estimate{SampledAt: e.sample.SampleTime(), Used: e.used, Free: e.free, Floor: e.floor}
}
