// Command headroom-descheduler is the upstream descheduler with Headroom's
// plugin registered.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"sigs.k8s.io/descheduler/cmd/descheduler/app"
)

func main() {
	cmd := app.NewDeschedulerCommand(os.Stdout)
	cmd.AddCommand(app.NewVersionCommand())
	os.Exit(cli.Run(cmd))
}
