package relievenodepressure

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/cmd/descheduler/app/options"
	"sigs.k8s.io/descheduler/pkg/api"
	"sigs.k8s.io/descheduler/pkg/descheduler"
	"sigs.k8s.io/descheduler/pkg/features"
	"sigs.k8s.io/descheduler/pkg/framework/pluginregistry"
	"sigs.k8s.io/descheduler/pkg/framework/plugins/defaultevictor"
	"sigs.k8s.io/descheduler/test"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

const shippedPolicy = "../../manifests/descheduler/policy.yaml"

// useRegistry sets up the descheduler's global plugin registry as
// headroom-descheduler does: the in-tree plugins plus this one. Policy
// decoding reads the global registry.
func useRegistry() {
	pluginregistry.PluginRegistry = pluginregistry.NewRegistry()
	descheduler.RegisterDefaultPlugins(pluginregistry.PluginRegistry)
	u := Utilities()
	pluginregistry.Register(PluginName, u.PluginBuilder, u.PluginType, u.PluginArgInstance, u.PluginArgValidator, u.PluginArgDefaulter, pluginregistry.PluginRegistry)
}

func loadPolicy(t *testing.T, path string) (*api.DeschedulerPolicy, error) {
	t.Helper()
	useRegistry()
	return descheduler.LoadPolicyConfig(path, fake.NewClientset(), pluginregistry.PluginRegistry)
}

func pluginArgs[T any](t *testing.T, policy *api.DeschedulerPolicy, name string) T {
	t.Helper()
	for _, pc := range policy.Profiles[0].PluginConfigs {
		if pc.Name == name {
			args, ok := pc.Args.(T)
			if !ok {
				t.Fatalf("args of %s are %T", name, pc.Args)
			}
			return args
		}
	}
	t.Fatalf("policy has no pluginConfig for %s", name)
	panic("unreachable")
}

func TestSamplePolicySpellsOutTheDefaults(t *testing.T) {
	policy, err := loadPolicy(t, shippedPolicy)
	if err != nil {
		t.Fatalf("LoadPolicyConfig: %v", err)
	}
	got := pluginArgs[*RelieveNodePressureArgs](t, policy, PluginName)
	// The PID trigger and, on in the shipped policy, the ipStarved trigger,
	// each with its defaults.
	want := &RelieveNodePressureArgs{Namespaces: &api.Namespaces{Exclude: []string{"kube-system", "headroom-system"}},
		MaxPodsToEvictPerNode: policy.MaxNoOfPodsToEvictPerNode, PIDs: &PIDsTrigger{}, IPStarved: &IPStarvedTrigger{},
		// The budget the policy's comment promises: 20 per window of 4m
		// in the cluster, 5 per node and per namespace.
		EvictionBudget: &EvictionBudget{Window: &metav1.Duration{Duration: 4 * time.Minute}, Total: ptr.To[int32](20),
			PerNode: ptr.To[int32](5), PerNamespace: ptr.To[int32](5)}}
	SetDefaults_RelieveNodePressureArgs(want)
	if !equalArgs(got, want) {
		t.Fatalf("sample decodes to\n%s\nwant the defaults, and the policy's per-node limit\n%s", dump(got), dump(want))
	}
	// Only RelieveNodePressure evicts: an upstream plugin would get only
	// the descheduler's per-run limits, reset every second in the
	// Deployment, and no budget over time.
	for _, p := range policy.Profiles {
		for _, set := range []api.PluginSet{p.Plugins.Deschedule, p.Plugins.Balance} {
			for _, name := range set.Enabled {
				if name != PluginName {
					t.Errorf("profile %s enables %s: its evictions would be bounded per run only", p.Name, name)
				}
			}
		}
	}
	ev := pluginArgs[*defaultevictor.DefaultEvictorArgs](t, policy, defaultevictor.PluginName)
	if !ev.NodeFit || ev.MinReplicas != 2 || ev.MinPodAge == nil || ev.MinPodAge.Duration != 10*time.Minute {
		t.Fatalf("the sample's DefaultEvictor: nodeFit %v, minReplicas %d, minPodAge %v; want true, 2, 10m", ev.NodeFit, ev.MinReplicas, ev.MinPodAge)
	}
	for name, limit := range map[string]*uint{"maxNoOfPodsToEvictPerNode": policy.MaxNoOfPodsToEvictPerNode,
		"maxNoOfPodsToEvictPerNamespace": policy.MaxNoOfPodsToEvictPerNamespace, "maxNoOfPodsToEvictTotal": policy.MaxNoOfPodsToEvictTotal} {
		if limit == nil || *limit == 0 {
			t.Errorf("the sample sets no %s", name)
		}
	}
}

func TestPolicyErrorsNameTheField(t *testing.T) {
	path := filepath.Join(t.TempDir(), "policy.yaml")
	policy := `apiVersion: descheduler/v1alpha2
kind: DeschedulerPolicy
profiles:
- name: p
  pluginConfig:
  - name: DefaultEvictor
  - name: RelieveNodePressure
    args:
      pids: {thresholdPercent: 80, targetPercent: 85}
  plugins:
    deschedule:
      enabled: [RelieveNodePressure]
`
	if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := loadPolicy(t, path)
	if err == nil || !strings.Contains(err.Error(), "pids.targetPercent") {
		t.Fatalf("LoadPolicyConfig = %v, want an error naming pids.targetPercent", err)
	}
}

