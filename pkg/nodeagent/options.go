package nodeagent

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	// The json logging format (--logging-format=json), as kube-scheduler
	// registers it.
	_ "k8s.io/component-base/logs/json/register"

	"github.com/headroom-k8s/headroom/pkg/ciliumipam"
)

// Options are the command-line settings of headroom-node-agent.
type Options struct {
	NodeName            string
	Kubeconfig          string
	ProcRoot            string
	CgroupRoot          string
	CNIConfDir          string
	RuntimeEndpoint     string
	CiliumAgentSocket   string
	PodUID              string
	IPLeakGrace         time.Duration
	ReclaimLeakedIPs    bool
	ReclaimAfter        time.Duration
	MetricsAddress      string
	ReservedPIDs        int64
	KubeletConfig       string
	Interval            time.Duration
	MaxInterval         time.Duration
	HysteresisPIDs      int64
	HysteresisPercent   float64
	IPHysteresisPercent float64
	IPCrossCheck        bool
	AWSIPAMD            AWSIPAMDConfig
	// MemoryHysteresisBytes is a byte count, given in Kubernetes quantity
	// syntax (100Mi) or as a plain integer.
	MemoryHysteresisBytes   int64
	MemoryHysteresisPercent float64
	PIDThresholdPercent     int64
	PressureSamples         int
	RequestTimeout          time.Duration
	Once                    bool
	// Logs is component-base's logging configuration: -v, --vmodule,
	// --logging-format (text or json), as kube-scheduler takes them.
	Logs *logsapi.LoggingConfiguration
	// Serving is the /metrics and /healthz endpoint's TLS and delegated
	// authentication and authorization.
	Serving *ServingOptions
}

