package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/awsipam"
	"github.com/headroom-k8s/headroom/pkg/calicoipam"
	"github.com/headroom-k8s/headroom/pkg/ciliumipam"
	"github.com/headroom-k8s/headroom/pkg/cniipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
)

// IPProbe publishes the pod-IP capacity and use of the node's CNI network
// (ipstats.NodeStats' annotations). The network is the first configuration
// of ConfDir (pkg/cniipam): with host-local IPAM, the figures are read from
// host-local's state, and, given Leaks, the allocations that belong to no
// pod sandbox are counted (and, opted in, released); with Cilium's CNI
// plugin, they are read from the node's CiliumNode (pkg/ciliumipam), kept
// by a watch that runs only while the network is Cilium's.
//
// A network whose IPAM cannot be read (another IPAM, a Cilium mode that does
// not publish its allocations), or no network configuration at all,
// publishes nothing: the node's pod-IP headroom is unknown, not zero. That
// is logged once per distinct reason, not on every tick; so is a leak count
// that cannot be told (no runtime to ask), which publishes the figures
// without ip-leaked. Any other failure (an invalid configuration,
// unreadable state) is the probe's error: its annotations are left alone
// and age.
type IPProbe struct {
	ConfDir string
	// HysteresisPercent (of capacity) sets when a change of use is worth a
	// write; see ipSample.Changed.
	HysteresisPercent float64
	// MaxAge is how old an adopted sample may be (the max interval).
	MaxAge time.Duration
	// Leaks finds (and may release) leaked host-local allocations; nil
	// publishes no leak count.
	Leaks *LeakFinder
	// CiliumNode gives the node's CiliumNode; nil when the agent cannot
	// read it.
	CiliumNode CiliumNodeSource
	// CiliumAgent is the Cilium agent's API, asked where the CiliumNode
	// does not list the addresses in use; nil not to ask.
	CiliumAgent CiliumAgentSource
	// Event records an Event on the Node; may be nil.
	Event func(ctx context.Context, eventType, reason, message string)
	// Metrics records the leak count and releases; may be nil.
	Metrics *Metrics
	// CrossCheck compares every source's figures with the node's pods;
	// nil for none.
	CrossCheck *PodIPCrossCheck
	// AWS reads the AWS VPC CNI's ipamd; AzureNNC gives the node's
	// NodeNetworkConfig and NodePods its pods (Azure CNI). nil for none.
	AWS      *awsipam.Reader
	AzureNNC CiliumNodeSource
	NodePods NodePodLister

	unknownLogged     string // the reason last logged for publishing nothing
	leakUnknownLogged string // the reason last logged for publishing no leak count
	leakedPublished   bool   // a leak count may be on the node: withdraw it when unknown
	eventedLeaked     int64  // the leak count of the last Event
}

// CiliumNodeSource gives the node's CiliumNode (ciliumipam.NodeWatch).
type CiliumNodeSource interface {
	// Get returns the object's unstructured content, not to be modified,
	// starting the watch that keeps it if that is not running:
	// ciliumipam.ErrNotSynced until the watch has listed it, a NotFound
	// error for a node without one.
	Get(ctx context.Context) (map[string]any, error)
	// Stop ends the watch: the network is not Cilium's.
	Stop()
}

// IPProbeName is the IPProbe's name in logs and metrics.
const IPProbeName = "ips"

// Name implements Probe.
func (p *IPProbe) Name() string { return IPProbeName }

// calicoCountedElsewhere is why the agent publishes no pod-IP figures on a
// calico-ipam network: a node's Calico figures are the cluster's (the
// pools' unclaimed blocks, other nodes' lendable addresses), and the only
// way to read them is a watch of every IPAMBlock, which one watch for the
// cluster serves instead of one per node (docs/performance.md).
const calicoCountedElsewhere = "the network's IPAM is " + calicoipam.IPAMType +
	": its pod-IP figures are counted for every node from one watch of Calico's objects by headroom-scheduler " +
	"(NodeIPs ipSource: CalicoIPAM, docs/cnis.md), not by each node's agent"

// maxLeaksInEvent bounds the addresses an Event names.
const maxLeaksInEvent = 5

