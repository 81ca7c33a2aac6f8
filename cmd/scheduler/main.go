// Command headroom-scheduler is the upstream kube-scheduler with Headroom's
// plugins registered. Every flag, config file, health endpoint and leader
// election option of kube-scheduler works unchanged.
package main

import (
	"os"
	"sort"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	_ "github.com/headroom-k8s/headroom/apis/config/scheme"
	"github.com/headroom-k8s/headroom/plugins"
)

func main() {
	registry := plugins.Registry()
	names := make([]string, 0, len(registry))
	for name := range registry {
		names = append(names, name)
	}
	sort.Strings(names)
	var opts []app.Option
	for _, name := range names {
		opts = append(opts, app.WithPlugin(name, registry[name]))
	}
	command := app.NewSchedulerCommand(opts...)
	command.Use = "headroom-scheduler"
	os.Exit(cli.Run(command))
}
