package oomkill

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// referenceAssess places x by building the node with x among its pods and
// walking the kill order one container at a time. x must sort before every
// existing pod by namespace and name, so that ties resolve as Assess resolves
// them (incoming first).
func referenceAssess(t testing.TB, node *corev1.Node, pods []*corev1.Pod, x *corev1.Pod, est Estimate) Assessment {
	t.Helper()
	without := mustNode(t, node, pods, est)
	with := mustNode(t, node, append(slices.Clone(pods), x), est)
	allocatable := without.Allocatable()
	isX := func(v Victim) bool { return v.Namespace == x.Namespace && v.Pod == x.Name }

	// walk kills containers in order while the memory freed so far is short.
	walk := func(order []Victim) (shortfall, existingKilled, risk, podWorst int64, rank int) {
		var total int64
		for _, v := range order {
			total = addSat(total, v.Worst)
		}
		shortfall = subFloor(total, allocatable)
		rank = -1
		var freed int64
		for i, v := range order {
			if isX(v) {
				if rank < 0 {
					rank = i
				}
				podWorst = addSat(podWorst, v.Worst)
				risk = addSat(risk, min(v.Worst, subFloor(shortfall, freed)))
			} else if freed < shortfall {
				existingKilled = addSat(existingKilled, v.Worst)
			}
			freed = addSat(freed, v.Worst)
		}
		return
	}
	before, killedBefore, _, _, _ := walk(without.KillOrder())
	after, killedWith, risk, podWorst, rank := walk(with.KillOrder())
	a := Assessment{ShortfallBefore: before, ShortfallAfter: after, Rank: rank, CollateralBytes: subFloor(killedWith, killedBefore)}
	if podWorst > 0 {
		a.RiskPPM = mulDiv(risk, 1_000_000, podWorst)
	}
	return a
}

// checkNode compares a node's kill order, flags and totals with a naive walk.
func checkNode(t testing.TB, n *Node) {
	t.Helper()
	order := n.KillOrder()
	var total, freed, atRisk int64
	for _, v := range order {
		total = addSat(total, v.Worst)
	}
	shortfall := subFloor(total, n.Allocatable())
	for i, v := range order {
		if i > 0 && order[i-1].Points < v.Points {
			t.Fatalf("kill order not by descending badness at %d: %d < %d", i, order[i-1].Points, v.Points)
		}
		if want := freed < shortfall; v.AtRisk != want {
			t.Fatalf("container %d at risk %v, want %v", i, v.AtRisk, want)
		}
		if v.AtRisk {
			atRisk = addSat(atRisk, v.Worst)
		}
		freed = addSat(freed, v.Worst)
	}
	if n.TotalWorst() != total || n.Shortfall() != shortfall || n.AtRiskBytes() != atRisk {
		t.Fatalf("totals %d/%d/%d, walk %d/%d/%d", n.TotalWorst(), n.Shortfall(), n.AtRiskBytes(), total, shortfall, atRisk)
	}
}

// quarter draws a multiple of Gi/4 up to k·Gi/4: coarse, so that badness ties.
func quarter(r *rand.Rand, k int) int64 { return int64(r.IntN(k+1)) * Gi / 4 }

func propertyPod(r *rand.Rand, ns, name string) *corev1.Pod {
	var cs []ctr
	shape := r.IntN(4)
	for i := range 1 + r.IntN(3) {
		c := ctr{name: fmt.Sprintf("c%d", i)}
		switch shape {
		case 0: // BestEffort
		case 1: // Guaranteed
			c.req = Gi/4 + quarter(r, 16)
			c.lim, c.cpu = c.req, true
		default: // Burstable
			c.req = quarter(r, 8)
			if r.IntN(3) > 0 {
				c.lim = c.req + quarter(r, 24)
			}
			if c.req == 0 && c.lim == 0 {
				c.req = Gi / 4
			}
		}
		cs = append(cs, c)
	}
	if r.IntN(3) == 0 { // an init container, often a sidecar
		c := ctr{name: "init", req: Gi / 4, lim: Gi / 2, cpu: shape == 1, init: true}
		if shape == 1 {
			c.lim = c.req
		}
		c.sidecar = r.IntN(2) == 0
		cs = append(cs, c)
	}
	return testPod(ns, name, cs...)
}

// TestAssessMatchesReferenceWalk checks the binary-search path of Assess
// against the brute-force walk on random nodes and pods.
func TestAssessMatchesReferenceWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	estimates := []Estimate{DefaultEstimate, {100, 0}, {300, 250}, {150, 50}}
	var ties, risky, collateral int
	for trial := range 3000 {
		capacity := []int64{4 * Gi, 16 * Gi, 64 * Gi, 256 * Gi, 1 << 40}[r.IntN(5)]
		if r.IntN(3) == 0 {
			capacity += r.Int64N(Gi)
		}
		allocatable := capacity - r.Int64N(capacity/4)
		node := testNode("n", capacity, allocatable)
		var pods []*corev1.Pod
		for i := range r.IntN(40) {
			pods = append(pods, propertyPod(r, "ns", fmt.Sprintf("p%02d", i)))
		}
		x := propertyPod(r, "", "") // sorts before every existing pod on ties
		est := estimates[r.IntN(len(estimates))]

		n := mustNode(t, node, pods, est)
		checkNode(t, n)
		in := NewIncoming(x)
		got := n.Assess(in)
		want := referenceAssess(t, node, pods, x, est)
		if got != want {
			t.Fatalf("trial %d: Assess = %+v, reference walk %+v", trial, got, want)
		}

		// ExplainWith lays out the same merged order as the node built with x.
		merged := n.ExplainWith(in).Order
		with := mustNode(t, node, append(slices.Clone(pods), x), est)
		checkNode(t, with)
		order := with.KillOrder()
		for i, v := range order {
			m := merged[i]
			if m.Pod != v.Pod || m.Container != v.Container || m.Points != v.Points || m.Worst != v.Worst || m.Adj != v.Adj || m.AtRisk != v.AtRisk || m.Incoming != (v.Pod == "") {
				t.Fatalf("trial %d: merged order %d = %+v, node with the pod %+v", trial, i, m, v)
			}
			if i > 0 && order[i-1].Points == v.Points && order[i-1].Pod == "" && v.Pod != "" {
				ties++ // an incoming container placed before an existing one of equal badness
			}
		}
		if got.RiskPPM > 0 {
			risky++
		}
		if got.CollateralBytes > 0 {
			collateral++
		}
	}
	t.Logf("incoming-before-existing ties %d, risky %d, collateral %d", ties, risky, collateral)
	if ties < 100 || risky < 300 || collateral < 300 {
		t.Fatal("the random nodes no longer cover ties, risk and collateral")
	}
}
