package nodepids

import "github.com/headroom-k8s/headroom/pkg/pidstats"

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

// room is the most PIDs a pod may need on a node with free PIDs (estimated)
// and the given allocatable and still leave the floor free: free − floor,
// negative when the node is below its floor already. With free and the
// floor non-negative, need ≤ room implies need ≤ free. Cached per node, it
// makes Filter one comparison.
func (s strategy) room(free, allocatable int64) int64 {
	return max(free, 0) - s.floor(allocatable)
}
