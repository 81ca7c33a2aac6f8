// Command headroom-node-agent publishes its node's PID capacity,
// reservation and use, the PIDs of its biggest pods, the pod-IP capacity
// and use of its CNI IPAM, and the memory working sets of the node and its
// biggest pods, as headroom.dev/pid-*, headroom.dev/ip-* and
// headroom.dev/memory-* Node annotations. See README.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/logs"
	"k8s.io/component-base/version/verflag"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/nodeagent"
)

func main() {
	logs.InitLogs()
	if err := run(); err != nil {
		klog.ErrorS(err, "headroom-node-agent failed")
		klog.Flush()
		os.Exit(1)
	}
	klog.Flush()
}

func run() error {
	opts := nodeagent.NewOptions(os.Getenv("NODE_NAME"), os.Getenv("POD_UID"))
	fs := pflag.NewFlagSet("headroom-node-agent", pflag.ExitOnError)
	opts.AddFlags(fs)
	verflag.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		return err
	}
	verflag.PrintAndExitIfRequested()
	if err := opts.ApplyLogging(); err != nil {
		return err
	}
	cfg, err := opts.Config(fs)
	if err != nil {
		return err
	}

	restCfg, err := restConfig(opts.Kubeconfig)
	if err != nil {
		return err
	}
	restCfg.UserAgent = nodeagent.FieldManager
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	agent, err := nodeagent.New(client, cfg, nodeagent.WithDynamicClient(dyn))
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background())
	klog.InfoS("Starting", "node", cfg.NodeName, "procRoot", cfg.ProcRoot, "cgroupRoot", cfg.CgroupRoot, "cniConfDir", cfg.CNIConfDir,
		"containerRuntimeEndpoint", cfg.ContainerRuntimeEndpoint, "podUID", cfg.PodUID, "ipLeakGrace", cfg.IPLeakGrace,
		"reclaimLeakedIPs", cfg.ReclaimLeakedIPs, "reclaimLeakedIPsAfter", cfg.ReclaimLeakedIPsAfter,
		"reservedPIDs", cfg.ReservedPIDs, "interval", cfg.Interval, "maxInterval", cfg.MaxInterval,
		"hysteresisPIDs", cfg.Hysteresis.PIDs, "hysteresisPercent", cfg.Hysteresis.Percent,
		"memoryHysteresisBytes", cfg.MemoryHysteresis.Bytes, "memoryHysteresisPercent", cfg.MemoryHysteresis.Percent, "once", opts.Once)
	if opts.Once {
		return agent.Once(ctx)
	}
	if opts.MetricsAddress != "" && opts.MetricsAddress != "0" {
		if err := opts.Serving.Serve(ctx, opts.MetricsAddress, opts.Kubeconfig, agent.Metrics().Handler(), agent.HealthzHandler()); err != nil {
			return err
		}
	}
	return agent.Run(ctx)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and no in-cluster configuration: %w", err)
		}
		return c, nil
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}
