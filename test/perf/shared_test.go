package perf

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	fwk "k8s.io/kube-scheduler/framework"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// The shared method (-perf-shared, make perf's PERF_SHARED=1) runs all the
// profiles in one kube-scheduler, one profile per schedulerName, and gives
// the measured pods to them in turn (turns). Every
// profile then meets the same machine, process, heap, API server and
// cluster at the same moments, which the separate runs of the other method
// cannot give on two cores: there the default profile against an identical
// copy of itself, run after run, made 0.65 to 0.91 of its pods/s.
//
// Pods/s cannot be told apart per profile when they share one queue, so
// each profile's scheduling cycle is timed instead: cycleClock, added to
// every profile, starts first in PreFilter and stops last in Reserve. What
// it misses (popping the queue, the snapshot, binding) is the same whatever
// the profile. It cannot see what a profile costs outside its cycles (its
// plugins' event handlers and background work, the garbage it leaves):
// every profile's cycles share that. Nor can it see opportunistic batching,
// which needs two pods of one profile in a row.

// clockName is the cycle clock plugin's name.
const clockName = "PerfCycleClock"

// cycleMetric is the histogram the clock observes, per profile; the harness
// collects it like its own metrics (the data items' "profile" label).
const cycleMetric = "headroom_perf_scheduling_cycle_duration_seconds"

var cycleDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
	Name:           cycleMetric,
	Help:           "make perf's shared method: a profile's scheduling cycle, from its first PreFilter to its last Reserve plugin.",
	Buckets:        metrics.ExponentialBuckets(0.0001, 1.25, 48),
	StabilityLevel: metrics.ALPHA,
}, []string{"profile"})

var registerClock sync.Once

// clockStart is when the cycle clock started, in a pod's CycleState.
type clockStart time.Time

func (c clockStart) Clone() fwk.StateData { return c }

const clockKey fwk.StateKey = clockName

// cycleClock times a scheduling cycle: PreFilter (where it runs first)
// to Reserve (where it runs last). A cycle that fails before Reserve is not
// timed (the harness's attempt durations by result show them).
type cycleClock struct{}

func (cycleClock) Name() string { return clockName }

func (cycleClock) PreFilter(_ context.Context, state fwk.CycleState, _ *corev1.Pod, _ []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	state.Write(clockKey, clockStart(time.Now()))
	return nil, nil
}

func (cycleClock) PreFilterExtensions() fwk.PreFilterExtensions { return nil }

func (cycleClock) Reserve(_ context.Context, state fwk.CycleState, pod *corev1.Pod, _ string) *fwk.Status {
	if start, err := state.Read(clockKey); err == nil {
		cycleDuration.WithLabelValues(pod.Spec.SchedulerName).Observe(time.Since(time.Time(start.(clockStart))).Seconds())
	}
	return nil
}

func (cycleClock) Unreserve(context.Context, fwk.CycleState, *corev1.Pod, string) {}

// EventsToRegister: the clock never rejects a pod, so no event concerns it.
// Without it the framework would take the clock for a plugin that needs
// every event, and handle and track them all for its sake.
func (cycleClock) EventsToRegister(context.Context) ([]fwk.ClusterEventWithHint, error) {
	return nil, nil
}

// SignPod: the clock treats every pod alike. A plugin that cannot sign pods
// would turn the profile's opportunistic batching off.
func (cycleClock) SignPod(context.Context, *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return nil, nil
}

// clockRegistry returns the clock's factory, with its metric registered.
func clockRegistry() frameworkruntime.Registry {
	registerClock.Do(func() { legacyregistry.MustRegister(cycleDuration) })
	return frameworkruntime.Registry{
		clockName: func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) { return cycleClock{}, nil },
	}
}

// sharedProfile is the pseudo-profile of a shared run: its test cases and
// pod templates (pod-Shared-run<n>.yaml).
const sharedProfile = "Shared"

