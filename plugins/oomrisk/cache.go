package oomrisk

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/pkg/sample"
	"github.com/headroom-k8s/headroom/plugins/internal/nodecache"
	"github.com/headroom-k8s/headroom/plugins/internal/nodestate"
)

// nodeEntry is OOMRisk's model of one node at one NodeInfo generation, kept
// in the plugins' shared per-node cache (plugins/internal/nodecache).
// Building the model sorts the node's containers and calls the kubelet's
// adj function per container: once per change of the node or its pods.
type nodeEntry struct {
	// slack is the allocatable memory left above the worst case of every
	// container on the node; -1 when the node is short already. A pod whose
	// worst case fits into it risks nothing and puts nothing at risk, so
	// Score needs no assessment.
	slack int64
	// capacity and allocatable are the node's memory in bytes, copied from
	// the model so that Score finds the incoming pod's worst case on the
	// node (allocatable) without reading the model (see podWorst).
	capacity, allocatable int64
	err                   error // the node's memory is unknown
	node                  *oomkill.Node
	// sampleErr is why the model is declared-only: the node's memory
	// sample is missing, stale or invalid (memstats.ParseNode); nil when
	// the model is built on the sample.
	sampleErr error
	// podsErr is why the sample's per-pod list was ignored, or nil.
	podsErr error
	// swapErr is why the sample's swap figures were ignored, or nil.
	swapErr error
	// staleAfter is when the memory sample the model is built on passes
	// maxSampleAge; zero when it never does or the model has none. A
	// sample ages without any Node update, so Score judges it each time,
	// and past it scores on the declared-only model (declaredModel).
	staleAfter time.Time
	node0      *corev1.Node
	pods       []*corev1.Pod
	declared   *declaredModel
}

// The entry's summary (nodecache.Summary), all that Score reads of it on a
// hit: slack, capacity and allocatable, and until when (Unix nanoseconds)
// the model's memory sample is fresh; a capacity of unknownMemory marks a
// node whose memory is unknown. Beside it the node keeps the score of the
// last pod shape scored on this model (a nodecache.Note, see scoreNote): in
// a cluster most pods come in a few shapes, and the node's model changes
// only with its generation.
const (
	sumSlack = iota
	sumCapacity
	sumAllocatable
	sumFreshUntil

	unknownMemory = -1
)

func (e *nodeEntry) summary() nodecache.Summary {
	if e.err != nil {
		return nodecache.Summary{sumSlack: -1, sumCapacity: unknownMemory, sumAllocatable: unknownMemory, sumFreshUntil: math.MaxInt64}
	}
	freshUntil := int64(math.MaxInt64)
	if !e.staleAfter.IsZero() {
		freshUntil = e.staleAfter.UnixNano()
	}
	return nodecache.Summary{sumSlack: e.slack, sumCapacity: e.capacity, sumAllocatable: e.allocatable, sumFreshUntil: freshUntil}
}

func (pl *OOMRisk) computeEntry(ctx context.Context, ni fwk.NodeInfo, prev *nodeEntry) nodeEntry {
	infos := ni.GetPods()
	pods := make([]*corev1.Pod, len(infos))
	for i, pi := range infos {
		pods[i] = pi.GetPod()
	}
	e := nodeEntry{slack: -1}
	opts, stats, err := oomkill.MemorySampleOf(ni.Node(), time.Now(), pl.maxSampleAge)
	if e.sampleErr = err; err == nil {
		e.podsErr, e.swapErr = stats.Pods.Err(), stats.SwapErr
	}
	pl.reportInvalid(ctx, ni.Node(), prev, &e)
	if err == nil && pl.maxSampleAge > 0 {
		e.staleAfter, e.node0, e.pods, e.declared = stats.SampledAt.Add(pl.maxSampleAge), ni.Node(), pods, &declaredModel{}
	}
	if prev != nil && prev.node != nil {
		// Pods the node held before keep what was read of their
		// declarations: a placement or a new sample does not read them
		// all again.
		opts = append(opts, oomkill.WithPrevious(prev.node))
	}
	n, err := oomkill.NewNode(ni.Node(), pods, pl.est, opts...)
	e.node, e.err = n, err
	if err == nil {
		e.capacity, e.allocatable = n.Capacity(), n.Allocatable()
		if n.Shortfall() == 0 && (!n.Measured() || n.ShortfallNow() == 0) {
			// A pod whose worst case fits both the worst-case slack and
			// the slack of the working set risks nothing in either view
			// (what it holds once started is at most its worst case).
			e.slack = n.Allocatable() - n.TotalWorst()
			if n.Measured() {
				e.slack = min(e.slack, n.Allocatable()-n.UsedNow())
			}
		}
	}
	return e
}

// declaredModel is a node's declared-only model, built on first use.
type declaredModel struct {
	once sync.Once
	node *oomkill.Node
}

// model returns the model Score assesses at now: the node's model, or, once
// its memory sample has passed maxSampleAge, the declared-only one (built
// on first use, once per entry). stale tells which.
func (e *nodeEntry) model(now time.Time, est oomkill.Estimate) (n *oomkill.Node, stale bool) {
	if e.staleAfter.IsZero() || !now.After(e.staleAfter) {
		return e.node, false
	}
	e.declared.once.Do(func() {
		// The same node and pods the measured model was built from, so
		// it cannot fail where that one did not.
		e.declared.node, _ = oomkill.NewNode(e.node0, e.pods, est, oomkill.WithPrevious(e.node))
	})
	if e.declared.node == nil {
		return e.node, false
	}
	return e.declared.node, true
}

// ignored returns the memory annotation of e's node that OOMRisk ignores,
// why, and what that means; none when nothing is ignored.
func (e *nodeEntry) ignored() nodestate.IgnoredAnnotation {
	if e == nil {
		return nodestate.IgnoredAnnotation{}
	}
	var ie *sample.InvalidError
	switch {
	case errors.As(e.sampleErr, &ie):
		return nodestate.IgnoredAnnotation{Key: ie.Key, Err: e.sampleErr, Consequence: "the node is judged on its pods' declared memory"}
	case e.podsErr != nil:
		return nodestate.IgnoredAnnotation{Key: memstats.AnnotationPods, Err: e.podsErr, Consequence: "the node's pods count at their declared memory"}
	case errors.As(e.swapErr, &ie):
		return nodestate.IgnoredAnnotation{Key: ie.Key, Err: e.swapErr, Consequence: "the node's swap is not counted in the kill order"}
	}
	return nodestate.IgnoredAnnotation{}
}

// reportInvalid reports e's ignored memory annotation once per distinct
// problem (nodestate.Reporter); prev is the node's previous entry, nil when
// there is none.
func (pl *OOMRisk) reportInvalid(ctx context.Context, node *corev1.Node, prev, e *nodeEntry) {
	nodestate.Reporter{Handle: pl.handle, Plugin: Name, Noun: "memory", EventReason: EventReasonInvalidMemory}.
		Report(ctx, node, prev.ignored(), e.ignored())
}
