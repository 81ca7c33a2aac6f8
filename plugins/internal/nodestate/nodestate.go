// Package nodestate makes the state of the node samples that Headroom's
// scheduler plugins read (NodePIDs, NodeIPs, OOMRisk) visible where an operator
// looks: the gauge headroom_nodes{plugin, profile, state} counts the nodes
// whose headroom is known, unknown (no sample), stale (a sample older than
// the plugin's maxSampleAge) or invalid (annotations the plugin ignores),
// and a log line at the default verbosity tells when a node's state
// changes, not on every scheduling cycle. A node agent that stops writing
// thus shows up as nodes moving from known to stale.
//
// A sample's age changes without any Node update, so the count cannot hang
// on the plugins' Filter and Score, which only see nodes when pods are
// scheduled. A Tracker recounts from the scheduler's Node informer instead:
// at most once a second after a Node event, at the moment the next known
// sample goes stale, and every Resync at the latest. It reads each Node
// object once, as the plugin's cache does, and judges the age at each
// recount.
//
// OOMRisk counts its nodes' memory samples (headroom.dev/memory-*) the same
// way; a node whose memory sample is not known is judged on its pods'
// declarations, which are always there.
package nodestate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/clock"

	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// State is the state of a node's headroom sample as a plugin sees it.
type State string

const (
	// Known: a valid sample no older than the plugin's maxSampleAge; the
	// plugin filters and scores the node by it.
	Known State = "known"
	// Unknown: the node carries no sample.
	Unknown State = "unknown"
	// Stale: a valid sample older than the plugin's maxSampleAge.
	Stale State = "stale"
	// Invalid: annotations the plugin ignores (malformed, out of range, or
	// some of a sample's missing).
	Invalid State = "invalid"
)

// States are every State, in the order of the summary log line.
var States = [...]State{Known, Unknown, Stale, Invalid}

const (
	// Resync is the longest time between two recounts.
	Resync = 30 * time.Second
	// MinInterval is the shortest time between two recounts: a burst of
	// Node events costs one recount a second.
	MinInterval = time.Second
	// MaxLines is the most nodes logged one line each for one recount;
	// beyond it the changes are logged one line per pair of states, so
	// that an outage of the node agent on every node of a large fleet
	// takes a few lines, not one per node.
	MaxLines = 10
	// exampleNodes is how many node names an aggregated line names.
	exampleNodes = 5
)

// ReadFunc reads a node's sample the way the plugin's cache does: without
// an age limit, at now (for the model's clock-skew check). It returns the
// sample's time, or the error that makes the node's headroom unknown (the
// model's "no sample" error, or an invalid-annotation error).
type ReadFunc func(node *corev1.Node, now time.Time) (sampledAt time.Time, err error)

// Config says what a Tracker counts.
type Config struct {
	// Plugin is the plugin's name, the metric's plugin label.
	Plugin string
	// Kind names the figure in log lines, as the models name it in their
	// errors ("PID", "pod IP").
	Kind string
	// MaxSampleAge is the plugin's maxSampleAge; 0 means no limit.
	MaxSampleAge time.Duration
	// Read reads a node's sample.
	Read ReadFunc
}

// Classify returns the state at now of a sample that Read returned
// (sampledAt, readErr), and why it is not known (nil when it is). A
// sample's age is judged by the rule the models apply (sample.CheckAge).
func Classify(kind string, sampledAt time.Time, readErr error, now time.Time, maxAge time.Duration) (State, error) {
	switch {
	case readErr == nil:
		if err := sample.CheckAge(kind, sampledAt, now, maxAge); err != nil {
			return Stale, err
		}
		return Known, nil
	case sample.IsInvalid(readErr):
		return Invalid, readErr
	}
	return Unknown, readErr
}

// Tracker counts a plugin's nodes by State and logs their changes. Update
// does the work; Start runs it from the scheduler's Node informer.
type Tracker struct {
	cfg     Config
	profile string
	logger  klog.Logger
	gauges  [len(States)]metrics.GaugeMetric
	nodes   map[string]*entry
	// counted is false until the first Update, which logs a summary
	// rather than every node.
	counted bool
	gen     uint64
}

