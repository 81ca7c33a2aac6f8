package nodeips

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/figure/figuretest"
)

// ipNode is a node with the three pod-IP annotations.
func ipNode(name string, capacity, used int64, sampledAt time.Time) *corev1.Node {
	return figuretest.AnnotatedNode(name,
		ipstats.AnnotationCapacity, strconv.FormatInt(capacity, 10),
		ipstats.AnnotationUsed, strconv.FormatInt(used, 10),
		ipstats.AnnotationSampledAt, sampledAt.UTC().Format(time.RFC3339))
}

// pod is a pod on the pod network.
var pod = figuretest.Pod

// hostNetworkPod is a pod on the node's network: it takes no pod IP.
func hostNetworkPod(name string) *corev1.Pod {
	p := pod(name)
	p.Spec.HostNetwork = true
	return p
}

// bench runs NodeIPs' benchmarks (figuretest.Bench) on nodes whose IPAM
// holds 254 addresses, 100 of them in use, and pods on the pod network.
var bench = figuretest.Bench[config.NodeIPsArgs, ipstats.NodeStats]{
	Definition: Definition,
	Node:       func(name string, sampledAt time.Time) *corev1.Node { return ipNode(name, 254, 100, sampledAt) },
	Pod:        pod,
	Incoming:   pod("incoming"),
	NoAmple:    func(args *config.NodeIPsArgs) { args.AmpleFreeIPs = 0 },
	MaxRaw:     254,
}

// now is the scheduler's clock in these tests.
var now = figuretest.Now

// newPlugin builds NodeIPs through New with a real framework handle, its
// clock at now (figuretest.New).
var newPlugin = figuretest.Builder(Definition)

// defaultArgs are the v1 defaults: MinFreeIPs 0, MaxSampleAge 10m,
// UnknownNodeScore -1 (mean of known), AmpleFreeIPs 110.
func defaultArgs() *config.NodeIPsArgs { return figuretest.DefaultArgs(Definition) }
