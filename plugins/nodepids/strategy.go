package nodepids

import (
	"math/bits"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// strategy is NodePIDs' arithmetic, apart from the framework wiring: the
// floor of PIDs a node keeps free, whether a pod fits, and how free PIDs
// become a score. Every figure is a non-negative int64 and nothing here can
// overflow, whatever the annotations say.
type strategy struct {
	minFreePIDs    int64
	minFreePercent int64
}

// floor is pidstats.Floor.Of, the rule the descheduler shares.
func (s strategy) floor(allocatable int64) int64 {
	return pidstats.Floor{MinFreePIDs: s.minFreePIDs, MinFreePercent: s.minFreePercent}.Of(allocatable)
}

// fits reports whether a node with free PIDs (estimated) and the given
// allocatable can take a pod of need PIDs and still keep its floor free.
func (s strategy) fits(free, allocatable, need int64) bool {
	return pidstats.Floor{MinFreePIDs: s.minFreePIDs, MinFreePercent: s.minFreePercent}.Fits(free, allocatable, need)
}

// freeAfter is what a node has left after placing a pod of need PIDs, the
// raw score: never negative.
func freeAfter(free, need int64) int64 {
	if need >= free {
		return 0
	}
	return free - need
}

// unknownRaw marks, between Score and NormalizeScore, a node whose PID
// headroom is unknown; NormalizeScore gives it the configured score.
const unknownRaw int64 = -1

// scale maps a raw score (free PIDs after placement) onto
// [0, MaxNodeScore] relative to the best node: ⌊raw·100/best⌋. Only a node
// with the most free PIDs reaches MaxNodeScore, so with NodePIDs alone each
// pod goes to a node with the most free PIDs. The product is taken in 128
// bits, so any int64 works.
func scale(raw, best int64) int64 {
	if best <= 0 || raw <= 0 {
		return fwk.MinNodeScore
	}
	raw = min(raw, best)
	hi, lo := bits.Mul64(uint64(raw), uint64(fwk.MaxNodeScore))
	// raw ≤ best, so hi < best and the quotient fits in 64 bits.
	q, _ := bits.Div64(hi, lo, uint64(best))
	return int64(q)
}
