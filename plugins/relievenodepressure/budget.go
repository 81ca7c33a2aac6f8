package relievenodepressure

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
)

// budgetKey is the state ConfigMap's key of the eviction budget's ledger.
// No node is named so: a node's name starts with a letter or digit.
const budgetKey = "_evictionBudget"

// budgetBuckets is how many buckets a window is counted in: the ledger
// holds one entry per bucket, node and namespace that saw an eviction, so
// it is at most as long as the evictions within the window (at most
// evictionBudget.total, itself at most maxBudgetTotal), whatever the
// number of nodes, and an eviction leaves the window at most a bucket
// (a thirtieth of the window) late, never early.
const budgetBuckets = 30

// The budgets an eviction is counted against, as
// headroom_relieve_node_pressure_budget_exhausted_total labels them.
const (
	BudgetTotal     = "total"
	BudgetNode      = "node"
	BudgetNamespace = "namespace"
)

// budgetEntry counts the evictions of one bucket from one node and
// namespace. Its JSON is short: the ledger is at most maxBudgetTotal
// entries of about 100 bytes with real names, far below the ConfigMap's
// 1 MiB beside the nodes' records.
type budgetEntry struct {
	// At is the start of the bucket, in Unix seconds.
	At        int64  `json:"t"`
	Node      string `json:"node"`
	Namespace string `json:"ns"`
	N         int32  `json:"n"`
}

// budgetLedger is the evictions of the last window, as the state
// ConfigMap holds them (budgetKey). Its times are the descheduler's clock:
// two replicas whose clocks differ by a few seconds move an eviction's
// exit from the window by as much.
type budgetLedger struct {
	Entries []budgetEntry `json:"evictions,omitempty"`
}

// ledger is the state's budget ledger, made empty where a state was built
// without one.
func (st *state) ledger() *budgetLedger {
	if st.budget == nil {
		st.budget = &budgetLedger{}
	}
	return st.budget
}

func (l *budgetLedger) clone() *budgetLedger {
	if l == nil {
		return nil
	}
	return &budgetLedger{Entries: slices.Clone(l.Entries)}
}

// parseLedger reads the ledger's JSON; a ledger someone broke is dropped
// with a log line, as a broken node record is: the budget then counts
// from that moment (a reset, which an operator's edit can make anyway).
func parseLedger(logger klog.Logger, raw string, ok bool) *budgetLedger {
	l := &budgetLedger{}
	if !ok {
		return l
	}
	if err := json.Unmarshal([]byte(raw), l); err != nil {
		logger.Info("Warning: the eviction budget's ledger in the state ConfigMap does not parse; counting from now", "plugin", PluginName, "err", err.Error())
		return &budgetLedger{}
	}
	// An edited count never frees budget: a negative one counts nothing,
	// one above any budget counts as a spent budget, so that sums stay far
	// from int32's range.
	l.Entries = slices.DeleteFunc(l.Entries, func(e budgetEntry) bool { return e.N <= 0 })
	for i := range l.Entries {
		l.Entries[i].N = min(l.Entries[i].N, maxBudgetTotal)
	}
	return l
}

// marshal returns the ledger's JSON without the entries that left the
// window at now; "" when none is left (the key is removed).
func (l *budgetLedger) marshal(b *EvictionBudget, now time.Time) (string, error) {
	if l == nil {
		return "", nil
	}
	if b != nil {
		l.Entries = slices.DeleteFunc(l.Entries, func(e budgetEntry) bool { return !inWindow(b, e, now) })
	}
	if len(l.Entries) == 0 {
		return "", nil
	}
	raw, err := json.Marshal(l)
	return string(raw), err
}

// bucketWidth is the width of the ledger's buckets for the window, at
// least a second.
func bucketWidth(b *EvictionBudget) int64 {
	return max(int64(b.Window.Duration/time.Second)/budgetBuckets, 1)
}

// inWindow reports whether the evictions of e still count at now: until a
// window after the end of their bucket.
func inWindow(b *EvictionBudget, e budgetEntry, now time.Time) bool {
	return now.Unix()-e.At < int64(b.Window.Duration/time.Second)+bucketWidth(b)
}

// count sums the evictions within the window at now that match.
func (l *budgetLedger) count(b *EvictionBudget, now time.Time, match func(budgetEntry) bool) int32 {
	var n int64
	for _, e := range l.Entries {
		if inWindow(b, e, now) && match(e) {
			n += int64(e.N)
		}
	}
	return int32(min(n, math.MaxInt32))
}

func anyEntry(budgetEntry) bool { return true }

// spent says which budget the next eviction from node and namespace would
// exceed at now, and why, or "" when it fits them all.
func (l *budgetLedger) spent(b *EvictionBudget, now time.Time, node, namespace string) (budget, why string) {
	if left, budget, why := l.left(b, now, node); left == 0 {
		return budget, why
	}
	if why := l.namespaceSpent(b, now, namespace); why != "" {
		return BudgetNamespace, why
	}
	return "", ""
}

// namespaceSpent says why the per-namespace budget allows no eviction
// from namespace at now, or "".
func (l *budgetLedger) namespaceSpent(b *EvictionBudget, now time.Time, namespace string) string {
	if b.PerNamespace == nil {
		return ""
	}
	n := l.count(b, now, func(e budgetEntry) bool { return e.Namespace == namespace })
	if n < *b.PerNamespace {
		return ""
	}
	return fmt.Sprintf("namespace %s's eviction budget is spent: %d evictions from it within the last %s (evictionBudget.perNamespace %d)", namespace, n, b.Window.Duration, *b.PerNamespace)
}

