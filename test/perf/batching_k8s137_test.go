//go:build !k8s1.35 && !k8s1.36

// Before 1.37 the harness's batching counters cannot be read
// (harness_k8s136_test.go).

package perf

import (
	"cmp"
	"testing"
)

// TestBatchingAppliesToHeadroom runs a small one-pod-a-node workload, where
// batching helps most, under three Headroom profiles. The shipped one: the
// default PodTopologySpread's system default constraints leave no pod
// signed, so batching never applies, as with kube-scheduler's default
// profile. Without them (HeadroomNoSpread): the scheduler signs the pods,
// Headroom's plugins included (a Filter or Score plugin that cannot sign
// would leave none signed), and uses its hints. The same with batching off:
// it is never tried.
func TestBatchingAppliesToHeadroom(t *testing.T) {
	dir := t.TempDir()
	profs := profiles(t, dir, []string{"Headroom", "HeadroomNoSpread", "HeadroomNoSpreadUnbatched"})
	const pods = 20
	var cases []testCase
	for _, p := range profs {
		cases = append(cases, testCase{Name: "OnePodPerNode", Workload: "Smoke20Nodes", Label: "smoke", Profile: p.Name,
			SchedulerConfig: p.Config, Run: 1, FeatureGates: p.featureGates(), Params: map[string]int{"nodes": pods, "measurePods": pods}})
	}
	config := render(t, dir, cases, profs)

	got := map[string]*batching{} // by the test profile's name
	runSmoke(t, config, "batching", withPrepare(onWorkloadEnd(func(workload string, byProfile map[string]*batching) {
		// The workloads run in order, one at a time.
		p := profs[len(got)]
		// Nothing registered under the profile: never tried.
		got[p.Name] = cmp.Or(byProfile[p.SchedulerName], &batching{})
	})))
	if len(got) != len(profs) {
		t.Fatalf("%d workloads reported, want %d: %v", len(got), len(profs), got)
	}
	tried := func(b *batching) float64 {
		return b.Attempts["hint_used"] + b.Attempts["no_hint"] + b.Attempts["hint_not_used"]
	}
	if b := got["Headroom"]; b.Attempts["hint_used"] > 0 || b.Flushed["pod_not_batchable"] < pods-1 {
		t.Errorf("shipped profile: want no hint and every pod but the last unsigned, got %v", b)
	}
	if b := got["HeadroomNoSpread"]; b.Attempts["hint_used"] == 0 || tried(b) < pods {
		t.Errorf("without default spreading: want a hint used and the %d pods tried, got %v", pods, b)
	}
	if b := got["HeadroomNoSpreadUnbatched"]; tried(b) > 0 {
		t.Errorf("batching off: want it never tried, got %v", b)
	}
	for _, p := range profs {
		t.Logf("%s: %v", p.Name, got[p.Name])
	}
}
