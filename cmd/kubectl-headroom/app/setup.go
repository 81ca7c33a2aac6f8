package app

import (
	"context"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	headroomconfig "github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/manifests"
	"github.com/headroom-k8s/headroom/pkg/calicoipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/plugins/nodepids"
)

// builtinSchedulerConfig names the configuration built into kubectl-headroom.
const builtinSchedulerConfig = "the built-in default (manifests/scheduler/scheduler-config.yaml)"

// session is what a subcommand works with: the profile (--config,
// --scheduler-name), the args of its Headroom plugins as the profile sets
// them, and a client of the API server.
type session struct {
	profile *profile
	// figureArgs are the args of every registered figure plugin, by name;
	// pidArgs and ipArgs NodePIDs' and NodeIPs' of them.
	figureArgs map[string]runtime.Object
	pidArgs    *headroomconfig.NodePIDsArgs
	ipArgs     *headroomconfig.NodeIPsArgs
	oomArgs    *headroomconfig.OOMRiskArgs
	client     kubernetes.Interface
}

// setup connects and loads the profile and its args, the first step of
// every subcommand: the profile of --config, else of the configuration the
// running headroom-scheduler reads, else of the built-in default. It says
// on stderr which configuration it uses, and why when it falls back.
func (o *options) setup(ctx context.Context) (*session, error) {
	var data []byte
	var source string
	if o.schedulerConfig != "" {
		// A file given is checked before connecting.
		var err error
		if data, err = os.ReadFile(o.schedulerConfig); err != nil {
			return nil, err
		}
		source = o.schedulerConfig
		if _, err := loadProfile(data, source, o.schedulerName); err != nil {
			return nil, err
		}
	}
	client, err := o.newClient()
	if err != nil {
		return nil, err
	}
	if data == nil {
		f, err := schedulerConfigOf(ctx, client, o.systemNamespace)
		if err != nil {
			fmt.Fprintf(o.streams.ErrOut, "Note: the running headroom-scheduler's configuration could not be read (%v); using %s\n", err, builtinSchedulerConfig)
			data, source = manifests.SchedulerConfig, builtinSchedulerConfig
		} else {
			data, source = f.data, f.source
		}
	}
	p, err := loadProfile(data, source, o.schedulerName)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(o.streams.ErrOut, "Using profile %q of %s\n", p.cfg.SchedulerName, source)
	s := &session{profile: p, client: client}
	if s.figureArgs, err = p.figureArgs(); err != nil {
		return nil, err
	}
	s.pidArgs, _ = s.figureArgs[nodepids.Name].(*headroomconfig.NodePIDsArgs)
	s.ipArgs, _ = s.figureArgs[nodeips.Name].(*headroomconfig.NodeIPsArgs)
	if s.ipArgs != nil && s.ipArgs.IPSource == headroomconfig.IPSourceCalicoIPAM {
		p.ips = o.listCalico(ctx)
	}
	if s.oomArgs, err = p.oomRiskArgs(); err != nil {
		return nil, err
	}
	return s, nil
}

// listCalico lists Calico's IPAM objects once, for NodeIPs' ipSource
// CalicoIPAM; where they cannot be read, every node's pod-IP figures are
// unknown, with the reason.
func (o *options) listCalico(ctx context.Context) ipstats.Source {
	client, err := o.newDynamicClient()
	if err == nil {
		var c *calicoipam.Cluster
		if c, err = calicoipam.List(ctx, client); err == nil {
			return c
		}
	}
	fmt.Fprintf(o.streams.ErrOut, "Note: NodeIPs reads Calico's IPAM objects (ipSource CalicoIPAM), which could not be listed (%v): pod-IP figures unknown\n", err)
	return unknownIPs{err}
}

// unknownIPs is a pod-IP source that tells no node's figures.
type unknownIPs struct{ err error }

func (u unknownIPs) Read(*corev1.Node, time.Time, time.Duration) (ipstats.NodeStats, error) {
	return ipstats.NodeStats{}, &ipstats.UnknownError{Reason: u.err}
}
