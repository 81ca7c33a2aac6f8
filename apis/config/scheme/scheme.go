// Package scheme registers Headroom's scheduler plugin args into the
// kube-scheduler's scheme, so that KubeSchedulerConfiguration pluginConfig
// entries of kind NodePIDsArgs, NodeIPsArgs and OOMRiskArgs decode, default and convert.
// Import it for its side effect wherever the scheduler config is loaded.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/headroom-k8s/headroom/apis/config"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
)

func init() {
	AddToScheme(schedscheme.Scheme)
}

// AddToScheme adds the internal and v1 args types to scheme. The
// kube-scheduler's scheme was built before Headroom's packages registered
// into its builders, so it needs them added once more.
func AddToScheme(scheme *runtime.Scheme) {
	utilruntime.Must(config.AddToScheme(scheme))
	utilruntime.Must(configv1.AddToScheme(scheme))
}
