package relievenodepressure

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
)

// stateHorizon is how long a node's record is kept once nothing new is
// added to it: longer than a sample is trusted by default (maxSampleAge,
// 10m) and than the agent's longest time between writes (5m). A longer
// maxSampleAge keeps records twice as long as it; without one (0: samples
// never go stale) a relief is remembered until maxStateRecords pushes it
// out, since the sample it waits to see replaced may never be.
const stateHorizon = time.Hour

// maxStateRecords bounds the ConfigMap: a record is about 150 bytes, so
// the ConfigMap stays far below the API's 1 MiB; the records seen least
// recently go first.
const maxStateRecords = 5000

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

// state is every node's record, as read at the start of a cycle.
type state struct {
	records map[string]nodeRecord
	// exists: the ConfigMap was found (patched, not created, on save).
	exists          bool
	resourceVersion string
	changed         bool
	// stored is the ConfigMap's data at resourceVersion, as this process
	// last read or wrote it: a write sends only the records that differ
	// from it.
	stored map[string]string
	// budget is the eviction budget's ledger (budgetKey), never nil; it
	// is written only by writeBudget, before each eviction, with
	// budgetArgs and budgetAt the budget and time it is pruned by.
	budget     *budgetLedger
	budgetArgs *EvictionBudget
	budgetAt   time.Time
}

// newState is an empty record.
func newState() *state {
	return &state{records: map[string]nodeRecord{}, budget: &budgetLedger{}}
}

// stateStore keeps the records in a ConfigMap, one key per node, each a
// small JSON object, so that an operator can read them
// (kubectl get configmap -o yaml).
type stateStore struct {
	client          clientset.Interface
	namespace, name string
	// saved is the ConfigMap's data as this process last wrote it.
	saved map[string]string
}

// load reads the records. A missing ConfigMap is what this process last
// wrote, if anything: in dry-run mode the client is a sandbox made afresh
// for every cycle, and an operator may have deleted it.
func (s *stateStore) load(ctx context.Context) (*state, error) {
	st := newState()
	cm, err := s.client.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if s.saved != nil {
			st.changed = true
			st.records = parseRecords(s.saved, nil)
			raw, ok := s.saved[budgetKey]
			st.budget = parseLedger(klog.FromContext(ctx), raw, ok)
		}
		return st, nil
	case err != nil:
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", s.namespace, s.name, err)
	}
	st.exists, st.resourceVersion = true, cm.ResourceVersion
	st.stored = cm.Data
	if st.stored == nil {
		st.stored = map[string]string{}
	}
	st.records = parseRecords(st.stored, func(string) {
		// A record someone broke is dropped: the node starts afresh,
		// which delays its relief (the debounce) rather than hastens it.
		st.changed = true
	})
	raw, ok := st.stored[budgetKey]
	st.budget = parseLedger(klog.FromContext(ctx), raw, ok)
	return st, nil
}

// parseRecords reads a ConfigMap's data, the budget's ledger aside;
// broken is told of each record that does not parse, which is left out.
func parseRecords(data map[string]string, broken func(node string)) map[string]nodeRecord {
	records := make(map[string]nodeRecord, len(data))
	for node, raw := range data {
		if node == budgetKey {
			continue
		}
		var r nodeRecord
		if err := json.Unmarshal([]byte(raw), &r); err != nil {
			if broken != nil {
				broken(node)
			}
			continue
		}
		records[node] = r
	}
	return records
}

// save writes the records back if they changed, after dropping those not
// touched within horizon (0: keep reliefs, see stateHorizon) and, beyond
// maxStateRecords, the oldest. Only the records that differ from the
// ConfigMap's are sent (see write).
func (s *stateStore) save(ctx context.Context, st *state, now time.Time, horizon time.Duration) error {
	for node, r := range st.records {
		if horizon == 0 && r.Relieved != nil {
			continue
		}
		if now.Sub(r.last()) > max(horizon, stateHorizon) {
			delete(st.records, node)
			st.changed = true
		}
	}
	if len(st.records) > maxStateRecords {
		nodes := make([]string, 0, len(st.records))
		for node := range st.records {
			nodes = append(nodes, node)
		}
		slices.SortFunc(nodes, func(a, b string) int { return st.records[a].last().Compare(st.records[b].last()) })
		for _, node := range nodes[:len(nodes)-maxStateRecords] {
			delete(st.records, node)
		}
		st.changed = true
	}
	if !st.changed {
		return nil
	}
	if err := s.write(ctx, st, nil, nil); err != nil {
		return err
	}
	st.changed = false
	return nil
}

