// Package awsipam reads how many pod IPs the AWS VPC CNI can give a node and
// how many it has handed out, from its IPAM daemon (ipamd) on the node:
// the introspection endpoint's /v1/enis (its datastore: the ENIs, their
// addresses or prefixes, which are assigned and when they were released)
// and, for how far the pool can grow, ipamd's own Prometheus metrics
// (awscni_eni_max, awscni_ip_max: the instance type's ENI and per-ENI
// address limits as ipamd applies them, MAX_ENI and unmanaged ENIs
// included; awscni_aws_api_error_count with the EC2 error codes ipamd
// treats as an exhausted subnet). The JSON is read with types of this
// package's own: the CNI's Go module stays out of the binaries.
//
// What is counted, and why, is in docs/cnis.md ("AWS VPC CNI").
package awsipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"time"
)

// CNIType is the type of the AWS VPC CNI's plugin in a network
// configuration.
const CNIType = "aws-cni"

// Defaults of ipamd (INTROSPECTION_BIND_ADDRESS, its metrics port 61678)
// and of its IP_COOLDOWN_PERIOD.
const (
	DefaultIntrospectionAddress = "127.0.0.1:61679"
	DefaultMetricsAddress       = "127.0.0.1:61678"
	DefaultCooldown             = 30 * time.Second
	// DefaultSubnetFullFor is how long an exhausted-subnet error of ipamd
	// counts: ipamd waits 2 minutes (insufficientCidrErrorCooldown) before
	// it asks EC2 again, and a minute more covers its pool loop.
	DefaultSubnetFullFor = 3 * time.Minute
)

// SubnetFullCodes are the EC2 error codes ipamd takes for a subnet out of
// addresses or prefixes (containsInsufficientCIDRsOrSubnetIPs).
var SubnetFullCodes = []string{"InsufficientFreeAddressesInSubnet", "InsufficientCidrBlocks"}

// MaxEntries bounds the ENIs, CIDRs and addresses read from one answer:
// far above any instance's (the largest have some 100 ENIs of 50
// addresses), small enough to bound the work of a malformed one.
const MaxEntries = 1 << 16

// maxCount is ipstats.MaxCount: figures are clamped to it.
const maxCount = 1 << 24

// eniInfos is ipamd's datastore.ENIInfos as /v1/enis encodes it.
type eniInfos struct {
	TotalIPs    int
	AssignedIPs int
	ENIs        map[string]eni
}

type eni struct {
	ID                  string
	IsPrimary           bool
	IsTrunk             bool
	IsEFA               bool
	DeviceNumber        int
	AvailableIPv4Cidrs  map[string]cidrInfo
	IPv6Cidrs           map[string]cidrInfo
	IsExcludedForPodIPs bool
}

type cidrInfo struct {
	IPAddresses map[string]addressInfo
	IsPrefix    bool
}

type addressInfo struct {
	Address string
	IPAMKey struct {
		NetworkName string `json:"networkName"`
		ContainerID string `json:"containerID"`
		IfName      string `json:"ifName"`
	}
	UnassignedTime time.Time
}

// assigned is ipamd's own test (the IPAMKey is not zero); /v1/enis clears
// ContainerID and IfName but keeps NetworkName.
func (a addressInfo) assigned() bool {
	return a.IPAMKey.NetworkName != "" || a.IPAMKey.ContainerID != "" || a.IPAMKey.IfName != ""
}

// Pool is what /v1/enis says of the node's pod-IP pool.
type Pool struct {
	// IPv6 is true in IPv6 mode (IPv6 prefixes, no IPv4 pool).
	IPv6 bool
	// PrefixDelegation is true when the pool is made of prefixes.
	PrefixDelegation bool
	// Attached is the addresses of the pool's CIDRs: secondary addresses,
	// or every address of the attached prefixes.
	Attached int64
	// Assigned is the addresses assigned to pods, Cooling those released
	// less than the cooldown ago, which ipamd does not hand out yet.
	Assigned, Cooling int64
	// PoolENIs are the ENIs whose addresses the pool holds, with the
	// addresses each holds; TrunkENIs and ExcludedENIs those it does not
	// (the trunk serves pods with branch ENIs; ENIs tagged
	// node.k8s.amazonaws.com/no_manage or excluded for pods).
	PoolENIs                []int64
	TrunkENIs, ExcludedENIs int
	// ReportedAssigned is ipamd's own count of assigned addresses.
	ReportedAssigned int64
}

