package figure

import (
	"reflect"
	"testing"

	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/apis/config"
)

func TestNormalize(t *testing.T) {
	list := func(raw ...int64) fwk.NodeScoreList {
		l := make(fwk.NodeScoreList, len(raw))
		for i, r := range raw {
			l[i].Score = r
		}
		return l
	}
	scores := func(l fwk.NodeScoreList) []int64 {
		out := make([]int64, len(l))
		for i := range l {
			out[i] = l[i].Score
		}
		return out
	}
	tests := []struct {
		name    string
		raw     []int64
		unknown int64
		want    []int64
	}{
		{"relative to the best", []int64{200, 100, 0}, config.UnknownNodeScoreMeanOfKnown, []int64{100, 50, 0}},
		{"unknown: mean of the known", []int64{200, 99, UnknownRaw}, config.UnknownNodeScoreMeanOfKnown, []int64{100, 49, 74}},
		{"unknown: configured", []int64{200, UnknownRaw}, 7, []int64{100, 7}},
		{"only unknown nodes", []int64{UnknownRaw, UnknownRaw}, config.UnknownNodeScoreMeanOfKnown, []int64{50, 50}},
		{"nothing free anywhere", []int64{0, 0, UnknownRaw}, config.UnknownNodeScoreMeanOfKnown, []int64{0, 0, 0}},
	}
	for _, tc := range tests {
		l := list(tc.raw...)
		Normalize(l, tc.unknown)
		if got := scores(l); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Normalize(%v) = %v, want %v", tc.name, tc.raw, got, tc.want)
		}
	}
}

func TestFreeAfter(t *testing.T) {
	for _, c := range [][3]int64{{10, 1, 9}, {1, 1, 0}, {0, 1, 0}, {5, 100, 0}, {-3, 1, 0}} {
		if got := FreeAfter(c[0], c[1]); got != c[2] {
			t.Errorf("FreeAfter(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
}
