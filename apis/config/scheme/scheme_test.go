package scheme

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/headroom-k8s/headroom/apis/config"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/apis/config/validation"
)

func decode(t *testing.T, yaml string) *schedconfig.KubeSchedulerConfiguration {
	t.Helper()
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(yaml), nil, nil)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		t.Fatalf("decoded %T", obj)
	}
	return cfg
}

func args(cfg *schedconfig.KubeSchedulerConfiguration, name string) interface{} {
	for _, pc := range cfg.Profiles[0].PluginConfig {
		if pc.Name == name {
			return pc.Args
		}
	}
	return nil
}

// The kube-scheduler's own decoder turns pluginConfig entries into Headroom's
// internal args, defaulted.
func TestPluginConfigDecodesIntoDefaultedArgs(t *testing.T) {
	cfg := decode(t, `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: headroom-scheduler
  pluginConfig:
  - name: NodePIDs
    args:
      minFreePIDs: 2048
  - name: OOMRisk
    args:
      collateralWeight: 2
  - name: NodeIPs
    args:
      minFreeIPs: 2
`)
	pids, ok := args(cfg, "NodePIDs").(*config.NodePIDsArgs)
	if !ok {
		t.Fatalf("NodePIDs args decoded as %T", args(cfg, "NodePIDs"))
	}
	want := config.NodePIDsArgs{
		TypeMeta:         pids.TypeMeta,
		DefaultPodPIDs:   configv1.DefaultPodPIDs,
		MinFreePIDs:      2048,
		MinFreePercent:   configv1.DefaultMinFreePercent,
		UnknownNodeScore: configv1.DefaultUnknownNodeScore,
		AmpleFreePIDs:    configv1.DefaultAmpleFreePIDs,
	}
	want.MaxSampleAge.Duration = configv1.DefaultMaxSampleAge
	if *pids != want {
		t.Errorf("NodePIDs args = %+v, want %+v", *pids, want)
	}
	ips, ok := args(cfg, "NodeIPs").(*config.NodeIPsArgs)
	if !ok {
		t.Fatalf("NodeIPs args decoded as %T", args(cfg, "NodeIPs"))
	}
	wantIPs := config.NodeIPsArgs{TypeMeta: ips.TypeMeta, MinFreeIPs: 2, UnknownNodeScore: configv1.DefaultUnknownNodeScore, AmpleFreeIPs: configv1.DefaultAmpleFreeIPs,
		IPSource: config.IPSourceAnnotations}
	wantIPs.MaxSampleAge.Duration = configv1.DefaultMaxSampleAge
	if *ips != wantIPs {
		t.Errorf("NodeIPs args = %+v, want %+v", *ips, wantIPs)
	}
	oom, ok := args(cfg, "OOMRisk").(*config.OOMRiskArgs)
	if !ok {
		t.Fatalf("OOMRisk args decoded as %T", args(cfg, "OOMRisk"))
	}
	if oom.CollateralWeight != 2 || oom.OwnRiskWeight != configv1.DefaultOwnRiskWeight ||
		oom.NoLimitRequestPercent != configv1.DefaultNoLimitRequestPercent || oom.NoLimitAllocatablePermille != configv1.DefaultNoLimitAllocatablePermille {
		t.Errorf("OOMRisk args = %+v", *oom)
	}
}

