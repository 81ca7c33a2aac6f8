// Package registry is the one list of Headroom's scheduler plugins:
// headroom-scheduler registers them from it, and so does every harness that
// runs the scheduler framework with them (test/perf), so that a plugin
// added here is everywhere.
package registry

import (
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/plugins/nodepids"
	"github.com/headroom-k8s/headroom/plugins/oomrisk"
)

// Scheduler returns the out-of-tree registry of Headroom's scheduler
// plugins, by name.
func Scheduler() frameworkruntime.Registry {
	return frameworkruntime.Registry{
		nodepids.Name: nodepids.New,
		nodeips.Name:  nodeips.New,
		oomrisk.Name:  oomrisk.New,
	}
}