// NewOptions returns the defaults; nodeName is normally $NODE_NAME, set from
// spec.nodeName through the downward API, and podUID $POD_UID, from
// metadata.uid.
func NewOptions(nodeName, podUID string) *Options {
	d := DefaultConfig()
	return &Options{
		NodeName:                nodeName,
		PodUID:                  podUID,
		ProcRoot:                d.ProcRoot,
		CgroupRoot:              d.CgroupRoot,
		CNIConfDir:              d.CNIConfDir,
		RuntimeEndpoint:         d.ContainerRuntimeEndpoint,
		IPLeakGrace:             d.IPLeakGrace,
		ReclaimAfter:            d.ReclaimLeakedIPsAfter,
		IPHysteresisPercent:     d.IPHysteresisPercent,
		IPCrossCheck:            d.IPCrossCheck,
		AWSIPAMD:                d.AWSIPAMD,
		MetricsAddress:          DefaultMetricsAddress,
		Interval:                d.Interval,
		MaxInterval:             d.MaxInterval,
		HysteresisPIDs:          d.Hysteresis.PIDs,
		HysteresisPercent:       d.Hysteresis.Percent,
		MemoryHysteresisBytes:   d.MemoryHysteresis.Bytes,
		MemoryHysteresisPercent: d.MemoryHysteresis.Percent,
		PIDThresholdPercent:     d.PIDThresholdPercent,
		PressureSamples:         d.PressureSamples,
		RequestTimeout:          d.RequestTimeout,
		Logs:                    logsapi.NewLoggingConfiguration(),
		Serving:                 NewServingOptions(),
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Node whose annotations to write (default $NODE_NAME)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig file; in-cluster configuration when empty")
	fs.StringVar(&o.ProcRoot, "proc-root", o.ProcRoot, "where the host's /proc is: the container's own in the host's PID namespace (hostPID), or a copy mounted elsewhere")
	fs.StringVar(&o.CgroupRoot, "cgroup-root", o.CgroupRoot,
		"where the host's cgroup filesystem is mounted (cgroup v1 with its pids hierarchy, or v2; kubelet cgroup driver cgroupfs or systemd)")
	fs.StringVar(&o.CNIConfDir, "cni-conf-dir", o.CNIConfDir,
		"the container runtime's CNI configuration directory: the first .conflist/.conf/.json file in lexical order is the pod network, whose host-local IPAM state gives the pod-IP figures; another IPAM publishes none")
	fs.StringVar(&o.RuntimeEndpoint, "container-runtime-endpoint", o.RuntimeEndpoint,
		"CRI endpoint of the node's container runtime (e.g. "+ContainerdEndpoint+"), asked for its pod sandboxes (as crictl pods) to tell host-local allocations that belong to none (headroom.dev/ip-leaked); empty (the default) to publish no leak count")
	fs.StringVar(&o.CiliumAgentSocket, "cilium-agent-socket", o.CiliumAgentSocket,
		"the Cilium agent's API socket (e.g. "+ciliumipam.DefaultAgentSocket+"), asked for the addresses it has allocated where the node's CiliumNode does not list them (cluster-pool and kubernetes modes); empty (the default) not to ask: those nodes publish no pod-IP figures")
	fs.StringVar(&o.PodUID, "pod-uid", o.PodUID,
		"UID of the agent's own pod (default $POD_UID, from the downward API's metadata.uid): the container runtime's answer counts only when it lists this pod's sandbox")
	fs.DurationVar(&o.IPLeakGrace, "ip-leak-grace", o.IPLeakGrace,
		"how old a host-local allocation must be before it can count as leaked: the runtime allocates before it lists the sandbox (at least 1m; 2m with --reclaim-leaked-ips)")
	fs.BoolVar(&o.ReclaimLeakedIPs, "reclaim-leaked-ips", o.ReclaimLeakedIPs,
		"release a leaked host-local allocation as host-local's DEL would, once leaked for --reclaim-leaked-ips-after and its sandbox confirmed gone right before; needs host-local's state directory writable")
	fs.DurationVar(&o.ReclaimAfter, "reclaim-leaked-ips-after", o.ReclaimAfter,
		"how long an allocation must have been seen leaked before --reclaim-leaked-ips releases it (at least 1m and 3 intervals)")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress,
		"address (host:port) to serve /metrics and /healthz on over HTTPS, /metrics to identities the API server authorizes for it (delegated authentication and authorization, as kube-scheduler's secure port); empty or 0 to serve nothing (--once never serves)")
	fs.Int64Var(&o.ReservedPIDs, "reserved-pids", o.ReservedPIDs,
		"PIDs reserved for the system and the kubelet (systemReserved.pid + kubeReserved.pid); excludes --kubelet-config")
	fs.StringVar(&o.KubeletConfig, "kubelet-config", o.KubeletConfig,
		"KubeletConfiguration file (kubelet.config.k8s.io/v1beta1) to take systemReserved.pid + kubeReserved.pid from; excludes --reserved-pids")
	fs.DurationVar(&o.Interval, "interval", o.Interval, "how often to sample /proc")
	fs.DurationVar(&o.MaxInterval, "max-interval", o.MaxInterval,
		"longest time between writes even when nothing changed (forced writes come up to 10% early, never late)")
	fs.Int64Var(&o.HysteresisPIDs, "hysteresis-pids", o.HysteresisPIDs,
		"write when used PIDs moved by more than max(this, --hysteresis-percent of allocatable) since the last write, or one pod's PIDs by more than this")
	fs.Float64Var(&o.HysteresisPercent, "hysteresis-percent", o.HysteresisPercent,
		"hysteresis as a percentage of allocatable PIDs; see --hysteresis-pids")
	fs.Float64Var(&o.IPHysteresisPercent, "ip-hysteresis-percent", o.IPHysteresisPercent,
		"write when pod IPs in use moved by at least max(1, this percentage of the pool) since the last write, and on every change once no more than that many are free")
	fs.BoolVar(&o.IPCrossCheck, "ip-cross-check", o.IPCrossCheck,
		"cross-check the pod-IP figures against the pods bound to the node (watched with fieldSelector spec.nodeName): a source that counts fewer addresses than they hold is reported (Warning Event PodIPFiguresDisagree, metric) and the pods' count published")
	fs.StringVar(&o.AWSIPAMD.IntrospectionAddress, "aws-ipamd-introspection-address", o.AWSIPAMD.IntrospectionAddress,
		"host:port of the AWS VPC CNI's ipamd introspection server (INTROSPECTION_BIND_ADDRESS), whose /v1/enis gives the pod-IP figures where the network's plugin is aws-cni")
	fs.StringVar(&o.AWSIPAMD.MetricsAddress, "aws-ipamd-metrics-address", o.AWSIPAMD.MetricsAddress,
		"host:port of ipamd's metrics server, whose awscni_eni_max and awscni_ip_max say how far the pool can grow and awscni_aws_api_error_count when the subnet is exhausted")
	fs.DurationVar(&o.AWSIPAMD.Cooldown, "aws-ip-cooldown-period", o.AWSIPAMD.Cooldown,
		"ipamd's IP_COOLDOWN_PERIOD: a released address is handed to no pod for this long, and counts as used")
	fs.Var((*byteQuantity)(&o.MemoryHysteresisBytes), "memory-hysteresis-bytes",
		"write when the node's memory working set moved by more than max(this, --memory-hysteresis-percent of the node's memory) since the last write, or one pod's working set by more than this; a quantity (100Mi) or a byte count")
	fs.Float64Var(&o.MemoryHysteresisPercent, "memory-hysteresis-percent", o.MemoryHysteresisPercent,
		"memory hysteresis as a percentage of the node's memory (MemTotal); see --memory-hysteresis-bytes")
	fs.Int64Var(&o.PIDThresholdPercent, "pids-threshold-percent", o.PIDThresholdPercent,
		"the descheduler's PID threshold (RelieveNodePressure's pids.thresholdPercent); a sample with used PIDs above this percentage of allocatable is written at once, ahead of the hysteresis, until --pressure-samples + 1 in a row have been; 0 (the default) for none")
	fs.IntVar(&o.PressureSamples, "pressure-samples", o.PressureSamples,
		"the descheduler's pressureSamples: how many consecutive samples above --pids-threshold-percent it waits for; that many and one more (for a descheduling run that falls between two writes) are written at once")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "timeout of each API request")
	fs.BoolVar(&o.Once, "once", o.Once, "sample, write unconditionally and exit; non-zero exit when a probe failed")
	logsapi.AddFlags(o.Logs, fs)
	addLegacyKlogFlags(fs)
	o.Serving.AddFlags(fs)
}

