package oomrisk

import (
	"context"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/plugins/internal/nodecache"
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
	// the model so that Score finds the incoming pod's worst case for the
	// node's shape without reading the model (see podWorst).
	capacity, allocatable int64
	err                   error // the node's memory is unknown
	node                  *oomkill.Node
	// memo is the score of the last pod shape scored on this model of the
	// node: in a cluster most pods come in a few shapes, and the node's
	// model changes only with its generation.
	memo *memo
}

// memo holds a node's last score; Score runs in parallel over nodes, and
// a copy of a NodeInfo shares its generation's entry.
type memo struct{ atomic.Pointer[scoreMemo] }

type scoreMemo struct {
	shape string
	score int64
}

// The entry's summary (nodecache.Summary), all that Score reads of it on a
// hit: slack, capacity and allocatable; a capacity of unknownMemory marks a
// node whose memory is unknown.
const (
	sumSlack = iota
	sumCapacity
	sumAllocatable

	unknownMemory = -1
)

func (e *nodeEntry) summary() nodecache.Summary {
	if e.err != nil {
		return nodecache.Summary{sumSlack: -1, sumCapacity: unknownMemory, sumAllocatable: unknownMemory}
	}
	return nodecache.Summary{sumSlack: e.slack, sumCapacity: e.capacity, sumAllocatable: e.allocatable}
}

func (pl *OOMRisk) computeEntry(_ context.Context, ni fwk.NodeInfo, _ *nodeEntry) nodeEntry {
	infos := ni.GetPods()
	pods := make([]*corev1.Pod, len(infos))
	for i, pi := range infos {
		pods[i] = pi.GetPod()
	}
	n, err := oomkill.NewNode(ni.Node(), pods, pl.est)
	e := nodeEntry{node: n, err: err, slack: -1, memo: &memo{}}
	if err == nil {
		e.capacity, e.allocatable = n.Capacity(), n.Allocatable()
		if n.Shortfall() == 0 {
			e.slack = n.Allocatable() - n.TotalWorst()
		}
	}
	return e
}
