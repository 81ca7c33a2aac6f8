// Package scheme registers Headroom's scheduler plugin args into the
// kube-scheduler's scheme, so that KubeSchedulerConfiguration pluginConfig
// entries of kind NodePIDsArgs, NodeIPsArgs and OOMRiskArgs decode, default and convert.
// Import it for its side effect wherever the scheduler config is loaded.
package scheme

import (
	"fmt"

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

// PluginArgs is how every Headroom scheduler plugin reads its args: obj as
// the scheduler decoded and defaulted it into the internal *T, or, when the
// profile has no pluginConfig entry for the plugin (obj nil), the defaults of
// v1args (the plugin's empty v1 args) converted into *T. Any other type is an
// error naming the plugin.
func PluginArgs[T any](plugin string, obj runtime.Object, v1args runtime.Object) (*T, error) {
	switch a := any(obj).(type) {
	case *T:
		if a != nil {
			return a, nil
		}
	case nil: // the defaults, below
	default:
		return nil, fmt.Errorf("%s: want args of type %T, got %T", plugin, new(T), obj)
	}
	schedscheme.Scheme.Default(v1args)
	args := new(T)
	if err := schedscheme.Scheme.Convert(v1args, args, nil); err != nil {
		return nil, fmt.Errorf("%s: default args: %w", plugin, err)
	}
	return args, nil
}
