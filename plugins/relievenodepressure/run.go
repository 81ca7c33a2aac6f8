package relievenodepressure

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/klog/v2"
	frameworktypes "sigs.k8s.io/descheduler/pkg/framework/types"

	"github.com/headroom-k8s/headroom/plugins/relievenodepressure/eventrecorder"
)

// Deschedule relieves each node in turn. It stops early only at the
// descheduler's total eviction limit or a spent total eviction budget; the
// per-node limit or budget moves it on to the next node and the
// per-namespace limit or budget excludes that namespace's pods for the
// rest of the cycle. It never waits for its Events to be written (see
// eventrecorder).
func (d *RelieveNodePressure) Deschedule(ctx context.Context, nodes []*v1.Node) *frameworktypes.Status {
	logger := klog.FromContext(klog.NewContext(ctx, d.logger)).WithValues("ExtensionPoint", frameworktypes.DescheduleExtensionPoint)
	if r, ok := d.recorder.(*eventrecorder.Recorder); ok {
		r.BeginRun(logger)
	}
	records, err := d.loadState(ctx)
	if err != nil {
		// Without its records the plugin could evict twice for one
		// pressure or skip the debounce: it evicts nothing this run.
		logger.Error(err, "Not relieving any node this run: the record of earlier runs could not be read")
		return &frameworktypes.Status{Err: err}
	}
	c := d.newCycle(logger, nodes, records)
	for _, node := range nodes {
		stop, err := c.relieve(ctx, node)
		if err == nil && !stop {
			stop, err = c.relieveStarved(ctx, node)
		}
		if err != nil {
			return &frameworktypes.Status{Err: err}
		}
		if stop {
			break
		}
	}
	if d.store == nil {
		d.memory = records
		return nil
	}
	if err := d.store.save(ctx, records, c.now, d.stateHorizon()); err != nil {
		// The evictions are made; the next run may not know of them and
		// waits, without the record, only for what the sample shows.
		logger.Error(err, "Could not record this run's observations and reliefs")
		return &frameworktypes.Status{Err: err}
	}
	return nil
}

// newCycle starts a Deschedule cycle over nodes with the nodes' records.
func (d *RelieveNodePressure) newCycle(logger klog.Logger, nodes []*v1.Node, records *state) *cycle {
	d.lookTurn++
	return &cycle{RelieveNodePressure: d, logger: logger, now: d.now(), nodes: nodes, limited: sets.New[string](), state: records,
		firstNamespace: d.lookTurn - 1}
}

// cycle is the state of one Deschedule call.
type cycle struct {
	*RelieveNodePressure
	logger klog.Logger
	now    time.Time
	nodes  []*v1.Node
	// limited holds the namespaces that reached the per-namespace limit.
	limited sets.Set[string]
	// room is the other nodes' headroom, built on first use.
	room *room
	// readings caches the nodes' measured figures.
	readings map[figureKey]nodeFigure
	// disrupted counts this cycle's evictions by PodDisruptionBudget UID.
	disrupted map[types.UID]int32
	// state holds the nodes' records from earlier runs; the cycle updates
	// them.
	state *state
	// waiting tells, for each node above a threshold in fewer consecutive
	// samples than pressureSamples, how many it was seen in.
	waiting map[string]string
	// firstNamespace is the plugin's lookTurn for this cycle.
	firstNamespace uint64
}

// loadState returns the nodes' records from earlier runs.
func (d *RelieveNodePressure) loadState(ctx context.Context) (*state, error) {
	if d.store == nil {
		if d.memory == nil {
			d.memory = newState()
		}
		return d.memory, nil
	}
	return d.store.load(ctx)
}

// stateHorizon is how long the records are kept: stateHorizon, or twice
// the longest sample age of the triggers whose reliefs wait for a sample
// where that is longer; 0 where such a trigger's samples never go stale.
func (d *RelieveNodePressure) stateHorizon() time.Duration {
	horizon := stateHorizon
	for _, t := range d.triggers {
		if !t.recorded {
			continue
		}
		if t.sampleAge == 0 {
			return 0
		}
		horizon = max(horizon, 2*t.sampleAge)
	}
	return horizon
}
