// Package plugins lists Headroom's scheduler plugins: headroom-scheduler
// registers them into the kube-scheduler, and kubectl-headroom and the perf
// harness (test/perf) run them through the scheduler framework, so all run
// the same set.
package plugins

import (
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/headroom-k8s/headroom/plugins/figure"
	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/plugins/nodepids"
	"github.com/headroom-k8s/headroom/plugins/oomrisk"
)

// Figures returns Headroom's figure plugins (plugins/figure), one line a
// figure.
func Figures() []figure.Registered {
	return []figure.Registered{
		nodepids.Definition,
		nodeips.Definition,
	}
}

// Registry returns the factories of Headroom's scheduler plugins by name.
func Registry() frameworkruntime.Registry {
	r := frameworkruntime.Registry{oomrisk.Name: oomrisk.New}
	for _, f := range Figures() {
		r[f.Name()] = f.New
	}
	return r
}