// addLegacyKlogFlags keeps the klog flags headroom-pid-reporter had
// (--logtostderr, --log-file, …), deprecated: the agent keeps every flag of
// the command it replaced. -v and --vmodule are component-base's. They act
// on klog's text output only, as in kube-scheduler before it dropped them.
func addLegacyKlogFlags(fs *pflag.FlagSet) {
	var klogFlags flag.FlagSet
	klog.InitFlags(&klogFlags)
	klogFlags.VisitAll(func(f *flag.Flag) {
		if f.Name == "v" || f.Name == "vmodule" || fs.Lookup(f.Name) != nil {
			return
		}
		pf := pflag.PFlagFromGoFlag(f)
		pf.Deprecated = "use --logging-format and the container's standard error; it acts on the text format only"
		fs.AddFlag(pf)
	})
}

// ApplyLogging validates the logging flags and sets klog up with them (the
// format, the verbosity); call it once, after parsing.
func (o *Options) ApplyLogging() error {
	fg := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(fg); err != nil {
		return err
	}
	return logsapi.ValidateAndApply(o.Logs, fg)
}

// Config resolves the options into a valid Config. fs tells whether
// --reserved-pids was given explicitly (its zero default is a valid value).
func (o *Options) Config(fs *pflag.FlagSet) (Config, error) {
	reservedSet := fs != nil && fs.Changed("reserved-pids")
	if reservedSet && o.KubeletConfig != "" {
		return Config{}, errors.New("--reserved-pids and --kubelet-config are mutually exclusive: give one source of the reservation")
	}
	cfg := DefaultConfig()
	cfg.NodeName = o.NodeName
	cfg.ProcRoot = o.ProcRoot
	cfg.CgroupRoot = o.CgroupRoot
	cfg.CNIConfDir = o.CNIConfDir
	cfg.ContainerRuntimeEndpoint = o.RuntimeEndpoint
	cfg.CiliumAgentSocket = o.CiliumAgentSocket
	cfg.PodUID = o.PodUID
	cfg.IPLeakGrace = o.IPLeakGrace
	cfg.ReclaimLeakedIPs = o.ReclaimLeakedIPs
	cfg.ReclaimLeakedIPsAfter = o.ReclaimAfter
	cfg.IPHysteresisPercent = o.IPHysteresisPercent
	cfg.IPCrossCheck = o.IPCrossCheck
	cfg.AWSIPAMD = o.AWSIPAMD
	cfg.ReservedPIDs = o.ReservedPIDs
	cfg.Interval = o.Interval
	cfg.MaxInterval = o.MaxInterval
	cfg.Hysteresis.PIDs = o.HysteresisPIDs
	cfg.Hysteresis.Percent = o.HysteresisPercent
	cfg.MemoryHysteresis = MemoryHysteresis{Bytes: o.MemoryHysteresisBytes, Percent: o.MemoryHysteresisPercent}
	cfg.PIDThresholdPercent = o.PIDThresholdPercent
	cfg.PressureSamples = o.PressureSamples
	cfg.RequestTimeout = o.RequestTimeout
	if o.KubeletConfig != "" {
		n, err := ReservedFromKubeletConfigFile(o.KubeletConfig)
		if err != nil {
			return Config{}, err
		}
		cfg.ReservedPIDs = n
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// byteQuantity is a flag of bytes in Kubernetes quantity syntax (64Mi,
// 1G, 1048576): a whole, non-negative number of bytes.
type byteQuantity int64

func (b *byteQuantity) String() string {
	return resource.NewQuantity(int64(*b), resource.BinarySI).String()
}

func (b *byteQuantity) Set(v string) error {
	q, err := resource.ParseQuantity(v)
	if err != nil {
		return err
	}
	if q.Sign() < 0 || q.Cmp(*resource.NewQuantity(math.MaxInt64, resource.BinarySI)) > 0 {
		return fmt.Errorf("%q is not a whole, non-negative number of bytes", v)
	}
	n := q.Value() // rounded up: a fraction of a byte differs below
	if q.Cmp(*resource.NewQuantity(n, resource.BinarySI)) != 0 {
		return fmt.Errorf("%q is not a whole, non-negative number of bytes", v)
	}
	*b = byteQuantity(n)
	return nil
}

func (b *byteQuantity) Type() string { return "quantity" }
