package ciliumipam

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// DefaultAgentSocket is where Cilium's agent serves its API on the node
// (Cilium's defaults.SockPath).
const DefaultAgentSocket = "/var/run/cilium/cilium.sock"

// AgentIPAM is the Cilium agent's own view of its IPAM, the "ipam" section
// of its status (GET /v1/healthz, what `cilium-dbg status` shows; Cilium's
// models.StatusResponse.Ipam, an IPAMStatus): in cluster-pool and
// kubernetes modes the agent keeps its allocations in memory and writes
// them nowhere else.
type AgentIPAM struct {
	// Addrs are the addresses the agent has allocated, both families.
	Addrs []netip.Addr
	// Owners holds each address's owner ("router", "health", or the pod's
	// "<namespace>/<name>"), "" where the agent tells none.
	Owners map[netip.Addr]string
	// Status is the agent's summary, e.g. "IPv4: 5/254 allocated from
	// 10.0.1.0/24, ".
	Status string
}

// IsPod tells whether an owner is a pod's: Cilium's CNI plugin names the
// owner "<namespace>/<pod>"; the router's and the health endpoint's
// addresses have owners without a slash.
func IsPod(owner string) bool { return strings.Contains(owner, "/") }

// ParseAgentStatus reads the ipam section of the agent's status JSON. An
// address a non-default pool holds is listed "<pool>/<address>"; the pool
// name is dropped. A status without an ipam section is an
// *UnsupportedError (an agent whose IPAM has not started).
func ParseAgentStatus(b []byte) (AgentIPAM, error) {
	var sr struct {
		IPAM *struct {
			Allocations map[string]string `json:"allocations"`
			IPv4        []string          `json:"ipv4"`
			IPv6        []string          `json:"ipv6"`
			Status      string            `json:"status"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(b, &sr); err != nil {
		return AgentIPAM{}, fmt.Errorf("Cilium agent status: %w", err)
	}
	if sr.IPAM == nil {
		return AgentIPAM{}, &UnsupportedError{Reason: "the Cilium agent's status has no ipam section"}
	}
	if n := len(sr.IPAM.IPv4) + len(sr.IPAM.IPv6) + len(sr.IPAM.Allocations); n > 3*MaxEntries {
		return AgentIPAM{}, fmt.Errorf("Cilium agent status: ipam lists %d entries, more than %d", n, 3*MaxEntries)
	}
	parse := func(field, s string) (netip.Addr, error) {
		if i := strings.LastIndexByte(s, '/'); i >= 0 {
			s = s[i+1:]
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Addr{}, fmt.Errorf("Cilium agent status: %s: %q is not an IP address", field, s)
		}
		return a.Unmap(), nil
	}
	out := AgentIPAM{Owners: map[netip.Addr]string{}, Status: sr.IPAM.Status}
	for k, owner := range sr.IPAM.Allocations {
		a, err := parse("ipam.allocations", k)
		if err != nil {
			return AgentIPAM{}, err
		}
		out.Owners[a] = owner
	}
	seen := map[netip.Addr]bool{}
	for _, l := range []struct {
		field string
		addrs []string
	}{{"ipam.ipv4", sr.IPAM.IPv4}, {"ipam.ipv6", sr.IPAM.IPv6}} {
		for _, s := range l.addrs {
			a, err := parse(l.field, s)
			if err != nil {
				return AgentIPAM{}, err
			}
			if !seen[a] {
				seen[a] = true
				out.Addrs = append(out.Addrs, a)
			}
		}
	}
	return out, nil
}

// AgentClient asks the Cilium agent on the node for its IPAM over its API
// socket. Safe for concurrent use.
type AgentClient struct {
	Socket  string
	Timeout time.Duration
	client  *http.Client
}

// NewAgentClient returns a client of the agent API at socket.
func NewAgentClient(socket string, timeout time.Duration) *AgentClient {
	dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socket)
	}
	return &AgentClient{Socket: socket, Timeout: timeout,
		client: &http.Client{Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}, Timeout: timeout}}
}

// maxStatusBytes bounds the agent's answer: a full status of a node with
// a few hundred endpoints is some tens of KiB.
const maxStatusBytes = 8 << 20

// IPAM reads the agent's IPAM: GET /v1/healthz with the headers brief:
// false (brief omits the ipam section) and require-k8s-connectivity: false
// (an agent cut from the API server still knows its allocations).
func (c *AgentClient) IPAM(ctx context.Context) (AgentIPAM, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost/v1/healthz", nil)
	if err != nil {
		return AgentIPAM{}, err
	}
	req.Header.Set("brief", "false")
	req.Header.Set("require-k8s-connectivity", "false")
	req.Header.Set("Accept", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return AgentIPAM{}, fmt.Errorf("asking the Cilium agent at %s: %w", c.Socket, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxStatusBytes+1))
	if err != nil {
		return AgentIPAM{}, fmt.Errorf("reading the Cilium agent's status: %w", err)
	}
	if len(body) > maxStatusBytes {
		return AgentIPAM{}, fmt.Errorf("the Cilium agent's status is larger than %d bytes", maxStatusBytes)
	}
	if resp.StatusCode != http.StatusOK {
		return AgentIPAM{}, fmt.Errorf("the Cilium agent at %s answered %s", c.Socket, resp.Status)
	}
	return ParseAgentStatus(body)
}