// entry is what a Tracker keeps of one node.
type entry struct {
	// node is the Node object last read; another object is read again.
	node      *corev1.Node
	sampledAt time.Time
	readErr   error
	state     State
	gen       uint64 // of the last Update that saw the node
}

// New returns a Tracker of cfg's plugin in the named scheduler profile,
// logging to logger. It registers Headroom's metrics.
func New(logger klog.Logger, profile string, cfg Config) *Tracker {
	headroommetrics.Register()
	t := &Tracker{cfg: cfg, profile: profile, logger: logger, nodes: map[string]*entry{}}
	for i, s := range States {
		t.gauges[i] = headroommetrics.Nodes.WithLabelValues(cfg.Plugin, profile, string(s))
	}
	return t
}

// change is a node's state before and after an Update; "" is no state
// (a node added or deleted).
type change struct {
	node     string
	from, to State
	reason   error
}

// Update recounts nodes at now: it sets the gauge, logs the nodes whose
// state changed since the last Update, and returns when the next known
// sample goes stale (zero when none can). Update is not safe for
// concurrent use; Start calls it from one goroutine.
func (t *Tracker) Update(now time.Time, nodes []*corev1.Node) (next time.Time) {
	t.gen++
	var counts [len(States)]int
	var changed, added, deleted []change
	for _, n := range nodes {
		e := t.nodes[n.Name]
		isNew := e == nil
		if isNew {
			e = &entry{}
			t.nodes[n.Name] = e
		}
		if e.node != n {
			e.node = n
			e.sampledAt, e.readErr = t.cfg.Read(n, now)
		}
		state, reason := Classify(t.cfg.Kind, e.sampledAt, e.readErr, now, t.cfg.MaxSampleAge)
		counts[slices.Index(States[:], state)]++
		if state == Known && t.cfg.MaxSampleAge > 0 {
			// The first instant at which CheckAge calls it stale.
			at := e.sampledAt.Add(t.cfg.MaxSampleAge).Add(time.Nanosecond)
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		switch {
		case isNew:
			added = append(added, change{node: n.Name, to: state, reason: reason})
		case state != e.state:
			changed = append(changed, change{node: n.Name, from: e.state, to: state, reason: reason})
		}
		e.state, e.gen = state, t.gen
	}
	for name, e := range t.nodes {
		if e.gen != t.gen {
			deleted = append(deleted, change{node: name, from: e.state})
			delete(t.nodes, name)
		}
	}
	for i := range States {
		t.gauges[i].Set(float64(counts[i]))
	}

	kind := t.cfg.Kind
	if !t.counted {
		t.counted = true
		kv := []any{"plugin", t.cfg.Plugin, "profile", t.profile, "maxSampleAge", t.cfg.MaxSampleAge}
		for i, s := range States {
			kv = append(kv, string(s), counts[i])
		}
		t.logger.Info("Nodes by "+kind+" headroom state", kv...)
		// Each node's first state, for those who ask.
		t.log(t.logger.V(4), "Node's "+kind+" headroom state", added)
		return next
	}
	// Structured logging has no warning level; Info at V(0) is its warning.
	t.log(t.logger, "Node's "+kind+" headroom state changed", changed)
	t.log(t.logger.V(2), "Node added; its "+kind+" headroom state", added)
	t.log(t.logger.V(2), "Node deleted", deleted)
	return next
}

// log logs changes with msg at logger's verbosity: one line each, or one
// line per pair of states when there are more than MaxLines.
func (t *Tracker) log(logger klog.Logger, msg string, changes []change) {
	if len(changes) == 0 || !logger.Enabled() {
		return
	}
	slices.SortFunc(changes, func(a, b change) int { return strings.Compare(a.node, b.node) })
	if len(changes) <= MaxLines {
		for _, c := range changes {
			kv := []any{"plugin", t.cfg.Plugin, "profile", t.profile, "node", klog.KRef("", c.node)}
			kv = appendStates(kv, c)
			if c.reason != nil {
				kv = append(kv, "reason", c.reason.Error())
			}
			logger.Info(msg, kv...)
		}
		return
	}
	type pair struct{ from, to State }
	groups := map[pair][]change{}
	var order []pair
	for _, c := range changes {
		p := pair{c.from, c.to}
		if _, ok := groups[p]; !ok {
			order = append(order, p)
		}
		groups[p] = append(groups[p], c)
	}
	slices.SortFunc(order, func(a, b pair) int {
		return strings.Compare(string(a.from)+"/"+string(a.to), string(b.from)+"/"+string(b.to))
	})
	for _, p := range order {
		g := groups[p]
		names := make([]string, 0, exampleNodes)
		for _, c := range g[:min(len(g), exampleNodes)] {
			names = append(names, c.node)
		}
		kv := []any{"plugin", t.cfg.Plugin, "profile", t.profile, "count", len(g)}
		kv = appendStates(kv, g[0])
		kv = append(kv, "nodes", names)
		if g[0].reason != nil {
			kv = append(kv, "firstReason", g[0].reason.Error())
		}
		logger.Info(msg+fmt.Sprintf(" on %d nodes", len(g)), kv...)
	}
}

// appendStates adds c's states to a log line's key/value pairs, leaving
// out the side that is no state.
func appendStates(kv []any, c change) []any {
	if c.from != "" {
		kv = append(kv, "from", string(c.from))
	}
	if c.to != "" {
		kv = append(kv, "to", string(c.to))
	}
	return kv
}

// Start runs a Tracker of cfg's plugin from the Node informer of h's
// informer factory until ctx ends, and returns it; nil when h has no
// informer factory (a framework that only runs plugins on a snapshot). A
// plugin calls it from its New with the plugin's own ReadFunc and
// maxSampleAge. The Tracker counts once the informer has synced.
func Start(ctx context.Context, h fwk.Handle, cfg Config) *Tracker {
	if h == nil || h.SharedInformerFactory() == nil {
		return nil
	}
	logger := klog.FromContext(ctx)
	t := New(logger, h.ProfileName(), cfg)
	nodes := h.SharedInformerFactory().Core().V1().Nodes()
	informer := nodes.Informer()
	// Node events only poke the recount loop: the handler never blocks
	// the informer, and a burst of events costs one recount.
	poke := make(chan struct{}, 1)
	notify := func() {
		select {
		case poke <- struct{}{}:
		default:
		}
	}
	reg, err := informer.AddEventHandlerWithOptions(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}, cache.HandlerOptions{Logger: &logger})
	if err != nil {
		// Only a stopped informer refuses a handler.
		logger.Error(err, "Not counting nodes by headroom state", "plugin", cfg.Plugin)
		return nil
	}
	go func() {
		defer func() { _ = informer.RemoveEventHandler(reg) }()
		t.Run(ctx, clock.RealClock{}, nodes.Lister(), registrationSynced(ctx, reg), poke)
	}()
	return t
}

// Run recounts until ctx ends: first when synced is closed, then when poke
// receives (at least MinInterval after the last recount), when the next
// known sample goes stale, and every Resync at the latest.
func (t *Tracker) Run(ctx context.Context, clk clock.Clock, lister corelisters.NodeLister, synced <-chan struct{}, poke <-chan struct{}) {
	select {
	case <-ctx.Done():
		return
	case <-synced:
	}
	for {
		wait := Resync
		nodes, err := lister.List(labels.Everything())
		if err != nil {
			t.logger.Error(err, "Listing nodes to count them by headroom state", "plugin", t.cfg.Plugin)
		} else {
			now := clk.Now()
			if next := t.Update(now, nodes); !next.IsZero() {
				wait = min(wait, next.Sub(now))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-clk.After(MinInterval):
		}
		timer := clk.NewTimer(max(wait-MinInterval, 0))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-poke:
			timer.Stop()
		case <-timer.C():
		}
	}
}
