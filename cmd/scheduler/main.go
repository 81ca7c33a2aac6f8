// Command headroom-scheduler is the upstream kube-scheduler with Headroom's
// plugins registered. Every flag, config file, health endpoint and leader
// election option of kube-scheduler works unchanged.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	_ "github.com/headroom-k8s/headroom/apis/config/scheme"
	"github.com/headroom-k8s/headroom/plugins/oomrisk"
	"github.com/headroom-k8s/headroom/plugins/registry"
)

func main() {
	var opts []app.Option
	for name, factory := range registry.Scheduler() {
		opts = append(opts, app.WithPlugin(name, factory))
	}
	command := app.NewSchedulerCommand(opts...)
	command.Use = "headroom-scheduler"
	command.AddCommand(oomrisk.NewExplainCommand())
	os.Exit(cli.Run(command))
}
