package oomrisk

import (
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"

	"github.com/headroom-k8s/headroom/apis/config"
	// The args decode only once Headroom's types are in the kube-scheduler's
	// scheme, as in headroom-scheduler.
	_ "github.com/headroom-k8s/headroom/apis/config/scheme"
	"github.com/headroom-k8s/headroom/apis/config/validation"
)

// loadSample loads a shipped sample the way kube-scheduler loads --config,
// and validates it as kube-scheduler does.
func loadSample(t *testing.T, name string) *schedconfig.KubeSchedulerProfile {
	t.Helper()
	cfg, err := options.LoadConfigFromFile(klog.Background(), filepath.Join("..", "..", "manifests", "samples", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := schedvalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Profiles) != 1 {
		t.Fatalf("%d profiles, want 1", len(cfg.Profiles))
	}
	return &cfg.Profiles[0]
}

func oomRiskArgsOf(t *testing.T, p *schedconfig.KubeSchedulerProfile) *config.OOMRiskArgs {
	t.Helper()
	for _, pc := range p.PluginConfig {
		if pc.Name == Name {
			args, ok := pc.Args.(*config.OOMRiskArgs)
			if !ok {
				t.Fatalf("OOMRisk args decode to %T", pc.Args)
			}
			if err := validation.ValidateOOMRiskArgs(field.NewPath("OOMRiskArgs"), args); err != nil {
				t.Fatal(err)
			}
			return args
		}
	}
	t.Fatal("no OOMRisk pluginConfig")
	return nil
}

func names(ps []schedconfig.Plugin) map[string]int32 {
	m := map[string]int32{}
	for _, p := range ps {
		m[p.Name] = p.Weight
	}
	return m
}

func TestOOMRiskSample(t *testing.T) {
	p := loadSample(t, "oomrisk-scheduler-config.yaml")
	if p.SchedulerName != "headroom-oomrisk" {
		t.Errorf("schedulerName %q", p.SchedulerName)
	}
	if got := *oomRiskArgsOf(t, p); got != *defaultArgs() {
		t.Errorf("args %+v, want the defaults spelled out", got)
	}
	// Score and PreScore: OOMRisk alone, so placements depend on it only.
	if got := names(p.Plugins.Score.Enabled); len(got) != 1 || got[Name] != 1 {
		t.Errorf("score enables %v, want OOMRisk alone with weight 1", got)
	}
	if got := names(p.Plugins.PreScore.Enabled); len(got) != 1 || !has(got, Name) {
		t.Errorf("preScore enables %v, want OOMRisk alone", got)
	}
	for point, set := range map[string]schedconfig.PluginSet{"preScore": p.Plugins.PreScore, "score": p.Plugins.Score} {
		if !has(names(set.Disabled), "*") {
			t.Errorf("%s does not disable the other plugins", point)
		}
	}
}

func has(m map[string]int32, name string) bool {
	_, ok := m[name]
	return ok
}

func TestCombinedSample(t *testing.T) {
	p := loadSample(t, "../scheduler/scheduler-config.yaml")
	if p.SchedulerName != "headroom-scheduler" {
		t.Errorf("schedulerName %q", p.SchedulerName)
	}
	oomRiskArgsOf(t, p)
	var pids *config.NodePIDsArgs
	for _, pc := range p.PluginConfig {
		if pc.Name == "NodePIDs" {
			pids, _ = pc.Args.(*config.NodePIDsArgs)
		}
	}
	if pids == nil {
		t.Fatal("no NodePIDs args of type NodePIDsArgs")
	}
	if err := validation.ValidateNodePIDsArgs(field.NewPath("NodePIDsArgs"), pids); err != nil {
		t.Fatal(err)
	}
	multi := names(p.Plugins.MultiPoint.Enabled)
	for name, weight := range map[string]int32{Name: 2, "NodePIDs": 1, "NodeResourcesFit": 1, "TaintToleration": 3} {
		if multi[name] != weight {
			t.Errorf("multiPoint %s weight %d, want %d", name, multi[name], weight)
		}
	}
	for _, set := range []schedconfig.PluginSet{p.Plugins.PreScore, p.Plugins.Score} {
		if len(set.Disabled) != 0 {
			t.Errorf("default plugins disabled: %v", set.Disabled)
		}
	}
}
