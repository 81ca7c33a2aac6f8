// Command kubectl-headroom is Headroom's kubectl plugin: `kubectl headroom`
// shows every node's headroom and explains the scheduler plugins' verdicts.
// It only reads from the API server, but for `clean-annotations --yes`.
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/component-base/cli"

	"github.com/headroom-k8s/headroom/cmd/kubectl-headroom/app"
)

func main() {
	os.Exit(cli.Run(app.NewCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})))
}
