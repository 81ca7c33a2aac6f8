// Package perf measures Headroom's scheduler profile against kube-scheduler's
// default profile with Kubernetes' own benchmark harness,
// k8s.io/kubernetes/test/integration/scheduler_perf: an in-process
// kube-apiserver (etcd from PATH), the scheduler with Headroom's plugins
// registered out of tree, and the workloads of performance-config.yaml.
//
// `make perf` (hack/perf.sh) runs BenchmarkPerfScheduling: by default every
// profile in one scheduler, each one's scheduling cycle clocked
// (shared_test.go), printing the ratios of their cycles; with -perf-shared=false
// each profile in runs of its own, printing pods/s of each and their ratio.
// TestSmoke, part of `make test`, runs a 5-node workload with the Headroom
// profile and checks that the plugins ran.
package perf

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/template"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	benchmark "k8s.io/kubernetes/test/integration/scheduler_perf"
	"sigs.k8s.io/yaml"

	_ "github.com/headroom-k8s/headroom/apis/config/scheme"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins"
)

func TestMain(m *testing.M) {
	// The harness starts etcd from PATH: the repository's bin/ (make tools)
	// comes first.
	if bin, err := filepath.Abs("../../bin"); err == nil {
		if _, err := os.Stat(filepath.Join(bin, "etcd")); err == nil {
			os.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
		}
	}
	if err := benchmark.InitTests(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

var (
	runs         = flag.Int("perf-runs", 3, "runs of SchedulingBasic at 5000 and 15000 nodes, TightFleet, MixedFleet and Churn, per profile or shared (make perf reports the median)")
	order        = flag.String("perf-order", "abba", "order of the profiles in the runs of a workload: abba (A B, B A, A B, ...) or ab (A B, A B, ...)")
	warmup       = flag.Bool("perf-warmup", true, "run an unmeasured 500-node workload with the first profile before the others")
	sharedMethod = flag.Bool("perf-shared", false, "run the profiles in one scheduler, the pods given to them in turn, and compare their scheduling cycles (shared_test.go; make perf's default)")
	profileNames = flag.String("perf-profiles", "Default,Headroom", "comma-separated profiles to compare, the baseline first: "+
		"Default, Headroom, or a variant of them (see variants)")
)

// registry is how headroom-scheduler registers the plugins (cmd/scheduler).
// The variants' stand-ins and the shared method's cycle clock are
// registered too.
func registry() frameworkruntime.Registry {
	r := plugins.Registry()
	for _, more := range []frameworkruntime.Registry{noopRegistry(), clockRegistry()} {
		if err := r.Merge(more); err != nil {
			panic(err)
		}
	}
	return r
}

// profile is a scheduler configuration the workloads run under.
type profile struct {
	Name          string // in the test case names: Default, Headroom, ...
	Config        string // KubeSchedulerConfiguration file
	SchedulerName string // the profile's schedulerName, set on the pods
	// Unbatched runs the profile with the scheduler's opportunistic
	// batching off (the OpportunisticBatching feature gate), to measure
	// what batching gives it.
	Unbatched bool
	// turns is, for the shared method's profile, the pods' schedulerName
	// per run (turns[run-1]): an expression of the harness's pod template
	// that hands the pods to the shared profiles in turn.
	turns []string
}

// featureGates are the gates the profile's workloads set: none, or
// batching off.
func (p profile) featureGates() map[string]bool {
	if p.Unbatched {
		return map[string]bool{batchingGate: false}
	}
	return nil
}

// variant is a profile -perf-profiles may name besides Default and
// Headroom.
type variant struct {
	base   string   // Default or Headroom
	remove []string // Headroom's plugins left out of the shipped profile
	// standIn replaces Headroom's plugins with the stand-ins of that
	// prefix (noop_test.go): noopPrefix, floorPrefix or tightFloorPrefix.
	standIn string
	// filterLast drops the shipped profile's filter section, which runs
	// Headroom's Filter before the default plugins': they run after them,
	// in multiPoint's order.
	filterLast bool
	// noSpread turns PodTopologySpread's system default constraints off
	// (defaultingType: List, none listed): with them, no pod is signed and
	// opportunistic batching never applies (batching_test.go).
	noSpread  bool
	unbatched bool // opportunistic batching off (profile.Unbatched)
}

// variants are the shipped profile with some of Headroom's plugins left
// out (to tell what each one costs: HeadroomNo<plugin>, <plugin>Only and
// HeadroomNone, for every plugin of the registry), its plugins replaced by
// stand-ins, its Filter order changed, and a second copy of the default
// profile (an A/A comparison shows what the method itself does to the
// ratio), and both profiles with opportunistic batching off or made
// possible.
func variants() map[string]variant {
	var all []string
	for name := range plugins.Registry() {
		all = append(all, name)
	}
	slices.Sort(all)
	v := map[string]variant{
		"HeadroomNoop":        {base: "Headroom", standIn: noopPrefix},
		"HeadroomFloor":       {base: "Headroom", standIn: floorPrefix},
		"HeadroomTightFloor":  {base: "Headroom", standIn: tightFloorPrefix},
		"HeadroomLookupFloor": {base: "Headroom", standIn: lookupFloorPrefix},
		"DefaultAgain":        {base: "Default"},
		"HeadroomFilterLast":  {base: "Headroom", filterLast: true},
		"HeadroomNone":        {base: "Headroom", remove: all},
	}
	// Opportunistic batching: off, and made possible by turning the
	// default spreading off (batching_test.go).
	for _, base := range []string{"Default", "Headroom"} {
		v[base+"Unbatched"] = variant{base: base, unbatched: true}
		v[base+"NoSpread"] = variant{base: base, noSpread: true}
		v[base+"NoSpreadUnbatched"] = variant{base: base, noSpread: true, unbatched: true}
	}
	for _, name := range all {
		v["HeadroomNo"+name] = variant{base: "Headroom", remove: []string{name}}
		v[name+"Only"] = variant{base: "Headroom", remove: slices.DeleteFunc(slices.Clone(all), func(n string) bool { return n == name })}
	}
	return v
}

// profiles returns the profiles -perf-profiles names; variants' configs are
// written into dir.
func profiles(t testing.TB, dir string, names []string) []profile {
	t.Helper()
	shipped, err := filepath.Abs("../../manifests/scheduler/scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dflt, err := filepath.Abs("scheduler-default.yaml")
	if err != nil {
		t.Fatal(err)
	}
	base := map[string]profile{
		"Default":  {Name: "Default", Config: dflt, SchedulerName: corev1.DefaultSchedulerName},
		"Headroom": {Name: "Headroom", Config: shipped, SchedulerName: "headroom-scheduler"},
	}
	var out []profile
	for _, name := range names {
		if p, ok := base[name]; ok {
			out = append(out, p)
			continue
		}
		v, ok := variants()[name]
		if !ok {
			t.Fatalf("-perf-profiles: unknown profile %q", name)
		}
		p := base[v.base]
		p.Name, p.Unbatched = name, v.unbatched
		if len(v.remove) > 0 || v.standIn != "" || v.filterLast || v.noSpread {
			p.Config = writeVariant(t, p.Config, filepath.Join(dir, "scheduler-"+name+".yaml"), v)
		}
		out = append(out, p)
	}
	return out
}

// writeVariant writes the configuration in src, changed as v says, to dst,
// and returns dst: without v.remove's plugins and their pluginConfig; with
// a standIn prefix, Headroom's plugins that remain replaced by those
// stand-ins; with filterLast, Headroom's plugins out of the filter
// section, so that their Filter runs in multiPoint's order, after the
// default plugins'; with noSpread, PodTopologySpread without default
// constraints.
func writeVariant(t testing.TB, src, dst string, v variant) string {
	t.Helper()
	remove, standIn, filterLast := v.remove, v.standIn, v.filterLast
	cfg := readConfig(t, src)
	for i := range cfg.Profiles {
		p := &cfg.Profiles[i]
		if filterLast && p.Plugins != nil {
			// Before the stand-ins take Headroom's plugins' names.
			p.Plugins.Filter.Enabled = slices.DeleteFunc(p.Plugins.Filter.Enabled,
				func(pl schedconfigv1.Plugin) bool { return plugins.Registry()[pl.Name] != nil })
		}
		if p.Plugins != nil {
			// multiPoint, and the extension points where the shipped
			// profile names a plugin again to order it (filter).
			for _, set := range []*schedconfigv1.PluginSet{&p.Plugins.MultiPoint, &p.Plugins.Filter} {
				set.Enabled = slices.DeleteFunc(set.Enabled,
					func(pl schedconfigv1.Plugin) bool { return slices.Contains(remove, pl.Name) })
				for i := range set.Enabled {
					if pl := &set.Enabled[i]; standIn != "" && plugins.Registry()[pl.Name] != nil {
						pl.Name = standIn + pl.Name
					}
				}
			}
		}
		p.PluginConfig = slices.DeleteFunc(p.PluginConfig, func(pc schedconfigv1.PluginConfig) bool {
			return slices.Contains(remove, pc.Name) || standIn != "" && plugins.Registry()[pc.Name] != nil
		})
		if v.noSpread {
			p.PluginConfig = append(p.PluginConfig, schedconfigv1.PluginConfig{Name: names.PodTopologySpread,
				Args: apiruntime.RawExtension{Object: &schedconfigv1.PodTopologySpreadArgs{DefaultingType: schedconfigv1.ListDefaulting}}})
		}
	}
	writeConfig(t, dst, &cfg)
	return dst
}

// readConfig reads the KubeSchedulerConfiguration in path.
func readConfig(t testing.TB, path string) schedconfigv1.KubeSchedulerConfiguration {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var cfg schedconfigv1.KubeSchedulerConfiguration
	if err := yaml.UnmarshalStrict(raw, &cfg); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cfg
}

// writeConfig writes cfg to path.
func writeConfig(t testing.TB, path string, cfg *schedconfigv1.KubeSchedulerConfiguration) {
	t.Helper()
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
}

// testCase is one rendered test case of performance-config.yaml.
type testCase struct {
	Name, Profile, Label, SchedulerConfig, Workload string
	Run, UpdatesPerSecond                           int
	Params                                          map[string]int
	// Clocked are the schedulerNames of a shared run's profiles, whose
	// cycle clock the harness collects.
	Clocked []string
	// FeatureGates are the test case's feature gates (an unbatched
	// profile's).
	FeatureGates map[string]bool
}

// render writes performance-config.yaml and the templates into dir, with the
// current time as every node's sample time, and returns the config's path.
func render(t testing.TB, dir string, cases []testCase, profs []profile) string {
	t.Helper()
	if err := renderTemplates(dir, profs, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := renderFile("performance-config.yaml", filepath.Join(dir, "performance-config.yaml"),
		map[string]any{"Dir": dir, "Cases": cases, "Plugins": slices.Sorted(maps.Keys(registry())), "CycleMetric": cycleMetric,
			"SignatureBatchSize": signatureBatchSize}); err != nil {
		t.Fatal(err)
	}
	// The harness writes its data items (every metric per label: each
	// extension point, each plugin) as JSON into -data-items-dir, the
	// current directory when unset; unless one was given (make perf's
	// PERF_DATA_DIR), they go with the temporary directory.
	if f := flag.Lookup("data-items-dir"); f != nil && f.Value.String() == "" {
		if err := flag.Set("data-items-dir", dir); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "performance-config.yaml")
}

// renderTemplates writes the object templates into dir: a pod template per
// profile, and the node templates with now as the time of every node's PID
// and pod-IP samples.
func renderTemplates(dir string, profs []profile, now time.Time) error {
	now = now.UTC()
	samples := map[string]any{
		"SampledAt": now.Format(time.RFC3339),
		// Churn's second sample is a minute newer (still not in the future
		// by more than pidstats.ClockSkewAllowance when written early).
		"UpdatedAt": now.Add(pidstats.ClockSkewAllowance / 2).Format(time.RFC3339),
	}
	files, err := filepath.Glob("templates/*.yaml")
	if err != nil {
		return err
	}
	for _, f := range files {
		if filepath.Base(f) == "pod.yaml" {
			for _, p := range profs {
				// The shared profile's pods change hands by run.
				for run, turn := range p.turns {
					dst := filepath.Join(dir, fmt.Sprintf("pod-%s-run%d.yaml", p.Name, run+1))
					if err := renderFile(f, dst, map[string]any{"SchedulerName": turn}); err != nil {
						return err
					}
				}
				if len(p.turns) > 0 {
					continue
				}
				if err := renderFile(f, filepath.Join(dir, "pod-"+p.Name+".yaml"), map[string]any{"SchedulerName": p.SchedulerName}); err != nil {
					return err
				}
			}
			continue
		}
		if err := renderFile(f, filepath.Join(dir, filepath.Base(f)), samples); err != nil {
			return err
		}
	}
	return nil
}

// renderFile executes the template src (delimiters [[ ]], so that the
// harness's own {{ }} pass through) with data into dst. It replaces dst in
// one rename: the harness may be reading it (keepSamplesFresh).
func renderFile(src, dst string, data any) error {
	raw, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	tmpl, err := template.New(src).Delims("[[", "]]").Option("missingkey=error").
		Funcs(template.FuncMap{"json": func(v any) (string, error) {
			out, err := json.Marshal(v)
			return string(out), err
		}}).Parse(string(raw))
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := tmpl.Execute(&out, data); err != nil {
		return err
	}
	tmp := dst + ".tmp"
	if err := os.WriteFile(tmp, out.Bytes(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// sampleRefresh is how often keepSamplesFresh renders the node templates
// again: the nodes a workload creates carry samples at most this old.
const sampleRefresh = time.Minute

// keepSamplesFresh renders the node templates in dir again every interval
// (sampleRefresh in the benchmark) until the returned stop is called. The
// harness reads a template when a workload creates its objects, and a run
// of make perf lasts longer than the shipped maxSampleAge (10m): with the
// samples of the process's start, the later workloads' nodes would all be
// stale, their headroom unknown, and those workloads would not measure what
// they say (MixedFleet's PID-short nodes would pass Filter).
func keepSamplesFresh(t testing.TB, dir string, profs []profile, every time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				if err := renderTemplates(dir, profs, now); err != nil {
					t.Errorf("rendering the node templates again: %v", err)
				}
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// interleave returns one test case per profile for each run of w. With
// -perf-order abba the order turns every run (default, Headroom; Headroom,
// default; ...): within a pair the second run goes faster or slower than the
// first for reasons of its own (the heap and memory the first left behind),
// and turning the order gives both profiles that position equally often.
func interleave(profs []profile, runs int, w testCase) []testCase {
	var out []testCase
	for run := 1; run <= runs; run++ {
		ps := slices.Clone(profs)
		if *order == "abba" && run%2 == 0 {
			slices.Reverse(ps)
		}
		for _, p := range ps {
			c := w
			c.Profile, c.SchedulerConfig, c.Run, c.FeatureGates = p.Name, p.Config, run, p.featureGates()
			out = append(out, c)
		}
	}
	return out
}

// BenchmarkPerfScheduling runs every workload for both profiles. Run it
// with -benchtime=1x (make perf does).
func BenchmarkPerfScheduling(b *testing.B) {
	dir := b.TempDir()
	profs := profiles(b, dir, strings.Split(*profileNames, ","))
	// With the shared method every workload runs once per run, all the
	// profiles in one scheduler.
	runAs, sharing := profs, []profile(nil)
	if *sharedMethod {
		// One scheduler has one set of feature gates, and pods handed to
		// the profiles in turn are never batched anyway.
		if i := slices.IndexFunc(profs, func(p profile) bool { return p.Unbatched }); i >= 0 {
			b.Fatalf("-perf-profiles %s: batching is on or off for the whole scheduler, so the shared method cannot compare it; run with -perf-shared=false (PERF_SHARED=0)", profs[i].Name)
		}
		var sp profile
		sp, sharing = writeSharedConfig(b, dir, profs, *runs)
		runAs = []profile{sp}
		profs = append(profs, sp) // its pod templates
	}
	var cases []testCase
	if *warmup {
		// The process's first workload runs slower (in an A/A comparison,
		// 144 against 191-199 pods/s for the same profile at 5,000 nodes):
		// its heap grows from nothing and its memory is faulted in. This
		// one takes that cost for all; make perf reports no Warmup row.
		cases = append(cases, testCase{Name: "Warmup", Workload: "500Nodes", Label: "performance",
			Profile: runAs[0].Name, SchedulerConfig: runAs[0].Config, Run: 1,
			Params: map[string]int{"nodes": 500, "initPods": 500, "measurePods": 1000}})
	}
	for _, w := range []struct {
		testCase
		runs int
	}{
		{testCase{Name: "SchedulingBasic", Workload: "500Nodes",
			Params: map[string]int{"nodes": 500, "initPods": 500, "measurePods": 1000}}, 1},
		{testCase{Name: "SchedulingBasic", Workload: "5000Nodes",
			Params: map[string]int{"nodes": 5000, "initPods": 1000, "measurePods": 10000}}, *runs},
		{testCase{Name: "TightFleet", Workload: "5000Nodes",
			Params: map[string]int{"nodes": 5000, "initPods": 5000, "measurePods": 6000}}, *runs},
		// 15,000 nodes, the pods of the 5,000-node workloads: the
		// scheduler's per-node work and memory grow with the nodes, and a
		// 2-core, 24 GiB machine holds 15,000 nodes and 11,000 pods with
		// kube-apiserver in the same process (docs/performance.md).
		{testCase{Name: "SchedulingBasic", Workload: "15000Nodes",
			Params: map[string]int{"nodes": 15000, "initPods": 1000, "measurePods": 10000}}, *runs},
		{testCase{Name: "TightFleet", Workload: "15000Nodes",
			Params: map[string]int{"nodes": 15000, "initPods": 5000, "measurePods": 6000}}, *runs},
		{testCase{Name: "MixedFleet", Workload: "1000Nodes",
			Params: map[string]int{"nodesUsual": 600, "nodesPIDShort": 200, "nodesSmall": 100, "nodesUnknown": 100,
				"initPods": 500, "measurePods": 3000}}, *runs},
		{testCase{Name: "Churn", Workload: "1000Nodes", UpdatesPerSecond: 100,
			Params: map[string]int{"nodes": 1000, "initPods": 500, "measurePods": 5000}}, *runs},
		// One pod a node: opportunistic batching's best case
		// (batching_test.go).
		{testCase{Name: "OnePodPerNode", Workload: "5000Nodes",
			Params: map[string]int{"nodes": 5000, "measurePods": 5000}}, *runs},
	} {
		w.Label = "performance"
		cases = append(cases, interleave(runAs, w.runs, w.testCase)...)
	}
	for i := range cases {
		for _, p := range sharing {
			cases[i].Clocked = append(cases[i].Clocked, p.SchedulerName)
		}
	}
	config := render(b, dir, cases, profs)
	stop := keepSamplesFresh(b, dir, profs, sampleRefresh)
	var opts []benchmark.SchedulerPerfOption
	if batchingCountable {
		opts = append(opts, withPrepare(printBatching))
	}
	benchmark.RunBenchmarkPerfScheduling(b, config, "headroom", registry(), opts...)
	stop()
	if *sharedMethod && !b.Failed() {
		items, err := newestDataItems(flag.Lookup("data-items-dir").Value.String(), "headroom")
		if err != nil {
			b.Fatal(err)
		}
		cycles, err := readCycleItems(items)
		if err != nil {
			b.Fatal(err)
		}
		times := byRun(cycles)
		if err := times.complete(sharing); err != nil {
			b.Fatalf("%s: %v", items, err)
		}
		fmt.Print(times.table(sharing))
	}
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	b.Logf("heap in use at the end: %d MiB", m.HeapInuse>>20)
}

// TestSmoke runs a 5-node workload under the Headroom profile: the shipped
// configuration loads in the harness, and NodePIDs keeps every pod off the
// node that is short of PIDs, which the default profile's spreading would
// give its share.
func TestSmoke(t *testing.T) {
	dir := t.TempDir()
	headroom := profiles(t, dir, []string{"Headroom"})[0]
	smoke := testCase{Name: "MixedFleet", Workload: "Smoke5Nodes", Label: "smoke", Profile: headroom.Name,
		SchedulerConfig: headroom.Config, Run: 1,
		Params: map[string]int{"nodesUsual": 4, "nodesPIDShort": 1, "nodesSmall": 0, "nodesUnknown": 0, "initPods": 2, "measurePods": 10}}
	config := render(t, dir, []testCase{smoke}, []profile{headroom})

	var mu sync.Mutex
	placed := map[string]int{} // node name → pods bound there
	short := map[string]bool{} // nodes short of PIDs
	prepare := func(tCtx clientContext) error {
		factory := informers.NewSharedInformerFactory(tCtx.Client(), 0)
		_, err := factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(oldObj, newObj any) {
				o, n := oldObj.(*corev1.Pod), newObj.(*corev1.Pod)
				if o.Spec.NodeName == "" && n.Spec.NodeName != "" {
					mu.Lock()
					placed[n.Spec.NodeName]++
					mu.Unlock()
				}
			},
		})
		if err != nil {
			return err
		}
		_, err = factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) {
				n := obj.(*corev1.Node)
				if n.Labels["headroom.dev/perf"] == "pid-short" {
					mu.Lock()
					short[n.Name] = true
					mu.Unlock()
				}
			},
		})
		if err != nil {
			return err
		}
		factory.Start(tCtx.Done())
		return nil
	}

	runSmoke(t, config, "smoke", withPrepare(prepare))

	mu.Lock()
	defer mu.Unlock()
	total := 0
	for node, n := range placed {
		total += n
		if short[node] {
			t.Errorf("%d pods were placed on %s, which is short of PIDs", n, node)
		}
	}
	if len(short) != 1 {
		t.Errorf("saw %d PID-short nodes, want 1", len(short))
	}
	if total < 10 {
		t.Errorf("saw %d pods placed, want at least the 10 measured: %v", total, placed)
	}
	t.Logf("placements: %v; PID-short: %v", placed, short)
}

// runSmoke runs the workloads labelled smoke in config through the
// harness, as a test: it fails t when one fails.
func runSmoke(t *testing.T, config, topic string, opts ...benchmark.SchedulerPerfOption) {
	t.Helper()
	filter := benchmark.PerfSchedulingLabelFilter
	benchmark.PerfSchedulingLabelFilter = "smoke"
	t.Cleanup(func() { benchmark.PerfSchedulingLabelFilter = filter })
	var failed bool
	result := testing.Benchmark(func(b *testing.B) {
		benchmark.RunBenchmarkPerfScheduling(b, config, topic, registry(), opts...)
		failed = b.Failed()
	})
	if failed || result.N == 0 {
		t.Fatalf("the %s workload failed (run with -v and ARTIFACTS unset for its log): %v", topic, result)
	}
}

// TestKeepSamplesFresh: while the benchmark runs, the node templates are
// rendered again with the current time, so that the nodes of a workload that
// starts more than maxSampleAge after the process carry fresh samples.
func TestKeepSamplesFresh(t *testing.T) {
	dir := t.TempDir()
	profs := profiles(t, dir, []string{"Headroom"})
	if err := renderTemplates(dir, profs, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	sampledAt := func() time.Time {
		t.Helper()
		raw, err := os.ReadFile(filepath.Join(dir, "node.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var n corev1.Node
		if err := yaml.UnmarshalStrict(raw, &n); err != nil {
			t.Fatal(err)
		}
		at, err := time.Parse(time.RFC3339, n.Annotations[pidstats.AnnotationSampledAt])
		if err != nil {
			t.Fatal(err)
		}
		return at
	}
	if age := time.Since(sampledAt()); age < 59*time.Minute {
		t.Fatalf("the first rendering's sample is %v old, want an hour", age)
	}
	stop := keepSamplesFresh(t, dir, profs, 10*time.Millisecond)
	defer stop()
	deadline := time.Now().Add(10 * time.Second)
	for time.Since(sampledAt()) > time.Minute {
		if time.Now().After(deadline) {
			t.Fatalf("node.yaml still samples at %v after 10s", sampledAt())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// clientContext is what a prepare hook uses of the harness's test context.
type clientContext interface {
	Client() clientset.Interface
	Done() <-chan struct{}
}

// withPrepare is benchmark.WithPrepareFn(prepare). The hook's type names
// the harness's test context, whose package and name moved between minors
// (PrepareFn of test/utils/ktesting's context in 1.35, HookFn in 1.36,
// test/utils/client-go/ktesting's in 1.37), so the hook is made for the
// type WithPrepareFn takes, and this test builds for every minor.
func withPrepare(prepare func(clientContext) error) benchmark.SchedulerPerfOption {
	with := reflect.ValueOf(benchmark.WithPrepareFn)
	hookType := with.Type().In(0)
	hook := reflect.MakeFunc(hookType, func(args []reflect.Value) []reflect.Value {
		out := reflect.New(hookType.Out(0)).Elem()
		if err := prepare(args[0].Interface().(clientContext)); err != nil {
			out.Set(reflect.ValueOf(err))
		}
		return []reflect.Value{out}
	})
	return with.Call([]reflect.Value{hook})[0].Interface().(benchmark.SchedulerPerfOption)
}