// saveNode writes the record of node alone, as it is after an eviction:
// one key of the ConfigMap, whatever the number of records. A ConfigMap
// that does not exist yet is created with every record (save).
func (s *stateStore) saveNode(ctx context.Context, st *state, node string, now time.Time, horizon time.Duration) error {
	if !st.exists {
		return s.save(ctx, st, now, horizon)
	}
	return s.write(ctx, st, []string{node}, nil)
}

// writeBudget writes the budget's ledger after count has changed it, and
// retries on a conflict from the ledger the API server holds: a write by
// another replica, or by this process's predecessor, is read (rebase) and
// count runs again on it, so that no eviction counted by anyone is lost
// and none is counted twice. A ledger that does not change is not
// written.
func (s *stateStore) writeBudget(ctx context.Context, st *state, b *EvictionBudget, now time.Time, count func() error) error {
	st.budgetArgs, st.budgetAt = b, now
	return s.write(ctx, st, []string{budgetKey}, count)
}

// write brings the ConfigMap's keys of nodes (every key where nodes is nil)
// to st.records: it creates the ConfigMap where it does not exist, and
// otherwise sends a JSON merge patch of the keys that differ from st.stored
// (null for a record dropped), so that a write after an eviction costs the
// same with 10 records as with 5,000, and keys this process did not change
// are never written.
//
// The patch carries the resourceVersion last read or written, so the API
// server refuses it (409) if anyone else changed the ConfigMap meanwhile:
// an operator's edit is then read (rebase) and kept, unless it touched a
// record this process changes too; that record is this run's (an eviction
// made after the edit must be remembered) and the overwrite is logged. Two
// descheduler replicas never run at once (leader election); an edit by an
// operator is rare, and the retry costs one Get.
//
// prepare, when not nil, is called before each attempt, after a refused one
// has read the ConfigMap again: writeBudget counts an eviction there.
func (s *stateStore) write(ctx context.Context, st *state, nodes []string, prepare func() error) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if prepare != nil {
			if err := prepare(); err != nil {
				return err
			}
		}
		if !st.exists {
			return s.create(ctx, st)
		}
		diff, err := st.diff(nodes)
		if err != nil || len(diff) == 0 {
			return err
		}
		body := map[string]any{"data": diff}
		if st.resourceVersion != "" { // empty only from a fake clientset
			body["metadata"] = map[string]string{"resourceVersion": st.resourceVersion}
		}
		patch, err := json.Marshal(body)
		if err != nil {
			return err
		}
		written, err := s.client.CoreV1().ConfigMaps(s.namespace).Patch(ctx, s.name, types.MergePatchType, patch, metav1.PatchOptions{})
		switch {
		case apierrors.IsConflict(err):
			if rerr := s.rebase(ctx, st); rerr != nil {
				return rerr
			}
			return err // retried from the ConfigMap read again
		case apierrors.IsNotFound(err):
			// Deleted since it was read: created afresh, as load
			// would find it missing.
			st.exists, st.resourceVersion, st.stored = false, "", nil
			return s.create(ctx, st)
		case err != nil:
			return err
		}
		for node, raw := range diff {
			if raw == nil {
				delete(st.stored, node)
			} else {
				st.stored[node] = *raw
			}
		}
		if written != nil {
			st.resourceVersion = written.ResourceVersion
		}
		s.saved = st.stored
		return nil
	})
	if err != nil {
		return fmt.Errorf("writing ConfigMap %s/%s: %w", s.namespace, s.name, err)
	}
	return nil
}

// create writes every record as a new ConfigMap.
func (s *stateStore) create(ctx context.Context, st *state) error {
	cm := &v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: s.name,
			Labels: map[string]string{"app.kubernetes.io/name": "headroom-descheduler", "app.kubernetes.io/part-of": "headroom"}},
		Data: make(map[string]string, len(st.records)),
	}
	for node, r := range st.records {
		raw, err := json.Marshal(r)
		if err != nil {
			return err
		}
		cm.Data[node] = string(raw)
	}
	if raw, err := st.budget.marshal(st.budgetArgs, st.budgetAt); err != nil {
		return err
	} else if raw != "" {
		cm.Data[budgetKey] = raw
	}
	written, err := s.client.CoreV1().ConfigMaps(s.namespace).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	st.exists, st.stored = true, cm.Data
	if written != nil {
		st.resourceVersion = written.ResourceVersion
	}
	s.saved = st.stored
	return nil
}

