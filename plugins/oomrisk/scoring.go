package oomrisk

import (
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/pkg/oomkill"
)

// million is one in parts per million.
const million = 1_000_000

// strategy turns an oomkill.Assessment into a node score, apart from the
// plugin's wiring. kubectl headroom gets its scores from the plugin itself.
type strategy struct {
	// ownRiskWeight and collateralWeight are validated to [0, 1000], not
	// both 0: every product below stays under 10^9, far from overflow.
	ownRiskWeight, collateralWeight int64
}

// costPPM is the weighted cost of a placement in parts per million:
//
//	(own·RiskPPM + coll·min(1e6, CollateralBytes·1e6/podWorst)) / (own + coll)
//
// The pod's own risk is the share of it the killer needs; collateral is
// measured against the pod's own worst case, so a small pod that puts a big
// one at risk costs as much as one that is itself doomed.
//
// On a node with a memory sample (a.Measured) the cost is the mean of that
// cost on the worst case and the same cost on what the containers hold now
// (a.Now, collateral against what the pod will hold): how close the node is
// now weighs as much as how far its pods may still grow.
func (s strategy) costPPM(a oomkill.Assessment, podWorst int64) int64 {
	risk, collateral := terms(a, podWorst)
	worst := s.weigh(risk, collateral)
	if !a.Measured {
		return worst
	}
	return (worst + s.weigh(nowTerms(a.Now))) / 2
}

func (s strategy) weigh(risk, collateral int64) int64 {
	return (s.ownRiskWeight*risk + s.collateralWeight*collateral) / (s.ownRiskWeight + s.collateralWeight)
}

// terms returns the two weighed figures, each in [0, 1e6] ppm.
func terms(a oomkill.Assessment, podWorst int64) (risk, collateral int64) {
	return min(max(a.RiskPPM, 0), million), oomkill.PPM(a.CollateralBytes, podWorst)
}

// nowTerms are terms on what the containers hold now.
func nowTerms(now oomkill.NowAssessment) (risk, collateral int64) {
	return min(max(now.RiskPPM, 0), million), oomkill.PPM(now.CollateralBytes, now.PodNow)
}

// score is MaxNodeScore less a point per whole percent of cost: a node
// where the placement puts nothing at risk scores MaxNodeScore, one where
// everything weighed is at risk scores MinNodeScore.
func (s strategy) score(a oomkill.Assessment, podWorst int64) (score, costPPM int64) {
	costPPM = s.costPPM(a, podWorst)
	return fwk.MaxNodeScore - costPPM*fwk.MaxNodeScore/million, costPPM
}
