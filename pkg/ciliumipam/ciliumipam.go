// Package ciliumipam reads how many pod IPs Cilium's IPAM gives a node and
// how many it has handed out, from the node's CiliumNode (cilium.io/v2), as
// an unstructured object: Cilium's Go module stays out of the binaries that
// use it.
//
// The addresses a node can hand out are those its CiliumNode's spec.ipam
// gives it: the pool of individual addresses (spec.ipam.pool and
// spec.ipam.ipv6-pool, written by the operator in the crd, azure and
// alibabacloud modes), or else its pod CIDRs (spec.ipam.podCIDRs, the
// cluster-pool and kubernetes modes): the first of each family, the one
// Cilium's agent allocates from, less its first and last address, as
// Cilium's own host-scope allocator (pkg/ipam/service/ipallocator) counts
// them. The addresses in use are those of status.ipam.used and
// status.ipam.ipv6-used that lie in them. Every Cilium node holds at least
// its router's address (cilium_host), so a CiliumNode with addresses to
// hand out but nothing in use is one whose agent does not report its
// allocations there (cluster-pool and kubernetes modes keep them in the
// agent's memory as of Cilium v1.20; multi-pool and ENI multi-pool clear
// them): its figures are unknown, an *UnsupportedError, never zero —
// unless the agent's own list is given (FromObjectWithAgent: the agent's
// API, AgentClient), which then counts as the addresses in use.
//
// NodeWatch keeps the node's CiliumNode current with a watch of that one
// object, so that reading it often costs the API server nothing.
package ciliumipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CiliumNodes is the resource of Cilium's CiliumNode objects, cluster-scoped
// and named as the Kubernetes node.
var CiliumNodes = schema.GroupVersionResource{Group: "cilium.io", Version: "v2", Resource: "ciliumnodes"}

// CNIType is the type of Cilium's CNI plugin in a network configuration.
const CNIType = "cilium-cni"

// Modes, as Usage.Mode reports them.
const (
	// ModePool: spec.ipam.pool / ipv6-pool (crd, azure, alibabacloud).
	ModePool = "pool"
	// ModePodCIDRs: spec.ipam.podCIDRs (cluster-pool, kubernetes).
	ModePodCIDRs = "podCIDRs"
)

// MaxEntries bounds the addresses read from one CiliumNode's maps and the
// CIDRs of its list: far above any node's pods, small enough to bound the
// work of a malformed object.
const MaxEntries = 1 << 16

// ErrUnsupported is what every *UnsupportedError matches with errors.Is.
var ErrUnsupported = errors.New("Cilium IPAM state cannot be read from the CiliumNode")

// UnsupportedError says why a CiliumNode's figures cannot be told.
type UnsupportedError struct{ Reason string }

func (e *UnsupportedError) Error() string { return "CiliumNode: " + e.Reason }

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// FamilyUsage is one address family's figures.
type FamilyUsage struct {
	IPv6     bool
	Capacity int64
	Used     int64
	// Pods is, of Used, the addresses whose owner is a pod (IsPod).
	Pods int64
}

// Free is Capacity − Used.
func (f FamilyUsage) Free() int64 { return f.Capacity - f.Used }

// Usage is a node's Cilium IPAM figures: those of the family with the
// fewest free addresses (IPv4 on a tie), since a dual-stack pod takes one
// of each.
type Usage struct {
	Mode     string
	Capacity int64
	Used     int64
	Families []FamilyUsage
	// FromAgent: the addresses in use are the Cilium agent's own list
	// (FromObjectWithAgent), not the CiliumNode's status.
	FromAgent bool
	// Pods is, of Used, the addresses whose owner is a pod (IsPod): the
	// owner the agent names, or status.ipam.used's owner field.
	Pods int64
}