// left is how many more evictions from node fit the total and per-node
// budgets at now, which budget bounds it, and why ("... allows 3 more").
func (l *budgetLedger) left(b *EvictionBudget, now time.Time, node string) (uint, string, string) {
	total := l.count(b, now, anyEntry)
	n := max(*b.Total-total, 0)
	budget := BudgetTotal
	why := fmt.Sprintf("the eviction budget allows %d more within the last %s: %d evictions in the cluster (evictionBudget.total %d)", n, b.Window.Duration, total, *b.Total)
	if b.PerNode != nil {
		onNode := l.count(b, now, func(e budgetEntry) bool { return e.Node == node })
		if *b.PerNode-onNode < n {
			n = max(*b.PerNode-onNode, 0)
			budget = BudgetNode
			why = fmt.Sprintf("the node's eviction budget allows %d more within the last %s: %d evictions from it (evictionBudget.perNode %d)", n, b.Window.Duration, onNode, *b.PerNode)
		}
	}
	return uint(n), budget, why
}

// add counts delta evictions (−1 to give one back) from node and
// namespace in now's bucket.
func (l *budgetLedger) add(b *EvictionBudget, now time.Time, node, namespace string, delta int32) {
	w := bucketWidth(b)
	at := now.Unix() - now.Unix()%w
	for i := range l.Entries {
		if e := &l.Entries[i]; e.At == at && e.Node == node && e.Namespace == namespace {
			e.N = max(e.N+delta, 0)
			return
		}
	}
	if delta > 0 {
		l.Entries = append(l.Entries, budgetEntry{At: at, Node: node, Namespace: namespace, N: delta})
	}
}

// errBudgetSpent ends a write that would exceed a budget.
var errBudgetSpent = errors.New("eviction budget spent")

// reserve counts the eviction of pod from node against the budgets before
// it is requested, and writes the ledger at once: the API server's
// optimistic concurrency (the write carries the resourceVersion read)
// makes two replicas, or a run and its successor after a restart, see
// each other's evictions, so the budget is exact across them. It returns
// the budget spent and why, without counting, when the eviction would
// exceed one; an error when the ledger could not be written (nothing is
// counted, and the eviction must not be requested).
func (c *cycle) reserve(ctx context.Context, node string, pod *v1.Pod) (budget, why string, err error) {
	b := c.args.EvictionBudget
	if b == nil {
		return "", "", nil
	}
	count := func() error {
		if budget, why = c.state.ledger().spent(b, c.now, node, pod.Namespace); budget != "" {
			return errBudgetSpent
		}
		c.state.ledger().add(b, c.now, node, pod.Namespace, 1)
		return nil
	}
	if c.store == nil {
		_ = count()
		return budget, why, nil
	}
	before := c.state.ledger().clone()
	err = c.store.writeBudget(ctx, c.state, b, c.now, count)
	switch {
	case errors.Is(err, errBudgetSpent):
		return budget, why, nil
	case err != nil:
		c.state.budget = before
		return "", "", err
	}
	return "", "", nil
}

// release gives back the count of an eviction that was refused (the pod
// stays). A failed write is logged: the budget then counts one eviction
// too many until the window slides past it, which errs on the safe side.
func (c *cycle) release(ctx context.Context, node string, pod *v1.Pod) {
	b := c.args.EvictionBudget
	if b == nil {
		return
	}
	undo := func() error {
		c.state.ledger().add(b, c.now, node, pod.Namespace, -1)
		return nil
	}
	if c.store == nil {
		_ = undo()
		return
	}
	if err := c.store.writeBudget(ctx, c.state, b, c.now, undo); err != nil {
		c.logger.Error(err, "Could not give back the budget of a refused eviction; it counts until the window slides past it", "pod", klog.KObj(pod))
	}
}

// budgetStop records that a budget stopped the relief of a node: a log
// line and the metric; the plan (Plan) and `kubectl headroom evictions`
// say why.
func (n *nodeRelief) budgetStop(budget, why string) {
	BudgetExhaustedTotal.WithLabelValues(budget).Inc()
	n.logger.V(1).Info("Not evicting: an eviction budget is spent; the node waits until the window slides", "budget", budget, "why", why)
}

// windowLeft is how many more evictions from the node fit the total and
// per-node budgets now, the budget that bounds it and why; ok is false
// without a budget.
func (n *nodeRelief) windowLeft() (left uint, budget, why string, ok bool) {
	b := n.args.EvictionBudget
	if b == nil {
		return 0, "", "", false
	}
	left, budget, why = n.state.ledger().left(b, n.now, n.node.Name)
	return left, budget, why, true
}

// namespaceBudgetSpent says why the per-namespace budget keeps the pods of
// namespace now, or "", and remembers the namespace for budgetHit.
func (n *nodeRelief) namespaceBudgetSpent(namespace string) string {
	b := n.args.EvictionBudget
	if b == nil {
		return ""
	}
	why := n.state.ledger().namespaceSpent(b, n.now, namespace)
	if why != "" {
		if n.budgetNamespaces == nil {
			n.budgetNamespaces = map[string]string{}
		}
		n.budgetNamespaces[namespace] = why
	}
	return why
}

// budgetHit says which budget kept a plan that does not reach the
// threshold from doing so, and why; "" when none did.
func (n *nodeRelief) budgetHit(p *plan) (budget, why string) {
	if p.budget != "" {
		return p.budget, p.budgetSpent
	}
	for _, ns := range slices.Sorted(maps.Keys(n.budgetNamespaces)) {
		return BudgetNamespace, n.budgetNamespaces[ns]
	}
	return "", ""
}
