package scheme

import (
	"fmt"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/validation/field"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/apis/config/validation"
)

// FuzzPluginArgs feeds arbitrary NodePIDs and OOMRisk args (JSON, which
// YAML includes) through the kube-scheduler's own decoder, as
// headroom-scheduler reads its --config: decoding either fails with an
// error or yields defaulted internal args, which validation accepts or
// rejects with an error naming the args; nothing panics.
func FuzzPluginArgs(f *testing.F) {
	for _, seed := range [][2]string{
		{`{}`, `{}`},
		{`{"defaultPodPIDs":100,"minFreePIDs":512,"minFreePercent":5,"maxSampleAge":"10m","unknownNodeScore":-1}`,
			`{"ownRiskWeight":3,"collateralWeight":1,"noLimitRequestPercent":200,"noLimitAllocatablePermille":100}`},
		{`{"defaultPodPIDs":-1,"minFreePercent":101}`, `{"ownRiskWeight":0,"collateralWeight":0}`},
		{`{"defaultPodPIDs":4194305,"maxSampleAge":"-1s","unknownNodeScore":101}`, `{"noLimitAllocatablePermille":1001}`},
		{`{"defaultPodPIDs":9223372036854775807}`, `{"ownRiskWeight":9223372036854775807}`},
		{`{"defaultPodPIDs":"100"}`, `{"unknown":1}`},
		{`{"maxSampleAge":"1e400h"}`, `null`},
		{`[]`, `"x"`},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, nodePIDs, oomRisk string) {
		doc := fmt.Sprintf(`{"apiVersion":"kubescheduler.config.k8s.io/v1","kind":"KubeSchedulerConfiguration",
"profiles":[{"schedulerName":"headroom-scheduler","pluginConfig":[{"name":"NodePIDs","args":%s},{"name":"OOMRisk","args":%s}]}]}`, nodePIDs, oomRisk)
		obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(doc), nil, nil)
		if err != nil {
			return
		}
		cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
		if !ok {
			t.Fatalf("decoded %T", obj)
		}
		for _, pc := range cfg.Profiles[0].PluginConfig {
			switch a := pc.Args.(type) {
			case *config.NodePIDsArgs:
				if err := validation.ValidateNodePIDsArgs(field.NewPath("NodePIDsArgs"), a); err != nil && !strings.Contains(err.Error(), "NodePIDsArgs.") {
					t.Fatalf("error %q does not name the field", err)
				}
			case *config.OOMRiskArgs:
				if err := validation.ValidateOOMRiskArgs(field.NewPath("OOMRiskArgs"), a); err != nil && !strings.Contains(err.Error(), "OOMRiskArgs.") {
					t.Fatalf("error %q does not name the field", err)
				}
			default:
				if pc.Name == "NodePIDs" || pc.Name == "OOMRisk" {
					t.Fatalf("%s args decoded as %T", pc.Name, pc.Args)
				}
			}
		}
	})
}
