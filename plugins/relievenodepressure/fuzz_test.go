package relievenodepressure

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/descheduler/pkg/descheduler"
	"sigs.k8s.io/descheduler/pkg/framework/pluginregistry"
)

// FuzzPolicyArgs feeds arbitrary RelieveNodePressureArgs (JSON, which YAML
// includes) through the descheduler's own policy loader, as
// headroom-descheduler reads --policy-config-file: loading fails with an
// error or yields defaulted args that validate; nothing panics.
func FuzzPolicyArgs(f *testing.F) {
	for _, seed := range []string{
		`{}`,
		`{"pids":{"thresholdPercent":95,"targetPercent":90,"defaultPodPIDs":100,"maxSampleAge":"10m"},` +
			`"deletePriorityAnnotation":"controller.alpha.kubernetes.io/delete-priority","namespaces":{"exclude":["kube-system"]}}`,
		`{"pids":{"thresholdPercent":80,"targetPercent":85}}`,
		`{"pids":{"thresholdPercent":101,"defaultPodPIDs":4194305}}`,
		`{"oom":{"thresholdPercent":20,"targetPercent":15,"noLimitRequestPercent":200,"noLimitAllocatablePermille":100}}`,
		`{"oom":{"thresholdPercent":-1,"noLimitAllocatablePermille":9223372036854775807}}`,
		`{"memory":{"thresholdPercent":90,"targetPercent":85,"maxSampleAge":"10m","minPodBytesPercent":1}}`,
		`{"memory":{"thresholdPercent":101,"targetPercent":-1,"maxSampleAge":"-1s","minPodBytesPercent":9223372036854775807},"oom":{}}`,
		`{"memory":{},"pids":{},"oom":{}}`,
		`{"deletePriorityAnnotation":"not a key!","schedulerNames":[]}`,
		`{"labelSelector":{"matchExpressions":[{"key":"a","operator":"Bogus"}]}}`,
		`{"namespaces":{"include":["a"],"exclude":["b"]}}`,
		`null`, `[]`, `"x"`,
	} {
		f.Add(seed)
	}
	useRegistry()
	client := fake.NewClientset()
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, args string) {
		policy := fmt.Sprintf(`{"apiVersion":"descheduler/v1alpha2","kind":"DeschedulerPolicy","profiles":[{"name":"p",
"pluginConfig":[{"name":"DefaultEvictor"},{"name":%q,"args":%s}],"plugins":{"deschedule":{"enabled":[%q]}}}]}`, PluginName, args, PluginName)
		path := filepath.Join(dir, "policy.json")
		if err := os.WriteFile(path, []byte(policy), 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := descheduler.LoadPolicyConfig(path, client, pluginregistry.PluginRegistry)
		if err != nil {
			return
		}
		a := pluginArgs[*RelieveNodePressureArgs](t, p, PluginName)
		if err := ValidateRelieveNodePressureArgs(a); err != nil {
			t.Fatalf("loaded args do not validate: %v", err)
		}
	})
}
