package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/awsipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
)

// AWSIPAMDConfig is where the AWS VPC CNI's ipamd serves on the node.
type AWSIPAMDConfig struct {
	// IntrospectionAddress (/v1/enis) and MetricsAddress (/metrics) are
	// host:port; the agent runs on the host's network.
	IntrospectionAddress, MetricsAddress string
	// Cooldown is ipamd's IP_COOLDOWN_PERIOD.
	Cooldown time.Duration
}

// DefaultAWSIPAMDConfig is ipamd's defaults.
func DefaultAWSIPAMDConfig() AWSIPAMDConfig {
	return AWSIPAMDConfig{IntrospectionAddress: awsipam.DefaultIntrospectionAddress, MetricsAddress: awsipam.DefaultMetricsAddress,
		Cooldown: awsipam.DefaultCooldown}
}

// Validate reports the first unusable setting.
func (c AWSIPAMDConfig) Validate() error {
	switch {
	case c.IntrospectionAddress == "":
		return errors.New("--aws-ipamd-introspection-address is empty")
	case c.MetricsAddress == "":
		return errors.New("--aws-ipamd-metrics-address is empty")
	case c.Cooldown < 0:
		return fmt.Errorf("--aws-ip-cooldown-period %s is negative", c.Cooldown)
	}
	return nil
}

// AWSBranchENIAnnotation is what the VPC resource controller puts on a pod
// given a branch ENI (security groups for pods): its address is the
// branch ENI's, not one of ipamd's pool.
const AWSBranchENIAnnotation = "vpc.amazonaws.com/pod-eni"

// awsPoolPod tells whether a pod's address comes from ipamd's pool.
func awsPoolPod(p *corev1.Pod) bool {
	_, branch := p.Annotations[AWSBranchENIAnnotation]
	return !branch
}

// sampleAWS reads the figures of the node's ipamd.
func (p *IPProbe) sampleAWS(ctx context.Context, now time.Time) (Sample, error) {
	u, err := p.AWS.Read(ctx, now)
	if errors.Is(err, awsipam.ErrNoLimits) {
		p.unknown(ctx, "the network's plugin is "+awsipam.CNIType+" but "+err.Error()+": how far the pool can grow is unknown")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the AWS VPC CNI's ipamd: %w", err)
	}
	p.known(ctx, "ipam", "aws-vpc-cni")
	p.leakUnknown(ctx, errors.New("the AWS VPC CNI's IPAM: leaked addresses are not told"))
	s := p.crossCheck(ctx, "aws-vpc-cni", ipstats.NewNodeStats(u.Capacity, u.Used, now), u.PodsAssigned, awsPoolPod)
	klog.FromContext(ctx).V(5).Info("Read ipamd's pool", "capacity", s.Capacity, "used", s.Used, "assigned", u.Pool.Assigned,
		"cooling", u.Pool.Cooling, "attached", u.Pool.Attached, "poolENIs", len(u.Pool.PoolENIs), "maxENIs", u.Limits.MaxENIs,
		"ipsPerENI", u.Limits.IPsPerENI, "prefixDelegation", u.Pool.PrefixDelegation, "subnetFull", u.SubnetFull)
	return p.sample(s), nil
}

// newAWSReader is the ipamd reader of cfg.
func newAWSReader(cfg AWSIPAMDConfig, timeout time.Duration) *awsipam.Reader {
	return &awsipam.Reader{IntrospectionAddress: cfg.IntrospectionAddress, MetricsAddress: cfg.MetricsAddress,
		Cooldown: cfg.Cooldown, SubnetFullFor: awsipam.DefaultSubnetFullFor, Client: &http.Client{Timeout: timeout}}
}
