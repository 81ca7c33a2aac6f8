// Package app builds the headroom-descheduler command: the upstream
// descheduler command with Headroom's plugins added to its registry.
package app

import (
	"io"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/version/verflag"
	deschedulerapp "sigs.k8s.io/descheduler/cmd/descheduler/app"
	"sigs.k8s.io/descheduler/pkg/framework/pluginregistry"

	"github.com/headroom-k8s/headroom/pkg/calicoipam"
)

// Plugin is an out-of-tree plugin for the descheduler's registry.
type Plugin struct {
	Name string
	pluginregistry.PluginUtilities
}

// NewCommand returns the upstream descheduler command with plugins
// registered. The upstream PreRunE replaces pluginregistry.PluginRegistry
// with a fresh registry of the in-tree plugins, so anything registered
// before it runs is lost: plugins are registered right after it, before the
// policy file is read.
func NewCommand(out io.Writer, plugins ...Plugin) *cobra.Command {
	cmd := deschedulerapp.NewDeschedulerCommand(out)
	upstreamPreRunE := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		verflag.PrintAndExitIfRequested()
		if upstreamPreRunE != nil {
			if err := upstreamPreRunE(c, args); err != nil {
				return err
			}
		}
		Register(pluginregistry.PluginRegistry, plugins...)
		// RelieveNodePressure's ipSource CalicoIPAM watches Calico's
		// objects with the descheduler's own connection.
		calicoipam.SetDefaultConfig(func() (*rest.Config, error) {
			kubeconfig, _ := c.Flags().GetString("client-connection-kubeconfig")
			return clientcmd.BuildConfigFromFlags("", kubeconfig)
		})
		return nil
	}
	cmd.Use = "headroom-descheduler"
	// --version prints the version every Headroom binary reports, as
	// headroom-scheduler does: "Kubernetes <version>".
	verflag.AddFlags(cmd.Flags())
	cmd.AddCommand(deschedulerapp.NewVersionCommand())
	return cmd
}

// Register adds plugins to registry.
func Register(registry pluginregistry.Registry, plugins ...Plugin) {
	for _, p := range plugins {
		pluginregistry.Register(p.Name, p.PluginBuilder, p.PluginType, p.PluginArgInstance, p.PluginArgValidator, p.PluginArgDefaulter, registry)
	}
}