// writeSharedConfig writes one KubeSchedulerConfiguration holding each of
// profs (the first profile of each one's configuration) as a profile of its
// own, named after it in lower case and with the cycle clock added. It
// returns it as a profile whose pods go to them in turn, for runs runs, and
// profs with their schedulerNames in it. The top-level settings are the
// first profile's.
func writeSharedConfig(t testing.TB, dir string, profs []profile, runs int) (profile, []profile) {
	t.Helper()
	var cfg schedconfigv1.KubeSchedulerConfiguration
	var sharing []profile
	for i, p := range profs {
		c := readConfig(t, p.Config)
		if len(c.Profiles) != 1 {
			t.Fatalf("%s: %d profiles, want 1 to share", p.Config, len(c.Profiles))
		}
		if i == 0 {
			cfg = c
			cfg.Profiles = nil
		}
		sp := c.Profiles[0]
		p.SchedulerName = strings.ToLower(p.Name)
		sp.SchedulerName = &p.SchedulerName
		if sp.Plugins == nil {
			sp.Plugins = &schedconfigv1.Plugins{}
		}
		// Named at PreFilter as well as in multiPoint, the clock runs
		// first there (an explicit setting comes before multiPoint's
		// plugins); from multiPoint it runs last at Reserve.
		sp.Plugins.MultiPoint.Enabled = append(sp.Plugins.MultiPoint.Enabled, schedconfigv1.Plugin{Name: clockName})
		sp.Plugins.PreFilter.Enabled = append([]schedconfigv1.Plugin{{Name: clockName}}, sp.Plugins.PreFilter.Enabled...)
		cfg.Profiles = append(cfg.Profiles, sp)
		sharing = append(sharing, p)
	}
	path := filepath.Join(dir, "scheduler-shared.yaml")
	writeConfig(t, path, &cfg)
	shared := profile{Name: sharedProfile, Config: path}
	for run := 1; run <= runs; run++ {
		shared.turns = append(shared.turns, turns(sharing, run))
	}
	return shared, sharing
}

// turns is the pod template's schedulerName for a run: pod i goes to the
// (i mod n)th of the profiles in the run's order. The order starts one
// further every run and goes backwards every other run, so that no profile
// keeps its place, or the profile it follows, from run to run (with an even
// number of profiles not every place comes round: four runs of four give
// the first profile places 1, 1, 3, 3).
func turns(sharing []profile, run int) string {
	n := len(sharing)
	order := make([]string, 0, n)
	for k := range n {
		order = append(order, sharing[(k+run-1)%n].SchedulerName)
	}
	if run%2 == 0 {
		slices.Reverse(order)
	}
	var expr strings.Builder
	for i, name := range order {
		fmt.Fprintf(&expr, "{{if eq (%s .Index %d) %d}}%s{{end}}", templateMod, n, i, name)
	}
	return expr.String()
}

// cycleTimes are a shared run's mean scheduling cycles, in ms: by workload,
// then run, then profile (schedulerName).
type cycleTimes map[string]map[int]map[string]float64

// sharedCaseName matches the harness's Name label of a shared run's data
// item: BenchmarkPerfScheduling/<workload>_Shared_run<n>/<params>/<namespace>.
var sharedCaseName = regexp.MustCompile(`(?:^|/)([^/]+)_` + sharedProfile + `_run(\d+)/`)

// cycleItem is the cycle clock's data item for one profile in one
// workload's run.
type cycleItem struct {
	Name, Profile string  // the harness's Name label, the schedulerName
	Mean          float64 // ms
}

