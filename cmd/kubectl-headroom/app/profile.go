package app

import (
	"context"
	"fmt"
	"reflect"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	"k8s.io/kubernetes/pkg/scheduler/framework"
	inTree "k8s.io/kubernetes/pkg/scheduler/framework/plugins"
	"k8s.io/kubernetes/pkg/scheduler/framework/plugins/names"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"

	headroomconfig "github.com/headroom-k8s/headroom/apis/config"
	_ "github.com/headroom-k8s/headroom/apis/config/scheme"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins"
	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/plugins/oomrisk"
)

// profile is the part of a scheduler profile kubectl-headroom runs:
// Headroom's plugins as the profile enables and configures them.
type profile struct {
	source string
	cfg    *config.KubeSchedulerProfile
	// weights are the Score weights of Headroom's score plugins.
	weights map[string]int64
	// ips is where NodeIPs' figures come from: nil for the nodes'
	// annotations; Calico's objects, listed once, for ipSource CalicoIPAM.
	ips ipstats.Source
}

// ipSource is NodeIPs' source of pod-IP figures.
func (p *profile) ipSource() ipstats.Source {
	if p.ips == nil {
		return ipstats.Annotations{}
	}
	return p.ips
}

// loadProfile decodes the KubeSchedulerConfiguration in data (read from
// source), defaulted by the kube-scheduler's own scheme, and returns its
// profile named schedulerName. An empty schedulerName picks the profile
// headroom-scheduler, or a configuration's only profile.
func loadProfile(data []byte, source, schedulerName string) (*profile, error) {
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	cfg, ok := obj.(*config.KubeSchedulerConfiguration)
	if !ok {
		return nil, fmt.Errorf("%s: want a KubeSchedulerConfiguration, got %T", source, obj)
	}
	var names []string
	for i := range cfg.Profiles {
		p := &cfg.Profiles[i]
		names = append(names, p.SchedulerName)
		if p.SchedulerName == schedulerName || (schedulerName == "" && (p.SchedulerName == headroomconfig.SchedulerName || len(cfg.Profiles) == 1)) {
			return headroomProfile(source, p), nil
		}
	}
	if schedulerName == "" {
		schedulerName = headroomconfig.SchedulerName
	}
	return nil, fmt.Errorf("%s: no profile with schedulerName %q (profiles: %s)", source, schedulerName, strings.Join(names, ", "))
}

// headroomProfile keeps Headroom's plugins of p, with their args, and the
// queue-sort and bind plugins the framework requires of every profile. The
// in-tree filter and score plugins are left out: they need informers and
// caches of the whole cluster that a one-shot command does not keep.
func headroomProfile(source string, p *config.KubeSchedulerProfile) *profile {
	registry := plugins.Registry()
	out := &config.KubeSchedulerProfile{SchedulerName: p.SchedulerName, Plugins: &config.Plugins{}}
	weights := map[string]int64{}
	if p.Plugins != nil {
		// A plugin that multiPoint enables and an extension point names
		// again (the shipped profile's filter) is only moved ahead of the
		// in-tree plugins there, which this profile leaves out: it is kept
		// in multiPoint alone, so that the framework logs no override.
		// Score entries stay: they may set another weight.
		multiPoint := map[string]bool{}
		for _, pl := range p.Plugins.MultiPoint.Enabled {
			multiPoint[pl.Name] = true
		}
		src, dst := reflect.ValueOf(p.Plugins).Elem(), reflect.ValueOf(out.Plugins).Elem()
		for i := range src.NumField() {
			set, ok := src.Field(i).Interface().(config.PluginSet)
			if !ok {
				continue
			}
			name := src.Type().Field(i).Name
			kept := config.PluginSet{Disabled: set.Disabled}
			for _, pl := range set.Enabled {
				if _, ok := registry[pl.Name]; !ok {
					continue
				}
				if multiPoint[pl.Name] && name != "MultiPoint" && name != "Score" {
					continue
				}
				kept.Enabled = append(kept.Enabled, pl)
			}
			dst.Field(i).Set(reflect.ValueOf(kept))
		}
		for _, set := range []config.PluginSet{out.Plugins.MultiPoint, out.Plugins.Score} {
			for _, pl := range set.Enabled {
				w := int64(pl.Weight)
				if w == 0 {
					w = 1 // as the framework does
				}
				weights[pl.Name] = w
			}
		}
	}
	out.Plugins.QueueSort = config.PluginSet{Enabled: []config.Plugin{{Name: names.PrioritySort}}}
	out.Plugins.Bind = config.PluginSet{Enabled: []config.Plugin{{Name: names.DefaultBinder}}}
	for _, pc := range p.PluginConfig {
		if _, ok := registry[pc.Name]; ok {
			out.PluginConfig = append(out.PluginConfig, pc)
		}
	}
	return &profile{source: source, cfg: out, weights: weights}
}

