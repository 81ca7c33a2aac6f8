package nodeagent

import (
	"context"
	"fmt"
	"math"
	"time"

	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/cniipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
)

// IPProbe publishes the pod-IP capacity and use of the node's CNI network
// (ipstats.NodeStats' three annotations), read by pkg/cniipam from the
// network configuration the container runtime uses and host-local's state.
//
// A network whose IPAM cannot be read (not host-local), or no network
// configuration at all, publishes nothing: the node's pod-IP headroom is
// unknown, not zero. That is logged once per distinct reason, not on every
// tick. Any other failure (an invalid configuration, unreadable state) is
// the probe's error: its annotations are left alone and age.
type IPProbe struct {
	ConfDir string
	// HysteresisPercent (of capacity) sets when a change of use is worth a
	// write; see ipSample.Changed.
	HysteresisPercent float64
	// MaxAge is how old an adopted sample may be (the max interval).
	MaxAge time.Duration
	// Read reads the network and its use; cniipam.Read unless a test
	// replaces it.
	Read func(confDir string) (*cniipam.Network, cniipam.Usage, error)

	unknownLogged string // the reason last logged for publishing nothing
}

// IPProbeName is the IPProbe's name in logs and metrics.
const IPProbeName = "ips"

// Name implements Probe.
func (p *IPProbe) Name() string { return IPProbeName }

// Sample implements Probe.
func (p *IPProbe) Sample(ctx context.Context, now time.Time) (Sample, error) {
	read := p.Read
	if read == nil {
		read = cniipam.Read
	}
	network, u, err := read(p.ConfDir)
	if cniipam.IsUnsupported(err) || cniipam.IsNoNetwork(err) {
		if msg := err.Error(); msg != p.unknownLogged {
			klog.FromContext(ctx).Info("Pod-IP headroom is unknown on this node; publishing no pod-IP figures", "reason", msg)
			p.unknownLogged = msg
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if p.unknownLogged != "" {
		klog.FromContext(ctx).Info("Pod-IP figures readable again", "network", network.Name, "file", network.File)
		p.unknownLogged = ""
	}
	// NewNodeStats clamps an IPv6 pool to ipstats.MaxCount, far above any
	// node's pod count.
	s := ipstats.NewNodeStats(u.Capacity, u.Used, now)
	klog.FromContext(ctx).V(5).Info("Read CNI IPAM state", "network", network.Name, "stateDir", network.StateDir,
		"capacity", s.Capacity, "used", s.Used, "rangeSets", u.RangeSets)
	return ipSample{stats: s, hysteresisPercent: p.HysteresisPercent}, nil
}

// Adopt implements Probe: the node's pod-IP annotations are adopted when
// they parse and are younger than MaxAge.
func (p *IPProbe) Adopt(annotations map[string]string, now time.Time) (Sample, error) {
	s, err := ipstats.ParseNode(annotations, now, p.MaxAge)
	if err != nil {
		return nil, err
	}
	return ipSample{stats: s, hysteresisPercent: p.HysteresisPercent}, nil
}

type ipSample struct {
	stats             ipstats.NodeStats
	hysteresisPercent float64
}

func (s ipSample) Annotations() map[string]string { return s.stats.Annotations() }
func (s ipSample) SampledAt() time.Time           { return s.stats.SampledAt }
func (s ipSample) String() string {
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
