// Package plugins lists Headroom's scheduler plugins: headroom-scheduler
// registers them into the kube-scheduler, and kubectl-headroom and the perf
// harness (test/perf) run them through the scheduler framework, so all run
// the same set.
package plugins

import (
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/plugins/nodepids"
	"github.com/headroom-k8s/headroom/plugins/oomrisk"
)

// Registry returns the factories of Headroom's scheduler plugins by name.
func Registry() frameworkruntime.Registry {
	return frameworkruntime.Registry{
		nodepids.Name: nodepids.New,
		nodeips.Name:  nodeips.New,
		oomrisk.Name:  oomrisk.New,
	}
}
