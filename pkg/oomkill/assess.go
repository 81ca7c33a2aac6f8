package oomkill

// Assessment is what placing an incoming pod on a node does to the node's
// OOM kill state.
type Assessment struct {
	// ShortfallBefore and ShortfallAfter are the node's shortfall without
	// and with the pod, in bytes.
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
}

// Assess places in on the node. It runs in O(k·log n) for k incoming and n
// existing containers and allocates nothing once in has seen a node of the
// same shape.
//
// The incoming containers are merged into the kill order by badness; on a
// tie an incoming container goes before the existing ones, the pessimistic
// choice for the incoming pod.
func (n *Node) Assess(in *Incoming) Assessment {
	a := Assessment{ShortfallBefore: n.shortfall, ShortfallAfter: n.shortfall, Rank: -1}
	if in == nil || len(in.refs) == 0 {
		return a
	}
	p := in.planFor(n)
	after := subFloor(addSat(n.TotalWorst(), p.podWorst), n.allocatable)
	a.ShortfallAfter = after

	// Walk the merged order segment by segment: existing containers
	// [lo, hi), then incoming container j, whose place hi is found by binary
	// search. inc is the worst-case memory of the incoming containers passed.
	var inc, atRisk, withPod int64
	done := after == 0 // the killer is done once freed ≥ after
	lo := 0
	for j := 0; ; j++ {
		hi := len(n.victims)
		if j < len(p.points) {
			hi = n.ahead(p.points[j])
		}
		if !done && addSat(n.prefix[hi], inc) >= after {
			withPod = n.prefix[n.reach(lo, hi, after, inc)]
			done = true
		}
		if j == len(p.points) {
			break
		}
		if j == 0 {
			a.Rank = hi
		}
		freed := addSat(n.prefix[hi], inc) // ahead of incoming container j
		atRisk = addSat(atRisk, min(p.worst[j], subFloor(after, freed)))
		inc = addSat(inc, p.worst[j])
		if !done && addSat(n.prefix[hi], inc) >= after {
			withPod = n.prefix[hi]
			done = true
		}
		lo = hi
	}
	if p.podWorst > 0 {
		a.RiskPPM = mulDiv(min(atRisk, p.podWorst), 1_000_000, p.podWorst)
	}
	a.CollateralBytes = subFloor(withPod, n.AtRiskBytes())
	return a
}
