package perf

import (
	"os"
	"slices"
	"testing"

	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	inTree "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"

	"github.com/headroom-k8s/headroom/plugins"
)

// TestShippedProfileFiltersHeadroomFirst: the framework built from the
// shipped configuration, as kube-scheduler builds it, runs NodePIDs' and
// NodeIPs' Filter ahead of the default plugins', so that a node they reject
// is spared the rest (MixedFleet's Filter phase), and still runs them at
// their other extension points; make perf's HeadroomFilterLast variant runs
// their Filter last.
func TestShippedProfileFiltersHeadroomFirst(t *testing.T) {
	var figures []string // the figure plugins, which filter
	for _, f := range plugins.Figures() {
		figures = append(figures, f.Name())
	}
	n := len(figures)
	listed := listPlugins(t, "../../manifests/scheduler/scheduler-config.yaml")
	if filter := pluginNames(listed.Filter.Enabled); len(filter) <= n || !slices.Equal(filter[:n], figures) {
		t.Errorf("Filter order %v, want %v first, then the default plugins", filter, figures)
	}
	for _, set := range []struct {
		point   string
		enabled []schedconfig.Plugin
	}{{"PreFilter", listed.PreFilter.Enabled}, {"PreScore", listed.PreScore.Enabled}, {"Score", listed.Score.Enabled}} {
		for _, name := range figures {
			if found := pluginNames(set.enabled); !slices.Contains(found, name) {
				t.Errorf("%s: %v, want %s enabled", set.point, found, name)
			}
		}
	}

	// make perf's HeadroomFilterLast variant runs them after the default
	// plugins, in multiPoint's order.
	last := profiles(t, t.TempDir(), []string{"HeadroomFilterLast"})[0]
	if filter := pluginNames(listPlugins(t, last.Config).Filter.Enabled); len(filter) <= n || !slices.Equal(filter[len(filter)-n:], figures) {
		t.Errorf("HeadroomFilterLast: Filter order %v, want %v last", filter, figures)
	}
}

// listPlugins returns the plugins of the first profile of the configuration
// in path, as kube-scheduler's framework enables them: decoded by the
// scheduler's own decoder, with the in-tree registry merged with make perf's
// (Headroom's plugins and the variants' stand-ins).
func listPlugins(t *testing.T, path string) *schedconfig.Plugins {
	t.Helper()
	return listProfiles(t, path)[0]
}

// listProfiles is listPlugins for every profile of the configuration.
func listProfiles(t *testing.T, path string) []*schedconfig.Plugins {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := obj.(*schedconfig.KubeSchedulerConfiguration)
	schedmetrics.Register() // the framework counts its plugins, as in the scheduler
	all := inTree.NewInTreeRegistry()
	if err := all.Merge(registry()); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	var out []*schedconfig.Plugins
	for i := range cfg.Profiles {
		fw, err := frameworkruntime.NewFramework(t.Context(), all, &cfg.Profiles[i],
			frameworkruntime.WithClientSet(client),
			frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(client, 0)),
			frameworkruntime.WithSnapshotSharedLister(cache.NewEmptySnapshot()))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fw.ListPlugins())
	}
	return out
}

// TestVariantsBuild: every variant of make perf builds a framework, and the
// tight fleet's floors have a stand-in scoring for each of Headroom's
// plugins.
func TestVariantsBuild(t *testing.T) {
	dir := t.TempDir()
	for name := range variants() {
		listPlugins(t, profiles(t, dir, []string{name})[0].Config)
	}
	for profile, prefix := range map[string]string{"HeadroomTightFloor": tightFloorPrefix, "HeadroomLookupFloor": lookupFloorPrefix} {
		score := pluginNames(listPlugins(t, profiles(t, dir, []string{profile})[0].Config).Score.Enabled)
		for name := range plugins.Registry() {
			if !slices.Contains(score, prefix+name) || slices.Contains(score, name) {
				t.Errorf("%s scores with %v, want %s in place of %s", profile, score, prefix+name, name)
			}
		}
	}
	// Every figure plugin's lookup stand-in reads its figure.
	for _, f := range plugins.Figures() {
		if usedAnnotation[f.Name()] == "" {
			t.Errorf("HeadroomLookupFloor's stand-in for %s looks up no annotation", f.Name())
		}
	}
}

// pluginNames returns the plugins' names, in order.
func pluginNames(enabled []schedconfig.Plugin) []string {
	var out []string
	for _, pl := range enabled {
		out = append(out, pl.Name)
	}
	return out
}
