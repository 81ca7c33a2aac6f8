package oomkill

// Assessment is what placing an incoming pod on a node does to the node's
// OOM kill state.
type Assessment struct {
	// ShortfallBefore and ShortfallAfter are the node's worst-case
	// shortfall without and with the pod, in bytes.
	ShortfallBefore, ShortfallAfter int64
	// RiskPPM is the pod's own risk in parts per million of its worst-case
	// memory: the share of it the killer would take to cover
	// ShortfallAfter. 0 is safe, 1e6 means all of it is needed.
	RiskPPM int64
	// CollateralBytes is the worst-case memory of existing containers put
	// at risk by the pod: at risk with it minus at risk without it.
	CollateralBytes int64
	// Rank is the position of the pod's first container in the merged kill
	// order, 0-based; -1 for a pod without containers.
	Rank int

	// Now is the same assessment on what the node's containers hold now,
	// for a model built on a memory sample (Measured); zero otherwise.
	Measured bool
	Now      NowAssessment
}

// NowAssessment is an Assessment on the node's measured memory: the node's
// working set (Node.UsedNow) with the pod at what it will hold when it
// starts, against allocatable, the killer freeing what each container holds.
type NowAssessment struct {
	ShortfallBefore, ShortfallAfter int64
	// RiskPPM is in parts per million of what the pod will hold (PodNow).
	RiskPPM int64
	// CollateralBytes is what existing containers put at risk hold.
	CollateralBytes int64
	// PodNow is what the pod will hold, in bytes.
	PodNow int64
}

// Assess places in on the node. It runs in O(k·log n) for k incoming and n
// existing containers and allocates nothing once in has seen a node of the
// same shape.
//
// The incoming containers are merged into the kill order by badness; on a
// tie an incoming container goes before the existing ones, the pessimistic
// choice for the incoming pod. On a model built on a memory sample, the
// same merged order is walked twice: with every container at its worst
// case, and with every container at what it holds now.
func (n *Node) Assess(in *Incoming) Assessment {
	a := Assessment{ShortfallBefore: n.shortfall, ShortfallAfter: n.shortfall, Rank: -1, Measured: n.measured}
	if n.measured {
		a.Now = NowAssessment{ShortfallBefore: n.nowShortfall, ShortfallAfter: n.nowShortfall}
	}
	if in == nil || len(in.refs) == 0 {
		return a
	}
	p := in.planFor(n)
	a.ShortfallAfter = subFloor(addSat(n.TotalWorst(), p.podWorst), n.allocatable)
	var atRisk, withPod int64
	atRisk, withPod, a.Rank = n.walk(p, n.prefix, p.worst, a.ShortfallAfter)
	if p.podWorst > 0 {
		a.RiskPPM = mulDiv(min(atRisk, p.podWorst), 1_000_000, p.podWorst)
	}
	a.CollateralBytes = subFloor(withPod, n.AtRiskBytes())
	if n.measured {
		now := &a.Now
		now.PodNow = p.podNow
		now.ShortfallAfter = subFloor(addSat(n.usedNow, p.podNow), n.allocatable)
		atRisk, withPod, _ = n.walk(p, n.nowPrefix, p.now, now.ShortfallAfter)
		if p.podNow > 0 {
			now.RiskPPM = mulDiv(min(atRisk, p.podNow), 1_000_000, p.podNow)
		}
		now.CollateralBytes = subFloor(withPod, n.AtRiskNowBytes())
	}
	return a
}

// walk goes down the kill order with the incoming containers of p merged in,
// segment by segment: existing containers [lo, hi), then incoming container
// j, whose place hi is found by binary search. prefix holds the existing
// containers' bytes (prefix sums in kill order), inc the incoming ones'; the
// killer is done once what it freed covers after. It returns the incoming
// bytes the killer needs (atRisk), the existing bytes it takes (withPod),
// and the place of the first incoming container.
func (n *Node) walk(p *plan, prefix, inc []int64, after int64) (atRisk, withPod int64, rank int) {
	var passed int64 // bytes of the incoming containers passed
	done := after == 0
	lo := 0
	rank = -1
	for j := 0; ; j++ {
		hi := len(n.victims)
		if j < len(p.points) {
			hi = n.ahead(p.points[j])
		}
		if !done && addSat(prefix[hi], passed) >= after {
			withPod = prefix[reach(prefix, lo, hi, after, passed)]
			done = true
		}
		if j == len(p.points) {
			return atRisk, withPod, rank
		}
		if j == 0 {
			rank = hi
		}
		freed := addSat(prefix[hi], passed) // ahead of incoming container j
		atRisk = addSat(atRisk, min(inc[j], subFloor(after, freed)))
		passed = addSat(passed, inc[j])
		if !done && addSat(prefix[hi], passed) >= after {
			withPod = prefix[hi]
			done = true
		}
		lo = hi
	}
}