// TestDryRunEvictsNothing runs the descheduler's own loop in --dry-run mode
// with the sample policy: the plugin decides as in a real run, but the
// cluster's client sees no eviction, deletion or Event.
func TestDryRunEvictsNothing(t *testing.T) {
	policy, err := loadPolicy(t, shippedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	// The descheduler runs on the real clock: a fresh sample.
	n1 := test.BuildTestNode("n1", 64000, 64<<30, 110, func(n *v1.Node) {
		n.Annotations = pidstats.NodeStats{Capacity: 10000, Used: 9700, SampledAt: time.Now()}.Annotations()
	})
	n2 := spareNode("n2")
	pods := hotNodePods("n1", 5)
	pods = append(pods, testPod("malformed", "n1", pids(300), priority("soon")))
	client := fake.NewClientset(objects([]*v1.Node{n1, n2}, pods)...)

	rs, err := options.NewDeschedulerServer()
	if err != nil {
		t.Fatal(err)
	}
	rs.Client = client
	rs.EventClient = client
	rs.DryRun = true
	rs.DefaultFeatureGates = features.DefaultMutableFeatureGate

	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(2), ktesting.BufferLogs(true)))
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer()
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	// The dry-run sandbox mirrors the cluster asynchronously, so a first
	// cycle may see part of it: run cycles until one that saw all six pods
	// on n1 has relieved it.
	rs.DeschedulingInterval = 50 * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- descheduler.RunDeschedulerStrategies(ctx, rs, policy, "v1") }()
	var cycles []dryRunCycle
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		// A new sample each time, as the node agent writes them: the
		// shipped policy relieves pressure seen in two of them.
		fresh := n1.DeepCopy()
		fresh.Annotations = pidstats.NodeStats{Capacity: 10000, Used: 9700, SampledAt: time.Now()}.Annotations()
		if _, err := client.CoreV1().Nodes().Update(ctx, fresh, metav1.UpdateOptions{}); err != nil {
			return false, err
		}
		cycles = dryRunCycles(logs.Data(), "6")
		return len(cycles) > 0, nil
	}); err != nil {
		t.Fatalf("no dry-run cycle relieved n1 with all its pods in view: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunDeschedulerStrategies: %v", err)
	}

	for _, a := range client.Actions() {
		verb, res, sub := a.GetVerb(), a.GetResource().Resource, a.GetSubresource()
		if sub == "eviction" || verb == "delete" || res == "events" || (verb == "create" && res == "pods") {
			t.Errorf("dry run reached the cluster: %s %s/%s", verb, res, sub)
		}
	}
	// Such a cycle decides as a real run would, in delete order: three pods
	// bring 97 % to 88 %.
	want := []string{"default/n1-a", "default/n1-b", "default/n1-c"}
	for _, decided := range cycles {
		if !equal(decided, want) {
			t.Fatalf("dry run decided %v, want %v", decided, want)
		}
	}
	if _, err := client.CoreV1().Pods("default").Get(ctx, "n1-a", metav1.GetOptions{}); err != nil {
		t.Fatalf("dry run removed a pod from the cluster: %v", err)
	}
}

// dryRunCycle is the pods one cycle evicted from the node it relieved.
type dryRunCycle = []string

// dryRunCycles returns the cycles in entries that relieved a node and saw
// "of" pods on it.
func dryRunCycles(entries []ktesting.LogEntry, of string) []dryRunCycle {
	var cycles []dryRunCycle
	var cur dryRunCycle
	complete := true
	for _, e := range entries {
		switch e.Message {
		case "Node above threshold, planning its relief":
			cur, complete = nil, kv(e.ParameterKVList, "pods") == of
		case "Evicted pod to relieve node":
			cur = append(cur, kv(e.WithKVList, "pod"))
		case "Node relieved":
			if complete && len(cur) > 0 {
				cycles = append(cycles, cur)
			}
		}
	}
	return cycles
}

func kv(list []any, key string) string {
	for i := 0; i+1 < len(list); i += 2 {
		if list[i] == key {
			return fmt.Sprint(list[i+1])
		}
	}
	return ""
}

// TestREADMEExampleIsTheSample keeps the README's example policy equal to
// the shipped sample, comments aside.
func TestREADMEExampleIsTheSample(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), "## Example policy")
	if !ok {
		t.Fatal("README has no Example policy section")
	}
	_, block, ok := strings.Cut(after, "```yaml\n")
	if !ok {
		t.Fatal("README's Example policy has no yaml block")
	}
	block, _, _ = strings.Cut(block, "```")
	sample, err := os.ReadFile(shippedPolicy)
	if err != nil {
		t.Fatal(err)
	}
	var fromREADME, fromSample any
	if err := yaml.Unmarshal([]byte(block), &fromREADME); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(sample, &fromSample); err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(fromREADME, fromSample) {
		t.Fatalf("README's example policy differs from %s:\n%s", shippedPolicy, block)
	}
}
