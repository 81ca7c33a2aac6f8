package perf

import (
	"os"
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
	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/plugins/nodepids"
)

// TestShippedProfileFiltersHeadroomFirst: the framework built from the
// shipped configuration, as kube-scheduler builds it, runs NodePIDs' and
// NodeIPs' Filter ahead of the default plugins', so that a node they reject
// is spared the rest (MixedFleet's Filter phase), and still runs them at
// their other extension points.
func TestShippedProfileFiltersHeadroomFirst(t *testing.T) {
	raw, err := os.ReadFile("../../manifests/scheduler/scheduler-config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(raw, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := obj.(*schedconfig.KubeSchedulerConfiguration)
	schedmetrics.Register() // the framework counts its plugins, as in the scheduler
	registry := inTree.NewInTreeRegistry()
	if err := registry.Merge(plugins.Registry()); err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset()
	fw, err := frameworkruntime.NewFramework(t.Context(), registry, &cfg.Profiles[0],
		frameworkruntime.WithClientSet(client),
		frameworkruntime.WithInformerFactory(informers.NewSharedInformerFactory(client, 0)),
		frameworkruntime.WithSnapshotSharedLister(cache.NewEmptySnapshot()))
	if err != nil {
		t.Fatal(err)
	}
	listed := fw.ListPlugins()
	var filter []string
	for _, pl := range listed.Filter.Enabled {
		filter = append(filter, pl.Name)
	}
	if len(filter) < 3 || filter[0] != nodepids.Name || filter[1] != nodeips.Name {
		t.Errorf("Filter order %v, want NodePIDs and NodeIPs first, then the default plugins", filter)
	}
	for _, set := range []struct {
		point   string
		enabled []schedconfig.Plugin
	}{{"PreFilter", listed.PreFilter.Enabled}, {"PreScore", listed.PreScore.Enabled}, {"Score", listed.Score.Enabled}} {
		found := map[string]bool{}
		for _, pl := range set.enabled {
			found[pl.Name] = true
		}
		if !found[nodepids.Name] || !found[nodeips.Name] {
			t.Errorf("%s: %v, want NodePIDs and NodeIPs enabled", set.point, set.enabled)
		}
	}
}
