// Package app builds the kubectl-headroom command. Its figures come from the
// models the plugins share (pkg/pidstats, pkg/oomkill), its verdicts and
// scores from the plugins themselves, run through the scheduler framework on
// a snapshot of the cluster, so they are the scheduler's own.
package app

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/component-base/version/verflag"
)

// options are the flags every subcommand shares.
type options struct {
	streams genericiooptions.IOStreams
	config  *genericclioptions.ConfigFlags
	// schedulerConfig is a KubeSchedulerConfiguration file; empty: the
	// running headroom-scheduler's, else the built-in default.
	schedulerConfig string
	// systemNamespace is where the shipped headroom-scheduler and
	// headroom-descheduler run.
	systemNamespace string
	// schedulerName picks the profile of that config.
	schedulerName string
	// newClient connects to the API server; tests replace it.
	newClient func() (kubernetes.Interface, error)
	// newDynamicClient connects for Calico's objects; tests replace it.
	newDynamicClient func() (dynamic.Interface, error)
}

// NewCommand returns the kubectl-headroom command.
func NewCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &options{streams: streams, config: genericclioptions.NewConfigFlags(true)}
	o.newClient = func() (kubernetes.Interface, error) {
		cfg, err := o.config.ToRESTConfig()
		if err != nil {
			return nil, err
		}
		return kubernetes.NewForConfig(cfg)
	}
	o.newDynamicClient = func() (dynamic.Interface, error) {
		cfg, err := o.config.ToRESTConfig()
		if err != nil {
			return nil, err
		}
		return dynamic.NewForConfig(cfg)
	}
	return newCommand(o)
}

func newCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "kubectl-headroom",
		Short: "Show nodes' PID, pod-IP and OOM headroom and explain Headroom's scheduling and eviction decisions",
		Long: `kubectl headroom shows what Headroom's scheduler plugins see. It only reads
from the API server, but for clean-annotations --yes, which removes Headroom's
annotations from Nodes when it is uninstalled. Verdicts and scores are computed by the plugins
themselves, with a profile of the configuration the running headroom-scheduler
reads (the ConfigMap its Deployment in headroom-system mounts) or of the one
given with --config; the evictions RelieveNodePressure would make come from
its own plan, with the DeschedulerPolicy the headroom-descheduler CronJob (or
Deployment) mounts or the one given with --policy. Each command says on
stderr which configuration it used; when the cluster's cannot be read (not
installed, or no right to get Deployments, CronJobs and ConfigMaps there) it
says why and uses the default built into kubectl-headroom, the shipped
manifests' own.`,
		SilenceUsage: true,
		// kubectl runs it as `kubectl headroom`: help says so.
		Annotations: map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl headroom"},
		PersistentPreRun: func(*cobra.Command, []string) {
			verflag.PrintAndExitIfRequested()
		},
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	cmd.SetIn(o.streams.In)
	cmd.SetOut(o.streams.Out)
	cmd.SetErr(o.streams.ErrOut)
	fs := cmd.PersistentFlags()
	o.config.AddFlags(fs)
	fs.StringVar(&o.schedulerConfig, "config", "", "KubeSchedulerConfiguration file whose profile to use; default: the running headroom-scheduler's (its Deployment's ConfigMap), else the built-in default")
	fs.StringVar(&o.systemNamespace, "headroom-namespace", defaultSystemNamespace, "namespace of the running headroom-scheduler and headroom-descheduler, whose configuration is the default")
	fs.StringVar(&o.schedulerName, "scheduler-name", "", "profile of the configuration to use (its schedulerName); default: headroom-scheduler, or the configuration's only profile")
	verflag.AddFlags(cmd.Flags())

	cmd.AddCommand(newNodesCommand(o), newExplainCommand(o), newEvictionsCommand(o), newExplainOOMCommand(o), newCleanAnnotationsCommand(o))
	return cmd
}

// namespace is -n, or the kubeconfig context's namespace, or "default".
func (o *options) namespace() string {
	if ns, _, err := o.config.ToRawKubeConfigLoader().Namespace(); err == nil && ns != "" {
		return ns
	}
	return "default"
}
