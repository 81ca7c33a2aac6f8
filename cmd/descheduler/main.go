// Command headroom-descheduler is the upstream descheduler with Headroom's
// plugins registered. Flags, policy files and modes are upstream's.
package main

import (
	"os"

	"k8s.io/component-base/cli"

	"github.com/headroom-k8s/headroom/cmd/descheduler/app"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
)

func main() {
	os.Exit(cli.Run(app.NewCommand(os.Stdout,
		app.Plugin{Name: relievenodepressure.PluginName, PluginUtilities: relievenodepressure.Utilities()},
	)))
}
