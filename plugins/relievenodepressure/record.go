package relievenodepressure

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// observe adds this cycle's sample of a node above a threshold to its
// record and returns, while the node has been seen so in fewer consecutive
// samples than pressureSamples, how many ("1 of 2"); "" once it has.
// A sample already recorded (the agent has not written since the last
// run) does not count again.
func (c *cycle) observe(node *v1.Node, st *pressure) string {
	at := st.sampleTime()
	if at.IsZero() {
		at = c.now
	}
	r := c.state.records[node.Name]
	if n := len(r.Seen); n == 0 || at.After(r.Seen[n-1]) {
		r.Seen = append(r.Seen, at)
		if over := len(r.Seen) - int(*c.args.PressureSamples); over > 0 {
			r.Seen = slices.Delete(r.Seen, 0, over)
		}
		c.state.records[node.Name] = r
		c.state.changed = true
	}
	if len(r.Seen) >= int(*c.args.PressureSamples) {
		return ""
	}
	wait := fmt.Sprintf("%d of %d consecutive samples", len(r.Seen), *c.args.PressureSamples)
	if c.waiting == nil {
		c.waiting = map[string]string{}
	}
	c.waiting[node.Name] = wait
	return wait
}

// calm forgets the pressure seen on a node that is now within its
// thresholds, or whose figures are unknown: the samples are no longer
// consecutive.
func (c *cycle) calm(node *v1.Node) {
	if r, ok := c.state.records[node.Name]; ok && len(r.Seen) > 0 {
		r.Seen = nil
		c.state.records[node.Name] = r
		c.state.changed = true
	}
}

// saveRelief records the node's relief so far and writes the records at
// once, so that a run that ends before its last eviction (the process
// killed, the API server gone) does not forget the evictions it made: the
// next run would otherwise plan again from a sample that still counts them.
// The relief is recorded as under way (relief, not finished): the next run
// finishes the plan from what the sample accounts for. A failed
// write is logged; the run's final save tries again. Without a store (the
// records live in the process) there is nothing to write.
func (n *nodeRelief) saveRelief(ctx context.Context, st *pressure) {
	n.relief(n, st, false)
	if n.store == nil {
		return
	}
	if err := n.store.saveNode(ctx, n.state, n.node.Name, n.now, n.stateHorizon()); err != nil {
		n.logger.Error(err, "Could not record the eviction yet; the run's end tries again")
	}
}

// recordRelief records that pods were evicted from the node this cycle:
// the pressure seen so far is spent, and the trigger of each measured
// figure whose sample does not account for every evicted pod waits for a
// newer sample of it.
func (c *cycle) recordRelief(n *nodeRelief, st *pressure) {
	c.relief(n, st, true)
}

// relief records the node's relief so far; finished: the run is done with
// the node, and the pressure seen so far is spent. Until then the record
// keeps the samples seen, so that a run that ends midway leaves its plan to
// the next run, which carries out the rest of it from the same sample (less
// what the sample accounts for of the pods evicted) without waiting for the
// pressure to last again.
//
// Only the part of each trigger that took part in the relief (its
// projection is in st) is written: another trigger's wait, from an earlier
// relief of the node this run or before, is kept, so that an ipStarved
// eviction does not end the PID trigger's wait for a newer sample.
func (c *cycle) relief(n *nodeRelief, st *pressure, finished bool) {
	if len(n.evictedPods) == 0 {
		return
	}
	at := c.now
	r := c.state.records[n.node.Name].owned()
	if r.Relieved == nil {
		// No relief recorded: no trigger waits (Accounted's zero value
		// would make the PID trigger wait).
		r.Accounted = true
	}
	r.Relieved = &at
	if finished {
		r.Seen = nil
	}
	for i, p := range st.by {
		if p == nil {
			continue
		}
		key := st.triggers[i].key
		r.settle(key)
		var exiting []string
		for _, pod := range n.evictedPods {
			if !p.accounts(pod) {
				exiting = append(exiting, uidPrefix(pod.UID))
			}
		}
		if len(exiting) > 0 {
			r.await(key, p.sampleTime(), exiting)
		}
	}
	c.state.records[n.node.Name] = r
	c.state.changed = true
}

// stateHorizon is how long a node's record is kept once nothing new is
// added to it: longer than a sample is trusted by default (maxSampleAge,
// 10m) and than the agent's longest time between writes (5m). A longer
// maxSampleAge keeps records twice as long as it; without one (0: samples
// never go stale) a relief is remembered until maxStateRecords pushes it
// out, since the sample it waits to see replaced may never be.
const stateHorizon = time.Hour

