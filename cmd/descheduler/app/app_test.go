package app

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/descheduler/pkg/descheduler"
	"sigs.k8s.io/descheduler/pkg/framework/pluginregistry"
	"sigs.k8s.io/descheduler/pkg/framework/plugins/defaultevictor"
	frameworktypes "sigs.k8s.io/descheduler/pkg/framework/types"
)

// probeArgs and probePlugin stand in for an out-of-tree plugin registered
// the way Headroom's are.
type probeArgs struct {
	metav1.TypeMeta `json:",inline"`
	Threshold       int `json:"threshold"`
}

func (a *probeArgs) DeepCopyObject() runtime.Object { c := *a; return &c }

type probePlugin struct{}

func (probePlugin) Name() string { return probeName }
func (probePlugin) Deschedule(context.Context, []*v1.Node) *frameworktypes.Status {
	return nil
}

const probeName = "HeadroomProbe"

func probe() Plugin {
	return Plugin{Name: probeName, PluginUtilities: pluginregistry.PluginUtilities{
		PluginBuilder: func(context.Context, runtime.Object, frameworktypes.Handle) (frameworktypes.Plugin, error) {
			return probePlugin{}, nil
		},
		PluginType:        &probePlugin{},
		PluginArgInstance: &probeArgs{},
		PluginArgValidator: func(args runtime.Object) error {
			return nil
		},
		PluginArgDefaulter: func(args runtime.Object) {
			if a := args.(*probeArgs); a.Threshold == 0 {
				a.Threshold = 7
			}
		},
	}}
}

// runPreRun runs the command's pre-run path exactly as cobra does before RunE.
func runPreRun(t *testing.T, plugins ...Plugin) {
	t.Helper()
	cmd := NewCommand(os.Stdout, plugins...)
	if err := cmd.PreRunE(cmd, nil); err != nil {
		t.Fatalf("PreRunE: %v", err)
	}
}

func TestPluginSurvivesRegistryReset(t *testing.T) {
	// A stale registry from before, as any earlier registration would leave.
	pluginregistry.PluginRegistry = pluginregistry.NewRegistry()
	runPreRun(t, probe())

	if _, ok := pluginregistry.PluginRegistry[probeName]; !ok {
		t.Fatalf("%s missing from the registry after PreRunE; registered: %v", probeName, keys(pluginregistry.PluginRegistry))
	}
	if _, ok := pluginregistry.PluginRegistry[defaultevictor.PluginName]; !ok {
		t.Fatalf("the in-tree %s is missing: the upstream PreRunE did not run", defaultevictor.PluginName)
	}
}

// TestRegistrationBeforeResetIsLost pins the upstream behaviour that makes
// NewCommand's wrapping necessary: if upstream stops replacing the registry
// this fails, and the wrapping can go.
func TestRegistrationBeforeResetIsLost(t *testing.T) {
	pluginregistry.PluginRegistry = pluginregistry.NewRegistry()
	Register(pluginregistry.PluginRegistry, probe())
	runPreRun(t) // no plugins passed: only upstream's reset runs
	if _, ok := pluginregistry.PluginRegistry[probeName]; ok {
		t.Fatalf("%s registered before PreRunE survived; upstream no longer resets the registry", probeName)
	}
}

func writePolicy(t *testing.T, policy string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestPolicyWithRegisteredPluginDecodes(t *testing.T) {
	runPreRun(t, probe())
	path := writePolicy(t, `apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: p
  pluginConfig:
  - name: DefaultEvictor
  - name: HeadroomProbe
    args:
      threshold: 3
  plugins:
    deschedule:
      enabled: [HeadroomProbe]
`)
	policy, err := descheduler.LoadPolicyConfig(path, fake.NewSimpleClientset(), pluginregistry.PluginRegistry)
	if err != nil {
		t.Fatalf("LoadPolicyConfig: %v", err)
	}
	var got *probeArgs
	for _, pc := range policy.Profiles[0].PluginConfigs {
		if pc.Name == probeName {
			got, _ = pc.Args.(*probeArgs)
		}
	}
	if got == nil || got.Threshold != 3 {
		t.Fatalf("args of %s = %#v, want threshold 3 decoded into *probeArgs", probeName, got)
	}
}

func TestPolicyNamingUnknownPluginFails(t *testing.T) {
	runPreRun(t, probe())
	path := writePolicy(t, `apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: p
  pluginConfig:
  - name: DefaultEvictor
  - name: NoSuchPlugin
  plugins:
    deschedule:
      enabled: [NoSuchPlugin]
`)
	_, err := descheduler.LoadPolicyConfig(path, fake.NewSimpleClientset(), pluginregistry.PluginRegistry)
	if err == nil {
		t.Fatal("a policy naming an unregistered plugin loaded without error")
	}
	if !strings.Contains(err.Error(), "NoSuchPlugin") || !strings.Contains(err.Error(), "not registered") {
		t.Fatalf("error %q should name the plugin and say it is not registered", err)
	}
}

func keys(r pluginregistry.Registry) []string {
	var out []string
	for k := range r {
		out = append(out, k)
	}
	return out
}
