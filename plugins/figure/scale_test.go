package figure

import (
	"math"
	"math/big"
	"testing"

	fwk "k8s.io/kube-scheduler/framework"
)

func TestScaleMatchesExactArithmetic(t *testing.T) {
	cases := [][2]int64{{0, 0}, {0, 1}, {1, 1}, {1, 3}, {2, 3}, {99, 100}, {19899, 19900},
		{math.MaxInt64, math.MaxInt64}, {math.MaxInt64 - 1, math.MaxInt64}, {math.MaxInt64 / 2, math.MaxInt64}, {1, math.MaxInt64}}
	for _, c := range cases {
		if got, want := Scale(c[0], c[1]), exactScale(c[0], c[1]); got != want {
			t.Errorf("Scale(%d, %d) = %d, want %d", c[0], c[1], got, want)
		}
	}
}

func FuzzScale(f *testing.F) {
	f.Add(int64(0), int64(0))
	f.Add(int64(19899), int64(19900))
	f.Add(int64(math.MaxInt64), int64(math.MaxInt64))
	f.Add(int64(-5), int64(10))
	f.Fuzz(func(t *testing.T, raw, best int64) {
		got := Scale(raw, best)
		if got < fwk.MinNodeScore || got > fwk.MaxNodeScore {
			t.Fatalf("Scale(%d, %d) = %d out of range", raw, best, got)
		}
		if raw >= 0 && raw <= best {
			if want := exactScale(raw, best); got != want {
				t.Fatalf("Scale(%d, %d) = %d, want %d", raw, best, got, want)
			}
			if raw < best && Scale(raw+1, best) < got {
				t.Fatalf("scale not monotone at %d / %d", raw, best)
			}
		}
	})
}

// exactScale is ⌊raw·100/best⌋ in arbitrary precision.
func exactScale(raw, best int64) int64 {
	if best <= 0 || raw <= 0 {
		return 0
	}
	q := new(big.Int).Mul(big.NewInt(raw), big.NewInt(fwk.MaxNodeScore))
	return q.Quo(q, big.NewInt(best)).Int64()
}