// diff returns, for nodes (every node of the records or the ConfigMap where
// nil), the records that differ from the ConfigMap's: the JSON to write,
// nil for a record to remove.
func (st *state) diff(nodes []string) (map[string]*string, error) {
	if nodes == nil {
		nodes = make([]string, 0, len(st.records)+len(st.stored))
		for node := range st.records {
			nodes = append(nodes, node)
		}
		for node := range st.stored {
			if _, ok := st.records[node]; !ok && node != budgetKey {
				nodes = append(nodes, node)
			}
		}
	}
	diff := map[string]*string{}
	for _, node := range nodes {
		old, had := st.stored[node]
		if node == budgetKey {
			raw, err := st.budget.marshal(st.budgetArgs, st.budgetAt)
			switch {
			case err != nil:
				return nil, err
			case raw == "" && had:
				diff[node] = nil
			case raw != "" && raw != old:
				diff[node] = &raw
			}
			continue
		}
		r, ok := st.records[node]
		if !ok {
			if had {
				diff[node] = nil
			}
			continue
		}
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		if raw := string(b); !had || raw != old {
			diff[node] = &raw
		}
	}
	return diff, nil
}

// rebase reads the ConfigMap again after a write was refused for a change
// made by someone else: the records this process has not changed take the
// ConfigMap's values; those it changed keep its own, and a concurrent
// change to one of them is logged, since the next write overwrites it.
func (s *stateStore) rebase(ctx context.Context, st *state) error {
	cm, err := s.client.CoreV1().ConfigMaps(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		st.exists, st.resourceVersion, st.stored = false, "", nil
		return nil
	}
	if err != nil {
		return err
	}
	mine, err := st.diff(nil)
	if err != nil {
		return err
	}
	theirs := cm.Data
	if theirs == nil {
		theirs = map[string]string{}
	}
	fresh := parseRecords(theirs, nil)
	// The ledger is always theirs: this process's evictions in it were
	// written before they were requested (writeBudget), and a count under
	// way runs again on theirs.
	raw, ok := theirs[budgetKey]
	st.budget = parseLedger(klog.FromContext(ctx), raw, ok)
	for _, node := range slices.Sorted(maps.Keys(keysOf(st.stored, theirs))) {
		if node == budgetKey {
			continue
		}
		old, had := st.stored[node]
		now, has := theirs[node]
		if had == has && old == now {
			continue
		}
		if _, changed := mine[node]; changed {
			klog.FromContext(ctx).Info("Warning: the record of a node was changed by someone else while this run changed it too; this run's record is written",
				"plugin", PluginName, "configMap", klog.KRef(s.namespace, s.name), "node", node)
			continue
		}
		if r, ok := fresh[node]; ok {
			st.records[node] = r
		} else {
			// Removed, or broken: as load would, the node starts afresh.
			delete(st.records, node)
		}
	}
	st.stored, st.resourceVersion = theirs, cm.ResourceVersion
	return nil
}

// keysOf is the union of the keys of a and b.
func keysOf(a, b map[string]string) map[string]struct{} {
	keys := make(map[string]struct{}, len(a)+len(b))
	for k := range a {
		keys[k] = struct{}{}
	}
	for k := range b {
		keys[k] = struct{}{}
	}
	return keys
}

// parseStateConfigMap splits "namespace/name".
func parseStateConfigMap(ref string) (namespace, name string, ok bool) {
	namespace, name, ok = strings.Cut(ref, "/")
	return namespace, name, ok && namespace != "" && name != ""
}

// clone copies the records, for a plan that must change nothing.
func (st *state) clone() *state {
	c := *st
	c.stored = maps.Clone(st.stored)
	c.records = make(map[string]nodeRecord, len(st.records))
	for node, r := range st.records {
		c.records[node] = r.owned()
	}
	c.budget = st.budget.clone()
	return &c
}

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
