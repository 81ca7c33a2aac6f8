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

// maxStateRecords bounds the ConfigMap: a record is about 150 bytes, so
// the ConfigMap stays far below the API's 1 MiB; the records seen least
// recently go first.
const maxStateRecords = 5000

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