// ciliumNode is the part of a CiliumNode this package reads.
type ciliumNode struct {
	Spec struct {
		IPAM struct {
			Pool     map[string]json.RawMessage `json:"pool"`
			IPv6Pool map[string]json.RawMessage `json:"ipv6-pool"`
			PodCIDRs []string                   `json:"podCIDRs"`
		} `json:"ipam"`
	} `json:"spec"`
	Status struct {
		IPAM struct {
			Used     map[string]json.RawMessage `json:"used"`
			IPv6Used map[string]json.RawMessage `json:"ipv6-used"`
		} `json:"ipam"`
	} `json:"status"`
}

// FromObject reads the figures of a CiliumNode given as its unstructured
// content (what a dynamic client returns). A malformed object is an error
// naming the field; an object whose figures cannot be told is an
// *UnsupportedError.
func FromObject(obj map[string]any) (Usage, error) {
	return FromObjectWithAgent(obj, nil)
}

// FromObjectWithAgent is FromObject where the addresses in use of the pod
// CIDR modes (cluster-pool, kubernetes), which the CiliumNode does not
// list, are the Cilium agent's own (AgentIPAM); agent nil is FromObject.
// A CiliumNode that lists them is read as FromObject reads it.
func FromObjectWithAgent(obj map[string]any, agent *AgentIPAM) (Usage, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return Usage{}, fmt.Errorf("CiliumNode: %w", err)
	}
	return fromJSON(b, agent)
}

// FromJSON is FromObject for the object's JSON.
func FromJSON(b []byte) (Usage, error) { return fromJSON(b, nil) }

func fromJSON(b []byte, agent *AgentIPAM) (Usage, error) {
	var n ciliumNode
	if err := json.Unmarshal(b, &n); err != nil {
		return Usage{}, fmt.Errorf("CiliumNode: %w", err)
	}
	for name, m := range map[string]int{
		"spec.ipam.pool": len(n.Spec.IPAM.Pool), "spec.ipam.ipv6-pool": len(n.Spec.IPAM.IPv6Pool),
		"spec.ipam.podCIDRs": len(n.Spec.IPAM.PodCIDRs),
		"status.ipam.used":   len(n.Status.IPAM.Used), "status.ipam.ipv6-used": len(n.Status.IPAM.IPv6Used),
	} {
		if m > MaxEntries {
			return Usage{}, fmt.Errorf("CiliumNode: %s has %d entries, more than %d", name, m, MaxEntries)
		}
	}
	used, err := addrs("status.ipam.used", n.Status.IPAM.Used, n.Status.IPAM.IPv6Used)
	if err != nil {
		return Usage{}, err
	}
	owners := usedOwners(n.Status.IPAM.Used, n.Status.IPAM.IPv6Used)
	var u Usage
	if len(n.Spec.IPAM.Pool)+len(n.Spec.IPAM.IPv6Pool) > 0 {
		pool, err := addrs("spec.ipam.pool", n.Spec.IPAM.Pool, n.Spec.IPAM.IPv6Pool)
		if err != nil {
			return Usage{}, err
		}
		u.Mode = ModePool
		for _, v6 := range []bool{false, true} {
			f := FamilyUsage{IPv6: v6}
			for a := range pool {
				if a.Is6() == v6 {
					f.Capacity++
					if used[a] {
						f.Used++
						if IsPod(owners[a]) {
							f.Pods++
						}
					}
				}
			}
			if f.Capacity > 0 {
				u.Families = append(u.Families, f)
			}
		}
	} else if len(n.Spec.IPAM.PodCIDRs) > 0 {
		u.Mode = ModePodCIDRs
		if len(used) == 0 && agent != nil {
			u.FromAgent = true
			for _, a := range agent.Addrs {
				used[a] = true
			}
			owners = agent.Owners
		}
		prefixes := make([]netip.Prefix, 0, len(n.Spec.IPAM.PodCIDRs))
		for _, s := range n.Spec.IPAM.PodCIDRs {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				return Usage{}, fmt.Errorf("CiliumNode: spec.ipam.podCIDRs: %w", err)
			}
			prefixes = append(prefixes, p.Masked())
		}
		// Cilium's agent allocates from the node's allocation CIDR of each
		// family: the first pod CIDR of that family (its host-scope
		// allocator, one per family).
		for _, v6 := range []bool{false, true} {
			i := slices.IndexFunc(prefixes, func(p netip.Prefix) bool { return p.Addr().Is6() == v6 })
			if i < 0 {
				continue
			}
			p := prefixes[i]
			f := FamilyUsage{IPv6: v6, Capacity: math.MaxInt64}
			if size := hostScopeSize(p); size.IsInt64() {
				f.Capacity = size.Int64()
			}
			for a := range used {
				if inHostScope(p, a) {
					f.Used++
					if IsPod(owners[a]) {
						f.Pods++
					}
				}
			}
			u.Families = append(u.Families, f)
		}
	} else {
		return Usage{}, &UnsupportedError{Reason: "spec.ipam gives the node neither a pool nor podCIDRs (multi-pool or ENI multi-pool mode, or not yet allocated)"}
	}
	if len(used) == 0 {
		if u.FromAgent {
			return Usage{}, &UnsupportedError{Reason: fmt.Sprintf("spec.ipam (%s) gives the node addresses but neither status.ipam.used nor the Cilium agent (%q) lists any, not even the router's", u.Mode, agent.Status)}
		}
		return Usage{}, &UnsupportedError{Reason: fmt.Sprintf("spec.ipam (%s) gives the node addresses but status.ipam.used lists none, not even the router's: "+
			"the agent keeps its allocations elsewhere (cluster-pool and kubernetes modes)", u.Mode)}
	}
	for i, f := range u.Families {
		if i == 0 || f.Free() < u.Capacity-u.Used {
			u.Capacity, u.Used, u.Pods = f.Capacity, f.Used, f.Pods
		}
	}
	return u, nil
}