// ParseENIs reads a /v1/enis answer at now: an object of ENIInfos per
// network card (ipamd since v1.20), or one ENIInfos (before). Addresses
// released less than cooldown before now count as cooling. A malformed
// answer is an error naming the field.
func ParseENIs(b []byte, now time.Time, cooldown time.Duration) (Pool, error) {
	var cards map[string]json.RawMessage
	if err := json.Unmarshal(b, &cards); err != nil {
		return Pool{}, fmt.Errorf("ipamd /v1/enis: %w", err)
	}
	var infos []eniInfos
	if _, single := cards["ENIs"]; single {
		var one eniInfos
		if err := json.Unmarshal(b, &one); err != nil {
			return Pool{}, fmt.Errorf("ipamd /v1/enis: %w", err)
		}
		infos = append(infos, one)
	} else {
		if len(cards) > MaxEntries {
			return Pool{}, fmt.Errorf("ipamd /v1/enis: %d network cards, more than %d", len(cards), MaxEntries)
		}
		for card, raw := range cards {
			var one eniInfos
			if err := json.Unmarshal(raw, &one); err != nil {
				return Pool{}, fmt.Errorf("ipamd /v1/enis: network card %q: %w", card, err)
			}
			infos = append(infos, one)
		}
	}
	var p Pool
	entries := 0
	var v4, v6 bool
	for _, info := range infos {
		p.ReportedAssigned += int64(max(info.AssignedIPs, 0))
		for id, e := range info.ENIs {
			if len(e.AvailableIPv4Cidrs) > 0 {
				v4 = true
			}
			if len(e.IPv6Cidrs) > 0 {
				v6 = true
			}
			entries += 1 + len(e.AvailableIPv4Cidrs) + len(e.IPv6Cidrs)
			for _, c := range e.AvailableIPv4Cidrs {
				entries += len(c.IPAddresses)
			}
			for _, c := range e.IPv6Cidrs {
				entries += len(c.IPAddresses)
			}
			if entries > MaxEntries {
				return Pool{}, fmt.Errorf("ipamd /v1/enis: more than %d ENIs, CIDRs and addresses", MaxEntries)
			}
			if e.IsTrunk {
				p.TrunkENIs++
				continue
			}
			if e.IsExcludedForPodIPs {
				p.ExcludedENIs++
				continue
			}
			var onENI int64
			for _, cidrs := range []map[string]cidrInfo{e.AvailableIPv4Cidrs, e.IPv6Cidrs} {
				for key, c := range cidrs {
					prefix, err := netip.ParsePrefix(key)
					if err != nil {
						return Pool{}, fmt.Errorf("ipamd /v1/enis: ENI %s: CIDR %q: %w", id, key, err)
					}
					if c.IsPrefix {
						p.PrefixDelegation = true
					}
					onENI = satAdd(onENI, prefixSize(prefix))
					for addr, a := range c.IPAddresses {
						if _, err := netip.ParseAddr(addr); err != nil {
							return Pool{}, fmt.Errorf("ipamd /v1/enis: ENI %s: CIDR %s: address %q: %w", id, key, addr, err)
						}
						switch {
						case a.assigned():
							p.Assigned++
						case !a.UnassignedTime.IsZero() && now.Sub(a.UnassignedTime) <= cooldown:
							p.Cooling++
						}
					}
				}
			}
			p.PoolENIs = append(p.PoolENIs, onENI)
			p.Attached = satAdd(p.Attached, onENI)
		}
	}
	p.IPv6 = v6 && !v4
	return p, nil
}

// prefixSize is the number of addresses of p, saturated at maxCount.
func prefixSize(p netip.Prefix) int64 {
	hostBits := p.Addr().BitLen() - p.Bits()
	if hostBits >= 24 {
		return maxCount
	}
	return 1 << hostBits
}

func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Limits are how far ipamd may grow the pool, from its metrics.
type Limits struct {
	// MaxENIs is awscni_eni_max: the ENIs ipamd may attach (the instance
	// type's limit or MAX_ENI, less unmanaged ENIs).
	MaxENIs int64
	// IPsPerENI is awscni_ip_max / awscni_eni_max: the pod addresses one
	// ENI can hold (the instance type's per-ENI limit less the ENI's
	// primary address; with prefix delegation, that many /28 prefixes of
	// 16).
	IPsPerENI int64
	// SubnetFullErrors is the sum of awscni_aws_api_error_count over
	// SubnetFullCodes since ipamd started.
	SubnetFullErrors float64
}

// ErrNoLimits is what ParseMetrics returns when ipamd has not published
// its limits (yet): how far the pool can grow is unknown.
var ErrNoLimits = errors.New("ipamd's metrics carry no awscni_eni_max and awscni_ip_max")

// Usage is the node's figures.
type Usage struct {
	Capacity, Used int64
	// PodsAssigned is the addresses assigned to pods (the cross-check's
	// figure); Used adds the cooling ones.
	PodsAssigned int64
	// SubnetFull is true when ipamd met an exhausted subnet within
	// DefaultSubnetFullFor: the pool cannot grow.
	SubnetFull bool
	Pool       Pool
	Limits     Limits
}

// Figures computes the node's figures from its pool and limits.
//
// Capacity is what the pool can reach: every pool ENI filled to its limit
// (an ENI never holds fewer than it has) plus the ENIs ipamd may still
// attach (MaxENIs less the pool's, the trunk's and the excluded ones),
// each filled; or, with subnetFull, only what is attached. The warm-pool
// settings (WARM_ENI_TARGET, WARM_IP_TARGET, MINIMUM_IP_TARGET) decide
// when ipamd attaches more, not how many it can: they change nothing
// here. In IPv6 mode each ENI's /80 prefix gives more addresses than any
// node runs pods: capacity is the attached prefixes' size (clamped).
//
// Used is assigned + cooling: a cooling address is handed to no pod for
// IP_COOLDOWN_PERIOD, so on a pool that cannot grow it keeps a new pod
// waiting as an assigned one does.
func Figures(p Pool, l Limits, subnetFull bool) Usage {
	u := Usage{Pool: p, Limits: l, SubnetFull: subnetFull, PodsAssigned: p.Assigned}
	u.Used = min(p.Assigned+p.Cooling, maxCount)
	capacity := p.Attached
	if !p.IPv6 && !subnetFull && l.IPsPerENI > 0 {
		capacity = 0
		for _, n := range p.PoolENIs {
			capacity = satAdd(capacity, max(n, l.IPsPerENI))
		}
		if more := l.MaxENIs - int64(len(p.PoolENIs)+p.TrunkENIs+p.ExcludedENIs); more > 0 {
			if more > maxCount/l.IPsPerENI {
				capacity = maxCount
			} else {
				capacity = satAdd(capacity, more*l.IPsPerENI)
			}
		}
	}
	u.Capacity = min(max(capacity, u.Used), maxCount)
	return u
}
