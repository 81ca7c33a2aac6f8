package oomkill

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestWithPreviousBuildsTheSameModel: a model that takes its pods'
// declarations from an earlier model of the node (WithPrevious) is, field
// for field, the model built from scratch, as the scheduler changes nodes:
// pods removed (the last moved into the gap, as NodeInfo removes them) and
// added at the end, a new memory sample, now and then a node whose memory
// or an Estimate that changed, so that nothing may be taken.
func TestWithPreviousBuildsTheSameModel(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	estimates := []Estimate{DefaultEstimate, {100, 0}, {300, 250}}
	serial := 0
	newPod := func(capacity int64) *corev1.Pod {
		serial++
		var p *corev1.Pod
		if r.IntN(2) == 0 {
			p = propertyPod(r, "ns", "")
		} else {
			p = parityPod(r, capacity)
		}
		p.Name = fmt.Sprintf("p%04d", serial)
		p.UID = types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", serial))
		return inSample(p, serial)
	}
	sampleOf := func(pods []*corev1.Pod) []Option {
		if r.IntN(2) == 0 {
			return nil // declared-only
		}
		held := map[*corev1.Pod]int64{}
		for _, p := range pods {
			if r.IntN(3) > 0 {
				held[p] = quarter(r, 16)
			}
		}
		return []Option{WithMemorySample(memSample(quarter(r, 64), held))}
	}
	var reused int
	for trial := range 1500 {
		capacity := []int64{4 * Gi, 16 * Gi, 64 * Gi}[r.IntN(3)] + r.Int64N(Gi)
		allocatable := capacity - r.Int64N(capacity/4)
		node := testNode("n", capacity, allocatable)
		est := estimates[r.IntN(len(estimates))]
		var before []*corev1.Pod
		for range r.IntN(30) {
			before = append(before, newPod(capacity))
		}
		prev, err := NewNode(node, before, est, sampleOf(before)...)
		if err != nil {
			t.Fatal(err)
		}

		after := slices.Clone(before)
		for range r.IntN(3) {
			if len(after) > 0 {
				i := r.IntN(len(after))
				after[i] = after[len(after)-1]
				after = after[:len(after)-1]
			}
		}
		for range r.IntN(3) {
			after = append(after, newPod(capacity))
		}
		switch r.IntN(8) {
		case 0:
			node = testNode("n", capacity, allocatable-r.Int64N(allocatable/2+1))
		case 1:
			node = testNode("n", capacity+Gi, allocatable)
		case 2:
			est = estimates[r.IntN(len(estimates))]
		}
		opts := sampleOf(after)
		want, err := NewNode(node, after, est, opts...)
		if err != nil {
			t.Fatal(err)
		}
		got, err := NewNode(node, after, est, append(opts, WithPrevious(prev))...)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("trial %d: with the previous model\n%+v\nfrom scratch\n%+v", trial, got.KillOrder(), want.KillOrder())
		}
		if prev.reusableFor(want) != nil && len(before) > 0 {
			reused++
		}
	}
	if reused < 700 {
		t.Fatalf("%d trials could take declarations from the previous model: the test no longer covers reuse", reused)
	}
}