func TestUnknownArgsFieldIsRejected(t *testing.T) {
	_, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- pluginConfig:
  - name: NodePIDs
    args:
      minFreePid: 10
`), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "minFreePid") {
		t.Fatalf("a misspelt field should be rejected by name, got %v", err)
	}
}

func TestValidationNamesTheField(t *testing.T) {
	path := field.NewPath("profiles").Index(0).Child("pluginConfig").Index(0).Child("args")
	cases := []struct {
		name  string
		err   error
		field string
	}{
		{"negative defaultPodPIDs", validation.ValidateNodePIDsArgs(path, &config.NodePIDsArgs{DefaultPodPIDs: -1}), "args.defaultPodPIDs"},
		{"percent over 100", validation.ValidateNodePIDsArgs(path, &config.NodePIDsArgs{MinFreePercent: 101}), "args.minFreePercent"},
		{"score over 100", validation.ValidateNodePIDsArgs(path, &config.NodePIDsArgs{UnknownNodeScore: 101}), "args.unknownNodeScore"},
		{"negative age", validation.ValidateNodePIDsArgs(path, &config.NodePIDsArgs{MaxSampleAge: metav1Duration(-time.Second)}), "args.maxSampleAge"},
		{"negative minFreeIPs", validation.ValidateNodeIPsArgs(path, &config.NodeIPsArgs{MinFreeIPs: -1}), "args.minFreeIPs"},
		{"minFreeIPs above any pool", validation.ValidateNodeIPsArgs(path, &config.NodeIPsArgs{MinFreeIPs: 1 << 25}), "args.minFreeIPs"},
		{"IP unknown score under -1", validation.ValidateNodeIPsArgs(path, &config.NodeIPsArgs{UnknownNodeScore: -2}), "args.unknownNodeScore"},
		{"negative IP sample age", validation.ValidateNodeIPsArgs(path, &config.NodeIPsArgs{MaxSampleAge: metav1Duration(-time.Minute)}), "args.maxSampleAge"},
		{"unknown ipSource", validation.ValidateNodeIPsArgs(path, &config.NodeIPsArgs{IPSource: "Calico"}), "args.ipSource"},
		{"both weights 0", validation.ValidateOOMRiskArgs(path, &config.OOMRiskArgs{NoLimitRequestPercent: 200}), "args.ownRiskWeight"},
		{"multiplier under 100", validation.ValidateOOMRiskArgs(path, &config.OOMRiskArgs{OwnRiskWeight: 1, NoLimitRequestPercent: 50}), "args.noLimitRequestPercent"},
	}
	for _, c := range cases {
		if c.err == nil || !strings.Contains(c.err.Error(), c.field) {
			t.Errorf("%s: error %v should name %s", c.name, c.err, c.field)
		}
	}
	valid := &config.NodePIDsArgs{DefaultPodPIDs: 100, MinFreePIDs: 512, MinFreePercent: 5, UnknownNodeScore: 50}
	if err := validation.ValidateNodePIDsArgs(path, valid); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
	for _, src := range []string{config.IPSourceAnnotations, config.IPSourceCalicoIPAM} {
		if err := validation.ValidateNodeIPsArgs(path, &config.NodeIPsArgs{UnknownNodeScore: -1, IPSource: src}); err != nil {
			t.Errorf("NodeIPs defaults with ipSource %s rejected: %v", src, err)
		}
	}
	if err := validation.ValidateOOMRiskArgs(path, &config.OOMRiskArgs{OwnRiskWeight: 3, CollateralWeight: 1, NoLimitRequestPercent: 200, NoLimitAllocatablePermille: 100}); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
}

func metav1Duration(d time.Duration) metav1.Duration { return metav1.Duration{Duration: d} }

// The shipped profile and every sample configuration decode with the
// kube-scheduler's own decoder, and Headroom's args in them validate.
func TestShippedConfigsDecodeAndValidate(t *testing.T) {
	files, err := filepath.Glob("../../../manifests/samples/*-scheduler-config.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sample configurations found: %v", err)
	}
	files = append(files, "../../../manifests/scheduler/scheduler-config.yaml")
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cfg := decode(t, string(data))
			for i, p := range cfg.Profiles {
				for j, pc := range p.PluginConfig {
					path := field.NewPath("profiles").Index(i).Child("pluginConfig").Index(j).Child("args")
					var err error
					switch a := pc.Args.(type) {
					case *config.NodePIDsArgs:
						err = validation.ValidateNodePIDsArgs(path, a)
					case *config.NodeIPsArgs:
						err = validation.ValidateNodeIPsArgs(path, a)
					case *config.OOMRiskArgs:
						err = validation.ValidateOOMRiskArgs(path, a)
					}
					if err != nil {
						t.Errorf("profile %s, %s: %v", p.SchedulerName, pc.Name, err)
					}
				}
			}
		})
	}
	shipped := decode(t, string(must(os.ReadFile("../../../manifests/scheduler/scheduler-config.yaml"))))
	var enabled []string
	for _, pl := range shipped.Profiles[0].Plugins.MultiPoint.Enabled {
		enabled = append(enabled, pl.Name)
	}
	if !slices.Contains(enabled, "NodeIPs") || args(shipped, "NodeIPs") == nil {
		t.Errorf("the shipped profile should enable NodeIPs and configure it; enabled %v", enabled)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
