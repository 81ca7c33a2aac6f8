// Package plugins lists Headroom's scheduler plugins: headroom-scheduler
// registers them into the kube-scheduler and kubectl-headroom runs them
// through the scheduler framework, so both run the same set.
package plugins

import (
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/headroom-k8s/headroom/plugins/nodepids"
	"github.com/headroom-k8s/headroom/plugins/oomrisk"
)

// Registry returns the factories of Headroom's scheduler plugins by name.
func Registry() frameworkruntime.Registry {
	return frameworkruntime.Registry{
		nodepids.Name: nodepids.New,
		oomrisk.Name:  oomrisk.New,
	}
}
