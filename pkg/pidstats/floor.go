package pidstats

import "time"

// Defaults shared by the NodePIDs scheduler plugin (NodePIDsArgs) and the
// RelieveNodePressure descheduler plugin (RelieveNodePressureArgs), declared
// once so that both sides count a node's PIDs the same way unless an operator
// configures them apart.
const (
	// DefaultPodPIDs is the PIDs counted for a pod without a valid
	// AnnotationPodPIDs.
	DefaultPodPIDs int64 = 100
	// DefaultMaxSampleAge is how old a node's sample may be before its PID
	// headroom counts as unknown.
	DefaultMaxSampleAge = 10 * time.Minute
	// DefaultMinFreePIDs and DefaultMinFreePercent make NodePIDs' default
	// Floor.
	DefaultMinFreePIDs    int64 = 512
	DefaultMinFreePercent int64 = 5
)

// Floor is the number of PIDs NodePIDs keeps free on every node:
// max(MinFreePIDs, allocatable × MinFreePercent / 100). The scheduler
// filters by it, and the descheduler evicts a pod only when another node
// could take it above it.
type Floor struct {
	MinFreePIDs    int64
	MinFreePercent int64
}

// DefaultFloor is NodePIDs' floor with its default args.
var DefaultFloor = Floor{MinFreePIDs: DefaultMinFreePIDs, MinFreePercent: DefaultMinFreePercent}

// Of is the floor of a node with allocatable PIDs: max(MinFreePIDs,
// ⌊allocatable × MinFreePercent / 100⌋), for MinFreePercent in [0, 100].
// Negative inputs count as 0; it cannot overflow.
func (f Floor) Of(allocatable int64) int64 {
	a, pct := max(allocatable, 0), min(max(f.MinFreePercent, 0), 100)
	// a = 100q + r, so a·pct/100 = q·pct + r·pct/100 with pct ≤ 100: no
	// intermediate exceeds a.
	return max(f.MinFreePIDs, a/100*pct+a%100*pct/100)
}

// Fits reports whether a node with free (estimated) and allocatable PIDs can
// take a pod of need PIDs and still keep its floor free.
func (f Floor) Fits(free, allocatable, need int64) bool {
	return need <= free && free-need >= f.Of(allocatable)
}