// args returns the profile's args of the named plugin, or nil.
func (p *profile) args(name string) any {
	for _, pc := range p.cfg.PluginConfig {
		if pc.Name == name {
			return pc.Args
		}
	}
	return nil
}

// figureArgs returns the args of every registered figure plugin
// (plugins.Figures) by name, and oomRiskArgs OOMRisk's: the args the
// figures are computed with, the profile's, or the plugin's defaults when
// the profile does not enable it.
func (p *profile) figureArgs() (map[string]runtime.Object, error) {
	out := map[string]runtime.Object{}
	for _, f := range plugins.Figures() {
		if a, ok := p.args(f.Name()).(runtime.Object); ok && a != nil {
			out[f.Name()] = a
			continue
		}
		a, err := f.DefaultArgs()
		if err != nil {
			return nil, err
		}
		out[f.Name()] = a
	}
	return out, nil
}

func (p *profile) oomRiskArgs() (*headroomconfig.OOMRiskArgs, error) {
	if a, ok := p.args(oomrisk.Name).(*headroomconfig.OOMRiskArgs); ok {
		return a, nil
	}
	a := &headroomconfig.OOMRiskArgs{}
	return a, defaultArgs(&configv1.OOMRiskArgs{}, a)
}

// defaultArgs fills out with the defaults of the v1 args in, as the
// kube-scheduler's scheme defaults and converts an empty pluginConfig entry.
func defaultArgs(in, out runtime.Object) error {
	schedscheme.Scheme.Default(in)
	return schedscheme.Scheme.Convert(in, out, nil)
}

// setArgs replaces the args of the named plugin.
func (p *profile) setArgs(name string, args *headroomconfig.OOMRiskArgs) {
	for i := range p.cfg.PluginConfig {
		if p.cfg.PluginConfig[i].Name == name {
			p.cfg.PluginConfig[i].Args = args
			return
		}
	}
	p.cfg.PluginConfig = append(p.cfg.PluginConfig, config.PluginConfig{Name: name, Args: args})
}

// enabled reports whether the profile runs the named plugin.
func (p *profile) enabled(name string) bool {
	v := reflect.ValueOf(p.cfg.Plugins).Elem()
	for i := range v.NumField() {
		if set, ok := v.Field(i).Interface().(config.PluginSet); ok {
			for _, pl := range set.Enabled {
				if pl.Name == name {
					return true
				}
			}
		}
	}
	return false
}

// newFramework builds the scheduler framework of the profile on snapshot:
// the real plugins, no client (nothing is written), no informers.
func (p *profile) newFramework(ctx context.Context, snapshot fwk.SharedLister) (framework.Framework, error) {
	// The framework records into the scheduler's metrics, as in the
	// scheduler; nothing serves them here.
	schedmetrics.Register()
	registry := plugins.Registry()
	inTreeRegistry := inTree.NewInTreeRegistry()
	for _, name := range []string{names.PrioritySort, names.DefaultBinder} {
		registry[name] = inTreeRegistry[name]
	}
	if p.ips != nil {
		registry[nodeips.Name] = nodeips.WithSource(p.ips)
	}
	fw, err := frameworkruntime.NewFramework(ctx, registry, p.cfg, frameworkruntime.WithSnapshotSharedLister(snapshot))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.source, err)
	}
	return fw, nil
}
