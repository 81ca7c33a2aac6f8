package oomkill

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"k8s.io/apimachinery/pkg/api/resource"
)

// Explanation is a node's kill order with its totals, for printing.
type Explanation struct {
	Node        string
	Capacity    int64
	Allocatable int64
	TotalWorst  int64
	Shortfall   int64
	AtRiskBytes int64
	// Measured: the model is built on a memory sample, and the figures of
	// the working-set view below are set (see Node.UsedNow).
	Measured       bool
	UsedNow        int64
	ShortfallNow   int64
	AtRiskNowBytes int64
	// Order is the kill order, first to die first.
	Order []Victim
}

// Explain returns the node's kill order.
func (n *Node) Explain() Explanation {
	return Explanation{
		Node:           n.name,
		Capacity:       n.capacity,
		Allocatable:    n.allocatable,
		TotalWorst:     n.TotalWorst(),
		Shortfall:      n.shortfall,
		AtRiskBytes:    n.AtRiskBytes(),
		Measured:       n.measured,
		UsedNow:        n.usedNow,
		ShortfallNow:   n.nowShortfall,
		AtRiskNowBytes: n.AtRiskNowBytes(),
		Order:          n.KillOrder(),
	}
}

// ExplainWith returns the kill order with in placed on the node, as Assess
// places it; its containers are marked Incoming. Shortfall and AtRiskBytes
// are those with the pod, AtRiskBytes counting its containers too.
func (n *Node) ExplainWith(in *Incoming) Explanation {
	e := n.Explain()
	if in == nil || len(in.refs) == 0 {
		return e
	}
	p := in.planFor(n)
	order := make([]Victim, 0, len(n.victims)+len(p.idx))
	next := 0
	for j, i := range p.idx {
		hi := n.ahead(p.points[j])
		order = append(order, n.victims[next:hi]...)
		next = hi
		r := in.refs[i]
		c := r.of(in.pod)
		_, estimated := n.est.worst(in.mem.requests[i], in.mem.limits[i], n.allocatable)
		order = append(order, Victim{
			Namespace: in.pod.Namespace,
			Pod:       in.pod.Name,
			PodUID:    in.pod.UID,
			Container: c.Name,
			Sidecar:   r.init,
			Incoming:  true,
			QOS:       in.qos,
			Adj:       p.adj[j],
			Request:   in.mem.requests[i],
			Worst:     p.worst[j],
			Estimated: estimated,
			Points:    p.points[j],
			Used:      p.now[j],
		})
	}
	order = append(order, n.victims[next:]...)

	e.TotalWorst = addSat(e.TotalWorst, p.podWorst)
	e.Shortfall = subFloor(e.TotalWorst, n.allocatable)
	var freed int64
	for i := range order {
		order[i].AtRisk = freed < e.Shortfall
		if order[i].AtRisk {
			freed = addSat(freed, order[i].Worst)
		}
	}
	e.AtRiskBytes = freed
	if n.measured {
		e.UsedNow = addSat(e.UsedNow, p.podNow)
		e.ShortfallNow = subFloor(e.UsedNow, n.allocatable)
		freed = 0
		for i := range order {
			order[i].AtRiskNow = freed < e.ShortfallNow
			if order[i].AtRiskNow {
				freed = addSat(freed, order[i].Used)
			}
		}
		e.AtRiskNowBytes = freed
	}
	e.Order = order
	return e
}

// String renders the explanation as a table; on a measured node with what
// each container holds now and who the killer takes now.
func (e Explanation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %s: capacity %s, allocatable %s, worst case %s, shortfall %s, at risk %s\n",
		e.Node, quantity(e.Capacity), quantity(e.Allocatable), quantity(e.TotalWorst), quantity(e.Shortfall), quantity(e.AtRiskBytes))
	if e.Measured {
		fmt.Fprintf(&b, "measured: working set %s, shortfall now %s, at risk now %s\n",
			quantity(e.UsedNow), quantity(e.ShortfallNow), quantity(e.AtRiskNowBytes))
	}
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	if e.Measured {
		fmt.Fprintln(w, "#\tPOD\tCONTAINER\tQOS\tADJ\tUSED\tWORST\tPOINTS\tAT RISK NOW\tAT RISK")
	} else {
		fmt.Fprintln(w, "#\tPOD\tCONTAINER\tQOS\tADJ\tWORST\tPOINTS\tAT RISK")
	}
	yesNo := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	for i, v := range e.Order {
		pod := v.Namespace + "/" + v.Pod
		if v.Incoming {
			pod += " (incoming)"
		}
		container := v.Container
		if v.Sidecar {
			container += " (sidecar)"
		}
		worst := quantity(v.Worst)
		if v.Estimated {
			worst += " (estimated)"
		}
		if !e.Measured {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", i, pod, container, v.QOS, v.Adj, worst, quantity(v.Points), yesNo(v.AtRisk))
			continue
		}
		used := quantity(v.Used)
		if !v.Measured {
			used += " (declared)"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", i, pod, container, v.QOS, v.Adj, used, worst, quantity(v.Points), yesNo(v.AtRiskNow), yesNo(v.AtRisk))
	}
	w.Flush()
	return b.String()
}

func quantity(bytes int64) string {
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}
