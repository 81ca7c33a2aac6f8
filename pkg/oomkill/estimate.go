package oomkill

import "fmt"

// Estimate is the worst-case memory assumed for a container without a memory
// limit: max(request × RequestMultiplierPercent / 100,
// allocatable × FractionOfAllocatablePermille / 1000).
//
// Such a container can in principle grow to the whole node; counting it at
// that size would put every node with one BestEffort pod in permanent
// shortfall. The estimate keeps it large enough to rank first among
// equals (it also gets the highest oom_score_adj) without drowning the rest
// of the model.
type Estimate struct {
	// RequestMultiplierPercent scales the container's memory request;
	// 200 means twice the request.
	RequestMultiplierPercent int64
	// FractionOfAllocatablePermille is a floor in thousandths of the node's
	// allocatable memory; 100 means 10 %. It is what a BestEffort container
	// (request 0) is assumed to use.
	FractionOfAllocatablePermille int64
}

// DefaultEstimate assumes an unlimited container uses twice its request, and
// at least 10 % of the node's allocatable memory.
var DefaultEstimate = Estimate{RequestMultiplierPercent: DefaultRequestMultiplierPercent, FractionOfAllocatablePermille: DefaultFractionOfAllocatablePermille}

// The fields of DefaultEstimate, as constants for the defaulters of the
// OOMRisk scheduler plugin's and the RelieveNodePressure descheduler
// plugin's args.
const (
	DefaultRequestMultiplierPercent      int64 = 200
	DefaultFractionOfAllocatablePermille int64 = 100
)

// Validate reports settings that make no sense: a multiplier below 100 %
// (a container is entitled to its request) or a fraction outside [0, 1000].
func (e Estimate) Validate() error {
	if e.RequestMultiplierPercent < 100 {
		return fmt.Errorf("requestMultiplierPercent must be at least 100, got %d", e.RequestMultiplierPercent)
	}
	if e.FractionOfAllocatablePermille < 0 || e.FractionOfAllocatablePermille > 1000 {
		return fmt.Errorf("fractionOfAllocatablePermille must be within [0, 1000], got %d", e.FractionOfAllocatablePermille)
	}
	return nil
}

// worst returns the worst-case memory of a container in bytes. limit is 0
// when unset; the kubelet sets no cgroup limit for a zero memory limit
// either. A pod-level limit is the pod's (Estimate.worsts). Invalid
// (negative) settings count as 0.
func (e Estimate) worst(request, limit, allocatable int64) (worst int64, estimated bool) {
	if limit > 0 {
		return limit, false
	}
	return max(mulDiv(request, e.RequestMultiplierPercent, 100),
		mulDiv(allocatable, e.FractionOfAllocatablePermille, 1000)), true
}
