package oomkill

import (
	"math"
	"math/bits"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// maxBytes is the largest byte count the model represents; larger
// quantities (a resource.Quantity can exceed int64) saturate to it.
var maxBytes = *resource.NewQuantity(math.MaxInt64, resource.BinarySI)

// bytesOf returns q in bytes, rounded up, with negative values read as 0 and
// values beyond int64 as math.MaxInt64. Quantity.Value alone wraps or
// returns 0 for such values (it reads "10E" as 0).
func bytesOf(q resource.Quantity) int64 {
	if q.Sign() <= 0 {
		return 0
	}
	if q.Cmp(maxBytes) >= 0 {
		return math.MaxInt64
	}
	return q.Value()
}

// memoryOf returns the memory entry of rl in bytes; 0 when absent.
func memoryOf(rl corev1.ResourceList) int64 {
	q, ok := rl[corev1.ResourceMemory]
	if !ok {
		return 0
	}
	return bytesOf(q)
}

// addSat returns a+b for non-negative a and b, clamped at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// subFloor returns max(0, a-b) for non-negative a and b.
func subFloor(a, b int64) int64 {
	if a <= b {
		return 0
	}
	return a - b
}

// mulDiv returns floor(a*b/c) for positive c, with the product taken in 128
// bits and the result clamped at math.MaxInt64. Non-positive a or b give 0.
func mulDiv(a, b, c int64) int64 {
	if a <= 0 || b <= 0 || c <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) { // the quotient needs more than 64 bits
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// badness is the kernel's oom_badness in bytes: worst + adj × capacity / 1000.
// adj is clamped to [-1000, 1000], the range the kernel accepts for
// oom_score_adj. capacity is split into /1000 and %1000 so that no product
// leaves int64; the sum saturates.
func badness(worst int64, adj int, capacity int64) int64 {
	a := int64(min(max(adj, -1000), 1000))
	shift := a*(capacity/1000) + a*(capacity%1000)/1000
	if shift > 0 {
		return addSat(worst, shift)
	}
	return worst + shift // worst ≥ 0 and shift ≥ -MaxInt64: no overflow
}

// PPM returns part/whole in parts per million, clamped to [0, 1e6], without
// overflow for any byte counts. A positive part of a zero whole counts as
// all of it.
func PPM(part, whole int64) int64 {
	if part <= 0 {
		return 0
	}
	if whole <= 0 || part >= whole {
		return 1_000_000
	}
	return mulDiv(part, 1_000_000, whole)
}
