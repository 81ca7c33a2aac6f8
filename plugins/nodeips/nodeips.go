// Package nodeips is Headroom's NodeIPs scheduler plugin. It keeps pods off
// nodes whose CNI IPAM has no pod IPs left and prefers nodes with more free
// pod IPs. The scheduler never sees pod IPs (maxPods says nothing about the
// IPAM's pool, and leaked allocations shrink it silently), so the figures
// come from the headroom.dev/ip-* annotations that headroom-node-agent
// writes, read and estimated by pkg/ipstats. The plugin itself is
// plugins/figure's; this package is the figure. See README.md.
package nodeips

import (
	"context"
	"fmt"
	"iter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/apis/config"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/apis/config/validation"
	"github.com/headroom-k8s/headroom/pkg/calicoipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/figure"
)

// Name is the plugin's name in the registry and in KubeSchedulerConfiguration.
const Name = "NodeIPs"

const (
	// ErrReasonNoFreeIPs is Filter's reason. It names no node and no number
	// so that the scheduler can aggregate it across nodes in the pod's
	// FailedScheduling event: "0/5 nodes are available: 2 node(s) had no
	// free pod IPs, ...".
	ErrReasonNoFreeIPs = "node(s) had no free pod IPs"
	// EventReasonInvalidIPs is the reason of the Warning Event on a Node
	// whose pod-IP annotations are invalid (NodeIPs then counts its pod-IP
	// headroom as unknown), named as NodePIDs names its Events.
	EventReasonInvalidIPs = "InvalidIPAnnotation"

	// hostNetworkSignerName follows the framework's rule for signers that
	// return one field: the field's path.
	hostNetworkSignerName = "v1.Pod.Spec.HostNetwork"
)

// NodeIPs is the plugin: a PreFilter, Filter, PreScore and Score plugin
// over the pod-IP figure.
type NodeIPs = figure.Plugin[ipstats.NodeStats]

// Definition is NodeIPs as the registry lists it.
var Definition = &figure.Definition[config.NodeIPsArgs, ipstats.NodeStats]{
	Names: figure.Names{
		Plugin: Name, Kind: "pod IP", Noun: "pod-IP", FilterReason: ErrReasonNoFreeIPs,
		InvalidNodeEvent: EventReasonInvalidIPs,
	},
	NewV1Args: func() runtime.Object { return &configv1.NodeIPsArgs{} },
	Validate:  validation.ValidateNodeIPsArgs,
	Configure: func(a *config.NodeIPsArgs, h fwk.Handle) (figure.Settings, figure.Figure[ipstats.NodeStats], error) {
		src, err := SourceOf(a.IPSource, h)
		if err != nil {
			return figure.Settings{}, nil, err
		}
		s, f := configure(a, src)
		return s, f, nil
	},
}

// configure is the plugin's settings and figure with the pod-IP source.
func configure(a *config.NodeIPsArgs, src ipstats.Source) (figure.Settings, figure.Figure[ipstats.NodeStats]) {
	settings := figure.Settings{MaxSampleAge: a.MaxSampleAge.Duration, UnknownScore: a.UnknownNodeScore, Ample: a.AmpleFreeIPs}
	if a.IPSource == config.IPSourceCalicoIPAM {
		settings.MaxSampleAge = 0 // live figures do not age
	}
	return settings, ips{minFreeIPs: a.MinFreeIPs, source: src, live: a.IPSource == config.IPSourceCalicoIPAM}
}

// WithSource is NodeIPs' factory reading the pod-IP figures from src
// whatever ipSource says: kubectl-headroom's, with its one-shot list of
// Calico's objects.
func WithSource(src ipstats.Source) func(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	d := *Definition
	d.Configure = func(a *config.NodeIPsArgs, _ fwk.Handle) (figure.Settings, figure.Figure[ipstats.NodeStats], error) {
		s, f := configure(a, src)
		return s, f, nil
	}
	return d.New
}

// calicoSyncWait is how long building the plugin waits for the first lists
// of Calico's objects: a node whose figures are unknown when its entry is
// computed stays unknown until the node or its pods change.
const calicoSyncWait = 30 * time.Second

// SourceOf returns the pod-IP source that ipSource names (validated):
// with IPSourceCalicoIPAM the process's one watch of Calico's objects,
// through h's client, synced.
func SourceOf(ipSource string, h fwk.Handle) (ipstats.Source, error) {
	if ipSource != config.IPSourceCalicoIPAM {
		return ipstats.Annotations{}, nil
	}
	if h == nil || h.KubeConfig() == nil {
		return nil, fmt.Errorf("ipSource %s needs the scheduler's client", config.IPSourceCalicoIPAM)
	}
	src, err := calicoipam.SharedSource(h.KubeConfig())
	if err != nil {
		return nil, fmt.Errorf("ipSource %s: %w", config.IPSourceCalicoIPAM, err)
	}
	if err := src.WaitSynced(calicoSyncWait); err != nil {
		// Not fatal: the figures stay unknown, and Filter passes the
		// nodes, until the watch lists.
		klog.Background().Info("Calico's IPAM objects are not listed yet: pod-IP headroom unknown", "plugin", Name, "err", err)
	}
	return src, nil
}

// New builds the plugin from its args, which the kube-scheduler's scheme has
// decoded and defaulted into the internal *config.NodeIPsArgs. Nil args mean
// the defaults.
var New = Definition.New

// ips is the pod-IP figure: pkg/ipstats' model with NodeIPsArgs: one IP a
// pod (ipstats: the figures are one family's, and every pod on the pod
// network takes one address of each family), MinFreeIPs kept free.
type ips struct {
	minFreeIPs int64
	source     ipstats.Source
	live       bool
}

func (f ips) Read(node *corev1.Node, now time.Time) (ipstats.NodeStats, error) {
	return f.source.Read(node, now, 0)
}

// Live: Calico's figures change without the node changing; they are read
// again whenever the node or its pods change.
func (f ips) Live() bool { return f.live }

// Estimate adds to the reported use the node's pods placed after the
// sample that take an IP (ipstats.EstimateUsed).
func (ips) Estimate(s ipstats.NodeStats, pods iter.Seq[*corev1.Pod]) ipstats.NodeStats {
	s.Used = ipstats.EstimateUsed(s, pods)
	return s
}

func (f ips) Floor(ipstats.NodeStats) int64 { return f.minFreeIPs }

// Need: a host-network pod takes no pod IP, and no node's IPAM pool is a
// reason to keep it off.
func (ips) Need(pod *corev1.Pod) (int64, bool, error) { return 1, ipstats.TakesIP(pod), nil }

// Counted: a pod placed on the pod network after its node's sample was
// counted. Unlike ipstats.TakesIP it ignores the phase: a pod that turned
// terminal leaves the scheduler's cache through the deletion event, and
// stops counting only then.
func (ips) Counted(pod *corev1.Pod) bool { return !pod.Spec.HostNetwork }

// Sign: every pod on the pod network takes one IP, a host-network pod none.
func (ips) Sign(pod *corev1.Pod) fwk.SignFragment {
	return fwk.SignFragment{Key: hostNetworkSignerName, Value: pod.Spec.HostNetwork}
}