// readCycleItems reads the cycle clock's data items from the harness's data
// items file.
func readCycleItems(path string) ([]cycleItem, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var items struct {
		DataItems []struct {
			Data   map[string]float64 `json:"data"`
			Labels map[string]string  `json:"labels"`
		} `json:"dataItems"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []cycleItem
	for _, it := range items.DataItems {
		if it.Labels["Metric"] == cycleMetric {
			out = append(out, cycleItem{Name: it.Labels["Name"], Profile: it.Labels["profile"], Mean: it.Data["Average"]})
		}
	}
	return out, nil
}

// byRun sorts the shared runs' items by workload, run and profile; the
// warm-up's are left out.
func byRun(items []cycleItem) cycleTimes {
	out := cycleTimes{}
	for _, it := range items {
		m := sharedCaseName.FindStringSubmatch(it.Name)
		if m == nil || strings.HasPrefix(m[1], "Warmup-") {
			continue
		}
		run, _ := strconv.Atoi(m[2])
		if out[m[1]] == nil {
			out[m[1]] = map[int]map[string]float64{}
		}
		if out[m[1]][run] == nil {
			out[m[1]][run] = map[string]float64{}
		}
		out[m[1]][run][it.Profile] = it.Mean
	}
	return out
}

// complete reports a run of a workload that lacks one of the profiles.
func (c cycleTimes) complete(sharing []profile) error {
	if len(c) == 0 {
		return errors.New("no shared run's cycles in the data items")
	}
	var missing []string
	for w, runs := range c {
		for r, byProfile := range runs {
			for _, p := range sharing {
				if byProfile[p.SchedulerName] <= 0 {
					missing = append(missing, fmt.Sprintf("%s run %d: %s", w, r, p.Name))
				}
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("no cycles clocked for %s", strings.Join(missing, "; "))
	}
	return nil
}

// table prints, per workload and profile after the first, the runs' mean
// cycles and the median of the runs' ratios (the first profile's cycle over
// the profile's: above 1 is faster than the baseline).
func (c cycleTimes) table(sharing []profile) string {
	var b strings.Builder
	fmt.Fprintf(&b, "shared scheduler: mean scheduling cycle per profile (PreFilter to Reserve), ms; ratio = %s's cycle / the profile's\n", sharing[0].Name)
	fmt.Fprintf(&b, "%-28s %-20s %5s %10s %10s %7s  %s\n", "workload", "profile", "runs", "base ms", "ms", "ratio", "per run (base/profile ms = ratio)")
	base := sharing[0].SchedulerName
	for _, w := range slices.Sorted(maps.Keys(c)) {
		runs := slices.Sorted(maps.Keys(c[w]))
		for _, p := range sharing[1:] {
			var baseMs, ms, ratios []float64
			var per []string
			for _, r := range runs {
				baseCycle, ok1 := c[w][r][base]
				cycle, ok2 := c[w][r][p.SchedulerName]
				if !ok1 || !ok2 || cycle == 0 {
					continue
				}
				ratio := baseCycle / cycle
				baseMs, ms, ratios = append(baseMs, baseCycle), append(ms, cycle), append(ratios, ratio)
				per = append(per, fmt.Sprintf("%.3f/%.3f = %.3f", baseCycle, cycle, ratio))
			}
			fmt.Fprintf(&b, "%-28s %-20s %5d %10.3f %10.3f %7.3f  %s\n", w, p.Name, len(ratios),
				median(baseMs), median(ms), median(ratios), strings.Join(per, ", "))
		}
	}
	return b.String()
}

// median of xs (0 for none).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// newestDataItems returns the newest data items file in dir that the
// harness wrote for topic (RunBenchmarkPerfScheduling's topicName).
func newestDataItems(dir, topic string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*_benchmark_"+topic+"_*.json"))
	if err != nil {
		return "", err
	}
	var newest string
	var at time.Time
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			return "", err
		}
		if newest == "" || fi.ModTime().After(at) {
			newest, at = f, fi.ModTime()
		}
	}
	if newest == "" {
		return "", fmt.Errorf("no data items of %s in %s", topic, dir)
	}
	return newest, nil
}

// TestSharedConfigClocksEveryProfile: the shared configuration holds each
// profile as it is, under its own schedulerName, with the cycle clock first
// at PreFilter and last at Reserve; Headroom's profile keeps its plugins and
// its Filter order.
func TestSharedConfigClocksEveryProfile(t *testing.T) {
	dir := t.TempDir()
	profs := profiles(t, dir, []string{"Default", "Headroom", "DefaultAgain"})
	sp, sharing := writeSharedConfig(t, dir, profs, 4)
	if got := []string{sharing[0].SchedulerName, sharing[1].SchedulerName, sharing[2].SchedulerName}; !slices.Equal(got, []string{"default", "headroom", "defaultagain"}) {
		t.Errorf("schedulerNames %v", got)
	}
	listed := listProfiles(t, sp.Config)
	if len(listed) != 3 {
		t.Fatalf("%d profiles, want 3", len(listed))
	}
	for i, pl := range listed {
		// The clock comes first at PreFilter and last at Reserve; apart
		// from it, each profile has the plugins, in the order and with the
		// weights, that it has alone.
		alone := listPlugins(t, profs[i].Config)
		for _, point := range []struct {
			name       string
			got, alone []schedconfig.Plugin
			clock      int // where the clock is: 0 first, -1 last
		}{
			{"PreFilter", pl.PreFilter.Enabled, alone.PreFilter.Enabled, 0},
			{"Reserve", pl.Reserve.Enabled, alone.Reserve.Enabled, -1},
			{"Filter", pl.Filter.Enabled, alone.Filter.Enabled, 0},
			{"PreScore", pl.PreScore.Enabled, alone.PreScore.Enabled, 0},
			{"Score", pl.Score.Enabled, alone.Score.Enabled, 0},
		} {
			got, want := weighted(point.got), weighted(point.alone)
			if point.name == "PreFilter" {
				want = append([]string{clockName + ":0"}, want...)
			}
			if point.name == "Reserve" {
				want = append(want, clockName+":0")
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: %s %v, want %v", sharing[i].Name, point.name, got, want)
			}
		}
	}
	// Pod i goes to the (i mod 3)th profile of the run's order: the
	// profiles' order turned by one more each run, backwards in even runs.
	mod := template.FuncMap{templateMod: func(a, b int) int { return a % b }}
	for run, want := range [][]string{
		{"default", "headroom", "defaultagain"},
		{"default", "defaultagain", "headroom"},
		{"defaultagain", "default", "headroom"},
		{"defaultagain", "headroom", "default"},
	} {
		tmpl := template.Must(template.New("").Funcs(mod).Parse(sp.turns[run]))
		for i := range 6 {
			var got strings.Builder
			if err := tmpl.Execute(&got, map[string]int{"Index": i}); err != nil {
				t.Fatal(err)
			}
			if got.String() != want[i%3] {
				t.Errorf("run %d: pod %d goes to %q, want %q", run+1, i, got.String(), want[i%3])
			}
		}
	}
}

// weighted lists plugins as name:weight.
func weighted(enabled []schedconfig.Plugin) []string {
	var out []string
	for _, pl := range enabled {
		out = append(out, fmt.Sprintf("%s:%d", pl.Name, pl.Weight))
	}
	return out
}

// TestSharedRunClocksEachProfile runs a small workload the shared way in
// the harness, the default and Headroom's profile in one scheduler: both
// profiles' cycles are clocked, and the summary compares them.
func TestSharedRunClocksEachProfile(t *testing.T) {
	dir := t.TempDir()
	sp, sharing := writeSharedConfig(t, dir, profiles(t, dir, []string{"Default", "Headroom"}), 1)
	c := testCase{Name: "MixedFleet", Workload: "Smoke5Nodes", Label: "smoke", Profile: sp.Name,
		SchedulerConfig: sp.Config, Run: 1, Clocked: []string{sharing[0].SchedulerName, sharing[1].SchedulerName},
		Params: map[string]int{"nodesUsual": 5, "nodesPIDShort": 0, "nodesSmall": 0, "nodesUnknown": 0, "initPods": 2, "measurePods": 20}}
	itemsDir := filepath.Join(dir, "items")
	f := flag.Lookup("data-items-dir")
	was := f.Value.String()
	if err := flag.Set("data-items-dir", itemsDir); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = flag.Set("data-items-dir", was) })
	config := render(t, dir, []testCase{c}, []profile{sp})

	runSmoke(t, config, "shared")
	items, err := newestDataItems(itemsDir, "shared")
	if err != nil {
		t.Fatal(err)
	}
	cycles, err := readCycleItems(items)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sharing {
		i := slices.IndexFunc(cycles, func(c cycleItem) bool { return c.Profile == p.SchedulerName })
		if i < 0 || cycles[i].Mean <= 0 {
			t.Errorf("%s: no cycle measured: %v", p.Name, cycles)
		}
	}
	t.Logf("cycles: %v", cycles)
}

// TestSharedTable: the shared method's summary reads the runs from the
// harness's Name labels, leaves the warm-up out and gives each profile the
// median of its runs' ratios to the baseline.
func TestSharedTable(t *testing.T) {
	item := func(tc string, profile string, ms float64) cycleItem {
		return cycleItem{Name: "BenchmarkPerfScheduling/" + tc + "/5000Nodes/namespace-2", Profile: profile, Mean: ms}
	}
	times := byRun([]cycleItem{
		item("Warmup-500Nodes_Shared_run1", "default", 9), item("Warmup-500Nodes_Shared_run1", "headroom", 1),
		item("TightFleet-5000Nodes_Shared_run1", "default", 2.0), item("TightFleet-5000Nodes_Shared_run1", "headroom", 2.5),
		item("TightFleet-5000Nodes_Shared_run2", "default", 3.0), item("TightFleet-5000Nodes_Shared_run2", "headroom", 3.0),
		item("TightFleet-5000Nodes_Shared_run3", "default", 1.8), item("TightFleet-5000Nodes_Shared_run3", "headroom", 2.0),
		item("TightFleet-5000Nodes_Default_run1", "default", 5), // not a shared run
	})
	if len(times) != 1 || len(times["TightFleet-5000Nodes"]) != 3 {
		t.Fatalf("runs %v, want TightFleet's three", times)
	}
	sharing := []profile{{Name: "Default", SchedulerName: "default"}, {Name: "Headroom", SchedulerName: "headroom"}}
	if err := times.complete(sharing); err != nil {
		t.Error(err)
	}
	// A run without one of the profiles is an error, as are no runs.
	if err := times.complete(append(sharing, profile{Name: "DefaultAgain", SchedulerName: "defaultagain"})); err == nil ||
		!strings.Contains(err.Error(), "TightFleet-5000Nodes run 1: DefaultAgain") {
		t.Errorf("a profile clocked in no run: %v", err)
	}
	if err := (cycleTimes{}).complete(sharing); err == nil {
		t.Error("no runs: no error")
	}
	table := times.table(sharing)
	// Ratios 0.8, 1.0 and 0.9: the median is 0.9 (the median cycles, 2.0
	// and 2.5, would give 0.8).
	want := regexp.MustCompile(`TightFleet-5000Nodes\s+Headroom\s+3\s+2\.000\s+2\.500\s+0\.900\s+2\.000/2\.500 = 0\.800, 3\.000/3\.000 = 1\.000, 1\.800/2\.000 = 0\.900`)
	if !want.MatchString(table) {
		t.Errorf("table:\n%s\nwant a row matching %s", table, want)
	}
}
