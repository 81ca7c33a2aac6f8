package nodeagent

import (
	"context"
	"time"

	"github.com/headroom-k8s/headroom/pkg/awsipam"
	"github.com/headroom-k8s/headroom/pkg/azureipam"
	"github.com/headroom-k8s/headroom/pkg/cniipam"
)

// sampleCloud samples the AWS VPC CNI's or Azure CNI's pool when the
// network is theirs (ok), and stops the NodeNetworkConfig's watch when it
// is not Azure's.
func (p *IPProbe) sampleCloud(ctx context.Context, unsupported *cniipam.UnsupportedError, now time.Time) (s Sample, ok bool, err error) {
	azure := unsupported != nil && unsupported.Plugin == azureipam.CNIType && unsupported.IPAMType == azureipam.CNSIPAMType
	if !azure && p.AzureNNC != nil {
		p.AzureNNC.Stop()
	}
	switch {
	case unsupported == nil:
		return nil, false, nil
	case unsupported.Plugin == awsipam.CNIType && p.AWS != nil:
		s, err := p.sampleAWS(ctx, now)
		return s, true, err
	case azure && p.AzureNNC != nil && p.NodePods != nil:
		s, err := p.sampleAzure(ctx, now)
		return s, true, err
	}
	return nil, false, nil
}

// cloudIPSources gives the pod-IP probe the AWS VPC CNI's and Azure CNI's
// sources: ipamd is asked only when the network is aws-cni's, the
// NodeNetworkConfig watched only while it is Azure's.
func (a *Agent) cloudIPSources(p *IPProbe) {
	p.AWS = newAWSReader(a.cfg.AWSIPAMD, a.cfg.RequestTimeout)
	p.NodePods = a.nodePods
	if a.dynamic != nil {
		a.azureNNC = newAzureNNCWatch(a.dynamic, a.cfg.AzureNNC, a.cfg.NodeName)
		p.AzureNNC = a.azureNNC
	}
}