// nodeRecord is what the plugin remembers of a node between runs, so that
// a one-shot run (the CronJob) keeps the safeguards of a long-running one.
type nodeRecord struct {
	// Seen are the times of the consecutive samples, newest last, in which
	// a trigger was above its threshold: the newest sample time of the
	// measured figures (PIDs, memory) above theirs, or the run's time for
	// the OOM trigger alone, whose figures need no sample. At most
	// pressureSamples long.
	Seen []time.Time `json:"seen,omitempty"`
	// Relieved is when the plugin last evicted pods from the node.
	Relieved *time.Time `json:"relieved,omitempty"`
	// Accounted: the node's PID sample accounted for every pod evicted then
	// (measured.accounts), so the shared estimate subtracts them once they
	// leave, before a new sample. Otherwise the PID trigger waits for a PID
	// sample newer than Relieved: the sample still counts what the evicted
	// pods held. It is the PID figure's own field, as records written
	// before the memory trigger have it, and as such descheduler versions
	// read it; Awaiting holds the other figures.
	Accounted bool `json:"accounted,omitempty"`
	// Awaiting are the keys of the measured figures other than PIDs
	// ("memory") whose sample did not account for every pod evicted then:
	// their triggers wait for a sample of that figure newer than Relieved.
	Awaiting []string `json:"awaiting,omitempty"`
	// SampledAt holds, for each figure a trigger waits on (keyPIDs for
	// !Accounted, the keys of Awaiting), the time of the sample the relief
	// was planned on, as the node agent stamped it (its sampled-at
	// annotation): the trigger waits for a sample of that figure stamped
	// later. Comparing the agent's stamps with each other keeps the wait
	// free of the skew between the node's clock and the descheduler's,
	// which would otherwise end it too early (a node clock ahead) or keep
	// the node waiting until its samples go stale (behind). Records
	// written before this field wait for a sample newer than Relieved.
	SampledAt map[string]time.Time `json:"sampledAt,omitempty"`
	// Exiting holds, for each figure a trigger waits on, the pods evicted
	// then whose share its sample did not account for, by uidPrefix (at
	// most maxExitingPods): a newer sample is not enough, since one taken
	// before their processes exit still counts them and would relieve the
	// same pressure twice. The trigger waits until none of them runs on
	// the node (gone, or every container terminated), then for a sample
	// stamped after Gone; the figure's Exiting is cleared once Gone is set.
	Exiting map[string][]string `json:"exiting,omitempty"`
	// Gone holds, for each figure whose Exiting pods were all seen gone,
	// the stamp of the newest sample of it the node carried then: the
	// agent's stamps compared with each other, as SampledAt, so no clock
	// skew enters; a sample stamped later was taken after the pods'
	// processes were gone.
	Gone map[string]time.Time `json:"gone,omitempty"`
}

// maxExitingPods bounds a figure's Exiting: a relief evicts at most
// maxPodsToEvictPerNode pods from a node, 5 in the shipped policy; beyond
// 10, the wait is for the last 10, evicted within the same run as the
// others. With uidPrefix, a waiting record grows by about 110 bytes a
// figure, and only while the pods terminate.
const maxExitingPods = 10

// uidPrefix is how Exiting names a pod: the first 8 characters of its UID,
// 32 random bits of a UUID. Another pod of the node with the same prefix
// would only make the trigger wait for it too.
func uidPrefix(uid types.UID) string {
	return string(uid[:min(len(uid), 8)])
}

// waitsFor reports whether, after the node's last relief, the trigger of
// the figure with key waits for a newer sample than one stamped sampledAt,
// and the stamp a sample must be later than.
func (r nodeRecord) waitsFor(key string, sampledAt time.Time) (bool, time.Time) {
	if r.Relieved == nil || !r.awaits(key) {
		return false, time.Time{}
	}
	since, ok := r.SampledAt[key]
	if !ok {
		since = *r.Relieved
	}
	return !sampledAt.After(since), since
}

// awaits reports whether, after the node's last relief, the trigger of the
// figure with key waits for a sample of it newer than Relieved.
func (r nodeRecord) awaits(key string) bool {
	if key == keyPIDs {
		return !r.Accounted
	}
	return slices.Contains(r.Awaiting, key)
}

// await records that the trigger of the figure with key waits for a
// sample of it stamped after sampledAt, taken once the pods of exiting are
// gone: awaits' inverse, in the record's format (PIDs in Accounted, the
// others in Awaiting). The record's maps must be its own (owned).
func (r *nodeRecord) await(key string, sampledAt time.Time, exiting []string) {
	if key == keyPIDs {
		r.Accounted = false
	} else if !slices.Contains(r.Awaiting, key) {
		r.Awaiting = append(r.Awaiting, key)
	}
	if r.SampledAt == nil {
		r.SampledAt = map[string]time.Time{}
	}
	r.SampledAt[key] = sampledAt
	if len(exiting) > maxExitingPods {
		exiting = exiting[len(exiting)-maxExitingPods:]
	}
	if r.Exiting == nil {
		r.Exiting = map[string][]string{}
	}
	r.Exiting[key] = exiting
}

// settle records that the trigger of the figure with key waits for no
// sample: its part of the record is cleared, the other figures' kept.
func (r *nodeRecord) settle(key string) {
	if key == keyPIDs {
		r.Accounted = true
	} else {
		r.Awaiting = slices.DeleteFunc(r.Awaiting, func(k string) bool { return k == key })
	}
	delete(r.SampledAt, key)
	delete(r.Exiting, key)
	delete(r.Gone, key)
}

// owned returns a copy of r that shares no slice or map with it, so that
// a change to it leaves the record it came from (a plan's copy, the
// records as read) untouched.
func (r nodeRecord) owned() nodeRecord {
	r.Seen = slices.Clone(r.Seen)
	r.Awaiting = slices.Clone(r.Awaiting)
	r.SampledAt = maps.Clone(r.SampledAt)
	r.Exiting = maps.Clone(r.Exiting)
	r.Gone = maps.Clone(r.Gone)
	return r
}

func (r nodeRecord) last() time.Time {
	var t time.Time
	if n := len(r.Seen); n > 0 {
		t = r.Seen[n-1]
	}
	if r.Relieved != nil && r.Relieved.After(t) {
		t = *r.Relieved
	}
	return t
}
