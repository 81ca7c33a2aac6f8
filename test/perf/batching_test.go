package perf

// Opportunistic batching (the OpportunisticBatching feature gate, on by
// default since 1.35): when the next pod has the same signature as the last
// (every Filter and Score plugin of its profile signs it, Headroom's too),
// the scheduler tries the last cycle's runner-up node first instead of
// filtering and scoring every node. 1.37 also rescores the last chosen node
// when it still fits, so batching applies where a node takes many pods.
// But PodTopologySpread does not sign a pod while it has default
// constraints, and kube-scheduler defaults them (the system's spreading by
// zone and hostname), so with its defaults no pod of any profile is
// batched. Its counters, read per workload, say how often it applied to
// each profile; the NoSpread variants make it possible and the Unbatched
// ones turn it off, to measure what it gives.

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"k8s.io/component-base/metrics/legacyregistry"
)

// batchingGate is the scheduler's feature gate of opportunistic batching.
const batchingGate = "OpportunisticBatching"

// The scheduler's batching counters (pkg/scheduler/metrics), labelled by
// profile.
const (
	batchAttemptsMetric = "scheduler_batch_attempts_total"         // by result: hint_used, hint_not_used, no_hint
	batchFlushedMetric  = "scheduler_batch_cache_flushed_total"    // by reason
	batchRescoreMetric  = "scheduler_batch_rescore_attempts_total" // 1.37: the last chosen node rescored
)

// batching is what the batching counters say about one profile.
type batching struct {
	Attempts map[string]float64 // by result
	Flushed  map[string]float64 // by reason
	Rescores float64
}

// batchingByProfile reads the batching counters from the registry the
// scheduler's metrics go to, by profile (schedulerName).
func batchingByProfile() (map[string]*batching, error) {
	families, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		return nil, err
	}
	out := map[string]*batching{}
	of := func(m *dto.Metric) *batching {
		p := label(m, "profile")
		if out[p] == nil {
			out[p] = &batching{Attempts: map[string]float64{}, Flushed: map[string]float64{}}
		}
		return out[p]
	}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			v := m.GetCounter().GetValue()
			switch f.GetName() {
			case batchAttemptsMetric:
				of(m).Attempts[label(m, "result")] += v
			case batchFlushedMetric:
				of(m).Flushed[label(m, "reason")] += v
			case batchRescoreMetric:
				of(m).Rescores += v
			}
		}
	}
	return out, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// String is one line: the attempts by result, the rescores and the
// flushes by reason, in a stable order.
func (b *batching) String() string {
	var parts []string
	for _, r := range []string{"hint_used", "hint_not_used", "no_hint"} {
		parts = append(parts, fmt.Sprintf("%s=%.0f", r, b.Attempts[r]))
	}
	parts = append(parts, fmt.Sprintf("rescores=%.0f", b.Rescores))
	for _, r := range slices.Sorted(maps.Keys(b.Flushed)) {
		parts = append(parts, fmt.Sprintf("flushed.%s=%.0f", r, b.Flushed[r]))
	}
	return strings.Join(parts, " ")
}

// workloadTesting is what the batching report uses of a workload's test:
// its name, and a cleanup that runs after the workload, before the harness
// resets the metrics.
type workloadTesting interface {
	Name() string
	Cleanup(func())
}

// testingOf returns the harness context's test, its TB(): the hook runs
// only from 1.37 (batchingCountable), whose context is a struct of a
// package whose TB type this test does not name.
func testingOf(ctx any) (workloadTesting, error) {
	if m := reflect.ValueOf(ctx).MethodByName("TB"); m.IsValid() && m.Type().NumIn() == 0 && m.Type().NumOut() == 1 {
		if t, ok := m.Call(nil)[0].Interface().(workloadTesting); ok {
			return t, nil
		}
	}
	return nil, fmt.Errorf("the harness's context %T has no TB() with Name and Cleanup", ctx)
}

// onWorkloadEnd calls report with each profile's batching counters when a
// workload of the harness ends (a prepare hook: withPrepare).
func onWorkloadEnd(report func(workload string, byProfile map[string]*batching)) func(clientContext) error {
	return func(ctx clientContext) error {
		t, err := testingOf(ctx)
		if err != nil {
			return err
		}
		// The harness registered its own cleanup, which resets the
		// metrics, before calling the hook: this one runs first.
		t.Cleanup(func() {
			byProfile, err := batchingByProfile()
			if err != nil {
				fmt.Printf("batching: %s: %v\n", t.Name(), err)
				return
			}
			report(t.Name(), byProfile)
		})
		return nil
	}
}

// printBatching prints a line per profile that batching was tried for, for
// make perf to show with each run.
var printBatching = onWorkloadEnd(func(workload string, byProfile map[string]*batching) {
	workload = strings.TrimPrefix(workload, "BenchmarkPerfScheduling/")
	for _, p := range slices.Sorted(maps.Keys(byProfile)) {
		fmt.Printf("batching: %s profile=%s %s\n", workload, p, byProfile[p])
	}
})
