package nodeagent

import (
	"context"
	"errors"
	"fmt"

	"github.com/headroom-k8s/headroom/pkg/ciliumipam"
)

// CiliumAgentSource gives the Cilium agent's own view of its IPAM
// (ciliumipam.AgentClient on its API socket).
type CiliumAgentSource interface {
	IPAM(ctx context.Context) (ciliumipam.AgentIPAM, error)
}

// ciliumUsage counts the CiliumNode's figures; where they cannot be told
// from the CiliumNode alone (cluster-pool and kubernetes modes, whose
// agent lists its allocations nowhere else), the agent on the node is
// asked, if the probe may ask it (--cilium-agent-socket). What fails there
// is an *UnsupportedError: the figures are unknown, with the reason.
func (p *IPProbe) ciliumUsage(ctx context.Context, obj map[string]any) (ciliumipam.Usage, error) {
	u, err := ciliumipam.FromObject(obj)
	if !errors.Is(err, ciliumipam.ErrUnsupported) || p.CiliumAgent == nil {
		return u, err
	}
	agent, aerr := p.CiliumAgent.IPAM(ctx)
	if aerr != nil {
		return u, &ciliumipam.UnsupportedError{Reason: fmt.Sprintf("%v; and the Cilium agent's own list cannot be read: %v", err, aerr)}
	}
	return ciliumipam.FromObjectWithAgent(obj, &agent)
}

// ciliumSource names the figures' source for the cross-check: the Cilium
// agent's own list, or the CiliumNode's status.
func ciliumSource(u ciliumipam.Usage) string {
	if u.FromAgent {
		return "cilium-agent"
	}
	return "cilium"
}

// ciliumSourcePods is the source's count of addresses held by pods: those
// whose owner (the agent's, or status.ipam.used's) names a pod; the
// router's and the health endpoint's are not pods'.
func ciliumSourcePods(u ciliumipam.Usage) int64 { return u.Pods }
