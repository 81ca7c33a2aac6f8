// Command headroom-descheduler is the upstream descheduler with Headroom's
// plugins registered. Flags, policy files and modes are upstream's.
package main

import (
	"os"
	"time"

	"k8s.io/component-base/cli"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/cmd/descheduler/app"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure/eventrecorder"
)

// eventFlushTimeout bounds the wait at exit for the plugin's last Events:
// a one-shot run (the CronJob) exits right after its run, and a run never
// waits for its Events itself.
const eventFlushTimeout = 10 * time.Second

func main() {
	code := cli.Run(app.NewCommand(os.Stdout,
		app.Plugin{Name: relievenodepressure.PluginName, PluginUtilities: relievenodepressure.Utilities()},
	))
	eventrecorder.FlushAll(klog.Background(), eventFlushTimeout)
	klog.Flush()
	os.Exit(code)
}