// Sample implements Probe.
func (p *IPProbe) Sample(ctx context.Context, now time.Time) (Sample, error) {
	logger := klog.FromContext(ctx)
	network, err := cniipam.Load(p.ConfDir)
	var unsupported *cniipam.UnsupportedError
	if errors.As(err, &unsupported) && unsupported.Plugin == ciliumipam.CNIType && p.CiliumNode != nil {
		return p.sampleCilium(ctx, now)
	}
	if errors.As(err, &unsupported) && unsupported.IPAMType == calicoipam.IPAMType {
		p.unknown(ctx, calicoCountedElsewhere)
		return nil, nil
	}
	if s, ok, err := p.sampleCloud(ctx, unsupported, now); ok {
		return s, err
	}
	if err == nil || cniipam.IsUnsupported(err) || cniipam.IsNoNetwork(err) {
		// Another network, or none: no watch. An unreadable configuration
		// (one being rewritten) leaves it running.
		if p.CiliumNode != nil {
			p.CiliumNode.Stop()
		}
	}
	if cniipam.IsUnsupported(err) || cniipam.IsNoNetwork(err) {
		p.unknown(ctx, err.Error())
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	allocs, err := network.Allocations()
	if err != nil {
		return nil, err
	}
	p.known(ctx, "network", network.Name, "file", network.File)
	leaks, leakErr := p.findLeaks(ctx, network, allocs, now)
	if leakErr == nil {
		released, err := p.Leaks.reclaim(ctx, network, leaks, now)
		if err != nil {
			logger.Error(err, "Releasing leaked pod IPs failed", "network", network.Name)
		}
		for _, r := range released {
			p.released(ctx, network, r)
		}
		if len(released) > 0 {
			// Count what is left: released addresses are gone from the state.
			if allocs, err = network.Allocations(); err != nil {
				return nil, err
			}
		}
	}
	u := network.Count(allocs, func(a cniipam.Allocation) bool { _, ok := leaks[a.IP.String()]; return ok })
	// NewNodeStats clamps an IPv6 pool to ipstats.MaxCount, far above any
	// node's pod count.
	s := ipstats.NewNodeStats(u.Capacity, u.Used, now)
	if leakErr == nil {
		s = s.WithLeaked(u.Leaked)
		p.leakKnown(ctx, network, s.Leaked, leaks)
	} else {
		p.leakUnknown(ctx, leakErr)
	}
	s = p.crossCheck(ctx, "host-local", s, s.Used-s.Leaked, nil)
	logger.V(5).Info("Read CNI IPAM state", "network", network.Name, "stateDir", network.StateDir,
		"capacity", s.Capacity, "used", s.Used, "leaked", s.Leaked, "leakedKnown", s.LeakedKnown, "rangeSets", u.RangeSets)
	return p.sample(s), nil
}

// findLeaks returns the leaked allocations by address, or why they cannot
// be told.
func (p *IPProbe) findLeaks(ctx context.Context, n *cniipam.Network, allocs []cniipam.Allocation, now time.Time) (map[string]leak, error) {
	if p.Leaks == nil {
		return nil, errors.New("no container runtime to ask (--container-runtime-endpoint is empty)")
	}
	return p.Leaks.find(ctx, n, allocs, now)
}

// released logs, counts and records on the Node one release of leaked
// pod IPs.
func (p *IPProbe) released(ctx context.Context, n *cniipam.Network, r Release) {
	addrs := make([]string, len(r.IPs))
	for i, ip := range r.IPs {
		addrs[i] = ip.String()
	}
	klog.FromContext(ctx).Info("Released leaked pod IPs as host-local's DEL would", "network", n.Name, "containerID", r.ContainerID,
		"interface", r.IfName, "addresses", addrs, "allocatedAt", r.AllocatedAt, "leakedSince", r.LeakedSince)
	if p.Metrics != nil {
		p.Metrics.podIPsReleased.Inc()
	}
	if p.Event != nil {
		p.Event(ctx, corev1.EventTypeNormal, "ReleasedLeakedPodIPs", fmt.Sprintf(
			"Released pod IPs %s of network %s, allocated %s to container %s, which no pod sandbox of this node has been since %s",
			strings.Join(addrs, ", "), n.Name, r.AllocatedAt.UTC().Format(time.RFC3339), r.ContainerID, r.LeakedSince.UTC().Format(time.RFC3339)))
	}
}

func (p *IPProbe) sample(s ipstats.NodeStats) ipSample {
	if s.LeakedKnown {
		p.leakedPublished = true
	}
	return ipSample{stats: s, hysteresisPercent: p.HysteresisPercent, withdrawLeaked: !s.LeakedKnown && p.leakedPublished}
}

// sampleCilium reads the figures of the node's CiliumNode from the watch's
// cache. Until the watch has listed it they are unknown, without a log
// line: the next tick has them.
func (p *IPProbe) sampleCilium(ctx context.Context, now time.Time) (Sample, error) {
	obj, err := p.CiliumNode.Get(ctx)
	if errors.Is(err, ciliumipam.ErrNotSynced) {
		klog.FromContext(ctx).V(2).Info("Pod-IP figures not known yet", "reason", err)
		p.setLeakedMetric(math.NaN())
		return nil, nil
	}
	if apierrors.IsNotFound(err) || meta.IsNoMatchError(err) {
		p.unknown(ctx, fmt.Sprintf("the network's plugin is %s but the node has no CiliumNode: %v", ciliumipam.CNIType, err))
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the node's CiliumNode: %w", err)
	}
	u, err := p.ciliumUsage(ctx, obj)
	if errors.Is(err, ciliumipam.ErrUnsupported) {
		p.unknown(ctx, err.Error())
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p.known(ctx, "ipam", "cilium", "mode", u.Mode, "fromAgent", u.FromAgent)
	p.leakUnknown(ctx, errors.New("Cilium's IPAM: leaked addresses are not told"))
	// Only the addresses whose owner is a pod: Cilium's router
	// (cilium_host) and health addresses are in use, but not pods'.
	s := p.crossCheck(ctx, ciliumSource(u), ipstats.NewNodeStats(u.Capacity, u.Used, now), ciliumSourcePods(u), nil)
	klog.FromContext(ctx).V(5).Info("Read the CiliumNode's IPAM", "mode", u.Mode, "capacity", s.Capacity, "used", s.Used, "families", u.Families)
	return p.sample(s), nil
}

func (p *IPProbe) unknown(ctx context.Context, reason string) {
	if reason != p.unknownLogged {
		klog.FromContext(ctx).Info("Pod-IP headroom is unknown on this node; publishing no pod-IP figures", "reason", reason)
		p.unknownLogged = reason
	}
	p.setLeakedMetric(math.NaN())
}

func (p *IPProbe) known(ctx context.Context, kv ...any) {
	if p.unknownLogged != "" {
		klog.FromContext(ctx).Info("Pod-IP figures readable again", kv...)
		p.unknownLogged = ""
	}
}

func (p *IPProbe) leakUnknown(ctx context.Context, err error) {
	if msg := err.Error(); msg != p.leakUnknownLogged {
		klog.FromContext(ctx).Info("Leaked pod IPs cannot be told on this node; publishing no "+ipstats.AnnotationLeaked, "reason", msg)
		p.leakUnknownLogged = msg
	}
	p.setLeakedMetric(math.NaN())
}

func (p *IPProbe) setLeakedMetric(v float64) {
	if p.Metrics != nil {
		p.Metrics.podIPsLeaked.Set(v)
	}
}

// leakKnown logs the return of the leak count, sets its metric and records
// an Event on the Node when the count changed since the last one.
func (p *IPProbe) leakKnown(ctx context.Context, n *cniipam.Network, count int64, leaks map[string]leak) {
	if p.leakUnknownLogged != "" {
		klog.FromContext(ctx).Info("Leaked pod IPs can be told again", "network", n.Name)
		p.leakUnknownLogged = ""
	}
	p.setLeakedMetric(float64(count))
	if count == p.eventedLeaked {
		return
	}
	p.eventedLeaked = count
	if count == 0 {
		klog.FromContext(ctx).Info("No leaked pod IPs left", "network", n.Name)
		if p.Event != nil {
			p.Event(ctx, corev1.EventTypeNormal, "LeakedPodIPsGone", fmt.Sprintf("No pod IPs of network %s are leaked any more", n.Name))
		}
		return
	}
	keys := slices.Sorted(maps.Keys(leaks))
	var named []string
	for _, k := range keys[:min(len(keys), maxLeaksInEvent)] {
		named = append(named, fmt.Sprintf("%s (allocated %s)", k, leaks[k].ModTime.UTC().Format(time.RFC3339)))
	}
	if len(keys) > maxLeaksInEvent {
		named = append(named, fmt.Sprintf("and %d more", len(keys)-maxLeaksInEvent))
	}
	msg := fmt.Sprintf("%d pod IPs of network %s are allocated to no pod sandbox of this node; leaked addresses: %s", count, n.Name, strings.Join(named, ", "))
	klog.FromContext(ctx).Info("Leaked pod IPs", "network", n.Name, "count", count, "addresses", named)
	if p.Event != nil {
		p.Event(ctx, corev1.EventTypeWarning, "LeakedPodIPs", msg)
	}
}

// Adopt implements Probe: the node's pod-IP annotations are adopted when
// they parse and are younger than MaxAge.
func (p *IPProbe) Adopt(annotations map[string]string, now time.Time) (Sample, error) {
	s, err := ipstats.ParseNode(annotations, now, p.MaxAge)
	if err != nil {
		return nil, err
	}
	if s.LeakedKnown {
		p.leakedPublished = true
		p.eventedLeaked = s.Leaked // the count an earlier run reported
	}
	return ipSample{stats: s, hysteresisPercent: p.HysteresisPercent}, nil
}

type ipSample struct {
	stats             ipstats.NodeStats
	hysteresisPercent float64
	// withdrawLeaked removes an earlier leak count the sample cannot
	// confirm.
	withdrawLeaked bool
}

func (s ipSample) Annotations() map[string]string { return s.stats.Annotations() }

// Withdrawn implements Withdrawer.
func (s ipSample) Withdrawn() []string {
	if s.withdrawLeaked {
		return []string{ipstats.AnnotationLeaked}
	}
	return nil
}
func (s ipSample) SampledAt() time.Time { return s.stats.SampledAt }
func (s ipSample) String() string {
	if s.stats.LeakedKnown {
		return fmt.Sprintf("capacity=%d used=%d leaked=%d", s.stats.Capacity, s.stats.Used, s.stats.Leaked)
	}
	return fmt.Sprintf("capacity=%d used=%d", s.stats.Capacity, s.stats.Used)
}

// ipThreshold is the pod-IP hysteresis for a pool of capacity addresses:
// max(1, ⌈percent % of capacity⌉), e.g. 13 on a /24 at 5 %, 1 on a /28.
func ipThreshold(capacity int64, percent float64) int64 {
	pct := float64(max(capacity, 0)) * percent / 100
	if pct >= math.MaxInt64 { // converting an out-of-range float is undefined
		return math.MaxInt64
	}
	return max(1, int64(math.Ceil(pct)))
}

// Changed writes a change of capacity at once, and a change of use when it
// moved by at least the threshold (ipThreshold), or when the pool is near
// exhaustion: once the last written or the new free count is at or below
// the threshold, every change of use is written. Pod-IP pools are small
// (a /24 per node hands out 253), and near exhaustion each address decides
// whether the next pod starts; far from it, a move within the threshold
// cannot turn the scheduler's decision, since the estimate adds the pods
// placed since the sample and the published free count is above the
// threshold.
func (s ipSample) Changed(last Sample) (bool, string) {
	l, ok := last.(ipSample)
	switch {
	case !ok:
		return true, "no pod-IP sample written"
	case s.stats.Capacity != l.stats.Capacity:
		return true, fmt.Sprintf("pod-IP capacity changed from %d to %d", l.stats.Capacity, s.stats.Capacity)
	case s.stats.LeakedKnown != l.stats.LeakedKnown || s.stats.Leaked != l.stats.Leaked:
		return true, fmt.Sprintf("leaked pod IPs changed from %s to %s", leakedString(l.stats), leakedString(s.stats))
	case s.stats.Used == l.stats.Used:
		return false, ""
	}
	// Both are in [0, ipstats.MaxCount]: no overflow.
	delta := max(s.stats.Used-l.stats.Used, l.stats.Used-s.stats.Used)
	th := ipThreshold(s.stats.Capacity, s.hysteresisPercent)
	if delta >= th {
		return true, fmt.Sprintf("pod IPs used moved by %d, at least the hysteresis of %d", delta, th)
	}
	if min(s.stats.Free(), l.stats.Free()) <= th {
		return true, fmt.Sprintf("pod IPs used moved by %d near exhaustion (%d free, hysteresis %d)", delta, s.stats.Free(), th)
	}
	return false, ""
}

func leakedString(s ipstats.NodeStats) string {
	if !s.LeakedKnown {
		return "unknown"
	}
	return fmt.Sprint(s.Leaked)
}