// usedOwners reads the owner of each address of status.ipam.used maps
// (Cilium's AllocationIP); an entry that is not one has none. The keys
// are parsed, and checked, by addrs.
func usedOwners(maps ...map[string]json.RawMessage) map[netip.Addr]string {
	owners := map[netip.Addr]string{}
	for _, m := range maps {
		for k, v := range m {
			var ip struct {
				Owner string `json:"owner"`
			}
			a, err := netip.ParseAddr(k)
			if err != nil || json.Unmarshal(v, &ip) != nil {
				continue
			}
			owners[a.Unmap()] = ip.Owner
		}
	}
	return owners
}

// addrs parses the keys of an IPv4 and an IPv6 allocation map.
func addrs(field string, maps ...map[string]json.RawMessage) (map[netip.Addr]bool, error) {
	set := map[netip.Addr]bool{}
	for _, m := range maps {
		for k := range m {
			a, err := netip.ParseAddr(k)
			if err != nil {
				return nil, fmt.Errorf("CiliumNode: %s: key %q is not an IP address", field, k)
			}
			set[a.Unmap()] = true
		}
	}
	return set, nil
}

// hostScopeSize is the number of addresses Cilium's host-scope allocator
// hands out of p: ipallocator.NewCIDRRange without options reserves the
// first and the last address of any prefix with more than two.
func hostScopeSize(p netip.Prefix) *big.Int {
	size := new(big.Int).Lsh(big.NewInt(1), uint(p.Addr().BitLen()-p.Bits()))
	if size.Cmp(big.NewInt(2)) > 0 {
		size.Sub(size, big.NewInt(2))
	}
	return size
}

// inHostScope reports whether a is one of the addresses the host-scope
// allocator hands out of p.
func inHostScope(p netip.Prefix, a netip.Addr) bool {
	if !p.Contains(a) {
		return false
	}
	if hostScopeSize(p).Cmp(big.NewInt(2)) <= 0 {
		return true
	}
	return a != p.Addr() && a != lastAddr(p)
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := range b {
		bit := i * 8
		switch {
		case bit >= p.Bits():
			b[i] = 0xff
		case bit+8 > p.Bits():
			b[i] |= byte(0xff >> (p.Bits() - bit))
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
