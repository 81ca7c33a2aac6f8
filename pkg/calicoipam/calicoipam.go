// Package calicoipam counts the pod IPs Calico's IPAM (calico-ipam) can
// still give a node and those it has given, from Calico's objects in the
// API server (group crd.projectcalico.org/v1, the Kubernetes datastore):
// IPAMBlocks, IPPools and the IPAMConfig. They are read as unstructured
// objects with types of this package's own: Calico's Go API module is not
// served by the Go module proxy.
//
// Calico hands a node addresses out of blocks (a /26 by default) it claims
// from an IPPool; a block "affine" to the node has spec.affinity
// "host:<node>". For one address family, the node's figures are:
//
//   - used: the addresses allocated (non-null spec.allocations) in its
//     affine blocks, plus those it borrowed from other nodes' blocks (an
//     allocation whose attributes name the node);
//   - free, what it can still reach: the unallocated addresses
//     (spec.unallocated) of its affine blocks in enabled pools for
//     workloads; plus the blocks it may still claim (if the IPAMConfig's
//     autoAllocateBlocks is on: the blocks of the pools selecting it that no
//     node holds, at most maxBlocksPerHost less the blocks it holds); plus,
//     when strictAffinity is false, the unallocated addresses of other
//     nodes' blocks, which Calico lends when the node cannot claim a block
//     (Calico's autoAssign borrows whatever the cause);
//   - capacity = used + free.
//
// The claimable blocks and the borrowable addresses are shared by every
// node: each node counts them all, since a pod placed on any one of them
// would get one. That overstates the headroom of the cluster as a whole, but
// never the headroom of one node, so NodeIPs' Filter keeps a pod off a node
// only when Calico could not give it an address there.
//
// With dual stack (the CNI configuration's assign_ipv6) the published
// figures are those of the family with the fewest free.
package calicoipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The resources of Calico's Kubernetes datastore this package reads, all
// cluster-scoped.
var (
	IPAMBlocks  = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "ipamblocks"}
	IPPools     = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "ippools"}
	IPAMConfigs = schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: "ipamconfigs"}
)

// IPAMType is the type of Calico's IPAM plugin in a network configuration.
const IPAMType = "calico-ipam"

// IPAMConfigName is the name of the one IPAMConfig Calico reads.
const IPAMConfigName = "default"

// MaxCount bounds every figure (saturating): 2^24, ipstats.MaxCount, far
// above any node's pods. It keeps the arithmetic on IPv6 pools (a /48 of
// /122 blocks is 2^74 blocks) from overflowing.
const MaxCount = 1 << 24

// maxBlockAddresses bounds a block's spec.allocations: Calico's blocks are
// a /26 (IPv4) or /122 (IPv6) by default, and never larger than a /20 or a
// /116 (the IPPool's blockSize range).
const maxBlockAddresses = 1 << 12

// ErrUnsupported is what every *UnsupportedError matches with errors.Is.
var ErrUnsupported = errors.New("Calico IPAM figures cannot be told")

// UnsupportedError says why a node's figures cannot be told.
type UnsupportedError struct{ Reason string }

func (e *UnsupportedError) Error() string { return "Calico IPAM: " + e.Reason }

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// Block is what counts of one IPAMBlock, for every node.
type Block struct {
	Name     string
	CIDR     netip.Prefix
	Affinity string // spec.affinity, "" for none
	Deleted  bool
	// Allocated and Unallocated are the block's allocated addresses and
	// the length of spec.unallocated.
	Allocated, Unallocated int64
	// Pods is, of Allocated, the addresses allocated to a pod (attributes
	// naming a pod; a node's tunnel address names none).
	Pods int64
	// Lent is, of Allocated, the addresses held by nodes the block is not
	// affine to (spec.attributes[].secondary.node), by node; nil when none.
	Lent map[string]Held
}

// Held is what one node holds of a block it borrowed from.
type Held struct {
	// Addresses allocated to the node; Pods, of them, those of its pods.
	Addresses, Pods int64
}

// Owner is the node the block is affine to ("host:<node>"), "" for none.
func (b Block) Owner() string {
	node, _ := strings.CutPrefix(b.Affinity, "host:")
	if node == b.Affinity {
		return ""
	}
	return node
}

// AffineTo reports whether the block is the node's.
func (b Block) AffineTo(node string) bool { return b.Affinity == "host:"+node }

type ipamBlock struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		CIDR        string  `json:"cidr"`
		Affinity    *string `json:"affinity"`
		Allocations []*int  `json:"allocations"`
		Unallocated []int   `json:"unallocated"`
		Attributes  []struct {
			Secondary map[string]string `json:"secondary"`
		} `json:"attributes"`
		Deleted bool `json:"deleted"`
	} `json:"spec"`
}

// ParseBlock reads an IPAMBlock's JSON: an error names the field that is
// malformed.
func ParseBlock(b []byte) (Block, error) {
	var o ipamBlock
	if err := json.Unmarshal(b, &o); err != nil {
		return Block{}, fmt.Errorf("IPAMBlock: %w", err)
	}
	name := o.Metadata.Name
	p, err := netip.ParsePrefix(o.Spec.CIDR)
	if err != nil {
		return Block{}, fmt.Errorf("IPAMBlock %s: spec.cidr: %w", name, err)
	}
	bits := p.Addr().BitLen() - p.Bits()
	if bits > 12 {
		return Block{}, fmt.Errorf("IPAMBlock %s: spec.cidr %s holds more than %d addresses", name, p, maxBlockAddresses)
	}
	size := 1 << bits
	if len(o.Spec.Allocations) != size {
		return Block{}, fmt.Errorf("IPAMBlock %s: spec.allocations has %d entries, want %d, one per address of %s", name, len(o.Spec.Allocations), size, p)
	}
	if len(o.Spec.Unallocated) > size {
		return Block{}, fmt.Errorf("IPAMBlock %s: spec.unallocated has %d entries, more than the %d addresses of %s", name, len(o.Spec.Unallocated), size, p)
	}
	blk := Block{Name: name, CIDR: p.Masked(), Deleted: o.Spec.Deleted, Unallocated: int64(len(o.Spec.Unallocated))}
	if o.Spec.Affinity != nil {
		blk.Affinity = *o.Spec.Affinity
	}
	for i, a := range o.Spec.Allocations {
		if a == nil {
			continue
		}
		blk.Allocated++
		if *a < 0 || *a >= len(o.Spec.Attributes) {
			return Block{}, fmt.Errorf("IPAMBlock %s: spec.allocations[%d] = %d, not an index of spec.attributes (%d entries)", name, i, *a, len(o.Spec.Attributes))
		}
		attrs := o.Spec.Attributes[*a].Secondary
		pod := attrs["pod"] != ""
		if pod {
			blk.Pods++
		}
		if node := attrs["node"]; node != "" && !blk.AffineTo(node) {
			if blk.Lent == nil {
				blk.Lent = map[string]Held{}
			}
			h := blk.Lent[node]
			h.Addresses++
			if pod {
				h.Pods++
			}
			blk.Lent[node] = h
		}
	}
	if blk.Allocated+blk.Unallocated > int64(size) {
		return Block{}, fmt.Errorf("IPAMBlock %s: %d allocated and %d unallocated (spec.unallocated) addresses, more than the %d of %s", name, blk.Allocated, blk.Unallocated, size, p)
	}
	return blk, nil
}

// Pool is what counts of one IPPool.
type Pool struct {
	Name      string
	CIDR      netip.Prefix
	BlockBits int // spec.blockSize, the blocks' prefix length
	// Workload: its addresses are pods' (spec.allowedUses).
	Workload bool
	// Usable: enabled, for workloads, assigned automatically, and
	// selecting every node (the only selector read: all()).
	Usable bool
	// Why the pool is not usable, for logs.
	NotUsable string
}

type ipPool struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		CIDR           string   `json:"cidr"`
		BlockSize      int      `json:"blockSize"`
		Disabled       bool     `json:"disabled"`
		NodeSelector   string   `json:"nodeSelector"`
		AllowedUses    []string `json:"allowedUses"`
		AssignmentMode string   `json:"assignmentMode"`
	} `json:"spec"`
}

// ParsePool reads an IPPool's JSON. A pool whose nodeSelector is another
// than all() is an *UnsupportedError: which nodes Calico's selector
// language picks is not evaluated here.
func ParsePool(b []byte) (Pool, error) {
	var o ipPool
	if err := json.Unmarshal(b, &o); err != nil {
		return Pool{}, fmt.Errorf("IPPool: %w", err)
	}
	name := o.Metadata.Name
	p, err := netip.ParsePrefix(o.Spec.CIDR)
	if err != nil {
		return Pool{}, fmt.Errorf("IPPool %s: spec.cidr: %w", name, err)
	}
	p = p.Masked()
	bs := o.Spec.BlockSize
	if bs == 0 { // Calico's defaults
		bs = 26
		if p.Addr().Is6() {
			bs = 122
		}
	}
	if bs < p.Bits() || bs > p.Addr().BitLen() {
		return Pool{}, fmt.Errorf("IPPool %s: spec.blockSize %d is not within %s (a prefix length from %d to %d)", name, bs, p, p.Bits(), p.Addr().BitLen())
	}
	if p.Addr().BitLen()-bs > 12 {
		return Pool{}, fmt.Errorf("IPPool %s: spec.blockSize %d makes blocks of more than %d addresses", name, bs, maxBlockAddresses)
	}
	workload := len(o.Spec.AllowedUses) == 0 // Calico's default: Workload and Tunnel
	for _, u := range o.Spec.AllowedUses {
		workload = workload || u == "Workload"
	}
	pool := Pool{Name: name, CIDR: p, BlockBits: bs, Workload: workload, Usable: true}
	switch sel := strings.TrimSpace(o.Spec.NodeSelector); {
	case o.Spec.Disabled:
		pool.Usable, pool.NotUsable = false, "disabled"
	case !workload:
		pool.Usable, pool.NotUsable = false, "not for workloads (spec.allowedUses)"
	case o.Spec.AssignmentMode == "Manual":
		pool.Usable, pool.NotUsable = false, "assigned only on request (spec.assignmentMode: Manual)"
	case sel != "" && sel != "all()":
		return Pool{}, &UnsupportedError{Reason: fmt.Sprintf("IPPool %s: spec.nodeSelector %q: only all() is evaluated", name, sel)}
	}
	return pool, nil
}

// Config is the IPAMConfig's settings, with Calico's defaults where there
// is none.
type Config struct {
	StrictAffinity     bool
	AutoAllocateBlocks bool
	MaxBlocksPerHost   int64 // 0: no limit
}

// DefaultConfig is what Calico uses without an IPAMConfig.
var DefaultConfig = Config{AutoAllocateBlocks: true}

// ParseConfig reads the IPAMConfig's JSON.
func ParseConfig(b []byte) (Config, error) {
	var o struct {
		Spec struct {
			StrictAffinity     bool  `json:"strictAffinity"`
			AutoAllocateBlocks *bool `json:"autoAllocateBlocks"`
			MaxBlocksPerHost   int64 `json:"maxBlocksPerHost"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return Config{}, fmt.Errorf("IPAMConfig: %w", err)
	}
	if o.Spec.MaxBlocksPerHost < 0 {
		return Config{}, fmt.Errorf("IPAMConfig: spec.maxBlocksPerHost %d is negative", o.Spec.MaxBlocksPerHost)
	}
	c := Config{StrictAffinity: o.Spec.StrictAffinity, AutoAllocateBlocks: true, MaxBlocksPerHost: o.Spec.MaxBlocksPerHost}
	if o.Spec.AutoAllocateBlocks != nil {
		c.AutoAllocateBlocks = *o.Spec.AutoAllocateBlocks
	}
	return c, nil
}

// FamilyUsage is one address family's figures, broken down.
type FamilyUsage struct {
	IPv6 bool
	// Used: allocated in the node's blocks, and borrowed; Pods: of them,
	// those allocated to pods.
	Used, Borrowed, Pods int64
	// Free in the node's blocks, in blocks it may claim, and in others'
	// blocks it may borrow from.
	FreeInBlocks, Claimable, Borrowable int64
	Blocks                              int64 // the node's blocks
}

// Free is what the node can still reach.
func (f FamilyUsage) Free() int64 {
	return min(f.FreeInBlocks+f.Claimable+f.Borrowable, MaxCount)
}

// Capacity is Used + Free.
func (f FamilyUsage) Capacity() int64 { return min(f.Used+f.Free(), MaxCount) }

// Usage is a node's figures: those of the family with the fewest free.
type Usage struct {
	Capacity, Used int64
	// Pods is, of Used, the addresses allocated to pods (Calico's
	// attributes name the pod).
	Pods     int64
	Families []FamilyUsage
}

// Families says which families the node's pods take an address of: the
// CNI configuration's assign_ipv4 (default true) and assign_ipv6 (default
// false).
type Families struct{ IPv4, IPv6 bool }

// Cluster is every node's figures at once, from every IPAMBlock, every
// IPPool and the IPAMConfig: what one watch of the cluster's objects
// serves to every node (Summarize once per change, Usage per node).
type Cluster struct {
	cfg   Config
	pools []Pool
	fams  [2]clusterFamily // IPv4, IPv6
}

// clusterFamily is one address family's part of a Cluster. Its sums are
// plain int64: each term is at most a block's 4,096 addresses, so no sum
// over blocks held in memory comes near overflow; Usage saturates them at
// MaxCount.
type clusterFamily struct {
	// nodes holds each node's own figures: Used, Borrowed, Pods,
	// FreeInBlocks and Blocks.
	nodes map[string]*FamilyUsage
	// lendable is the unallocated addresses of every usable block;
	// ownLendable, of them, those in each node's own blocks.
	lendable    int64
	ownLendable map[string]int64
	inPool      []int64 // existing blocks per pool
	seen        bool    // a block or a usable pool of the family
}

func famIndex(v6 bool) int {
	if v6 {
		return 1
	}
	return 0
}

// Summarize sums the blocks by node and family, for Usage. Pools are taken
// in the order given (Calico picks them in no set order: sort them for
// stable figures when maxBlocksPerHost splits the claimable blocks).
func Summarize(blocks []Block, pools []Pool, cfg Config) *Cluster {
	c := &Cluster{cfg: cfg, pools: pools}
	for i := range c.fams {
		c.fams[i] = clusterFamily{nodes: map[string]*FamilyUsage{}, ownLendable: map[string]int64{}, inPool: make([]int64, len(pools))}
	}
	for _, p := range pools {
		if p.Usable {
			c.fams[famIndex(p.CIDR.Addr().Is6())].seen = true
		}
	}
	nodeOf := func(f *clusterFamily, node string) *FamilyUsage {
		u := f.nodes[node]
		if u == nil {
			u = &FamilyUsage{}
			f.nodes[node] = u
		}
		return u
	}
	for _, b := range blocks {
		f := &c.fams[famIndex(b.CIDR.Addr().Is6())]
		pool := poolOf(pools, b.CIDR)
		if pool >= 0 {
			f.inPool[pool]++
		}
		if pool >= 0 && !pools[pool].Workload {
			continue // tunnel or load-balancer addresses: not pods'
		}
		f.seen = true
		usable := pool >= 0 && pools[pool].Usable && !b.Deleted
		if owner := b.Owner(); owner != "" {
			u := nodeOf(f, owner)
			u.Blocks++
			u.Used += b.Allocated
			u.Pods += b.Pods
			if usable {
				u.FreeInBlocks += b.Unallocated
				f.ownLendable[owner] += b.Unallocated
			}
		}
		for node, h := range b.Lent {
			u := nodeOf(f, node)
			u.Used += h.Addresses
			u.Borrowed += h.Addresses
			u.Pods += h.Pods
		}
		if usable {
			f.lendable += b.Unallocated
		}
	}
	return c
}

// poolOf is the index of the pool holding p, or -1.
func poolOf(pools []Pool, p netip.Prefix) int {
	for i := range pools {
		if pools[i].CIDR.Contains(p.Addr()) && pools[i].CIDR.Bits() <= p.Bits() {
			return i
		}
	}
	return -1
}

// Usage is node's figures with the families its pods take an address of.
// A node the cluster's objects do not name counts what it could still
// claim and borrow.
func (c *Cluster) Usage(node string, fams Families) (Usage, error) {
	var u Usage
	for _, v6 := range []bool{false, true} {
		if (v6 && !fams.IPv6) || (!v6 && !fams.IPv4) {
			continue
		}
		f := c.family(node, v6)
		if f.Used == 0 && f.Free() == 0 {
			// Neither a block nor a usable pool of this family.
			continue
		}
		u.Families = append(u.Families, f)
	}
	if len(u.Families) == 0 {
		return Usage{}, &UnsupportedError{Reason: fmt.Sprintf("node %s has no block and no usable IPPool of the families it assigns (IPv4 %t, IPv6 %t)", node, fams.IPv4, fams.IPv6)}
	}
	for i, f := range u.Families {
		if i == 0 || f.Free() < u.Capacity-u.Used {
			u.Capacity, u.Used, u.Pods = f.Capacity(), f.Used, f.Pods
		}
	}
	return u, nil
}

// Families is the families of which the cluster has a block for pods or a
// usable pool: those its pods take an address of, where no network
// configuration tells (Calico's operator assigns a family exactly when it
// has a pool of it).
func (c *Cluster) Families() Families {
	return Families{IPv4: c.fams[0].seen, IPv6: c.fams[1].seen}
}

func (c *Cluster) family(node string, v6 bool) FamilyUsage {
	cf := &c.fams[famIndex(v6)]
	var f FamilyUsage
	if own := cf.nodes[node]; own != nil {
		f = *own
	}
	f.IPv6 = v6
	f.Used, f.Borrowed, f.Pods, f.FreeInBlocks = sat(f.Used), sat(f.Borrowed), sat(f.Pods), sat(f.FreeInBlocks)
	if !c.cfg.StrictAffinity {
		f.Borrowable = sat(cf.lendable - cf.ownLendable[node])
	}
	if !c.cfg.AutoAllocateBlocks {
		return f
	}
	quota := int64(MaxCount)
	if c.cfg.MaxBlocksPerHost > 0 {
		quota = max(0, c.cfg.MaxBlocksPerHost-f.Blocks)
	}
	for i, p := range c.pools {
		if !p.Usable || p.CIDR.Addr().Is6() != v6 || quota == 0 {
			continue
		}
		free := max(0, pow2(p.BlockBits-p.CIDR.Bits())-cf.inPool[i])
		take := min(free, quota)
		quota -= take
		f.Claimable = sat(f.Claimable + sat(take*pow2(p.CIDR.Addr().BitLen()-p.BlockBits)))
	}
	return f
}

// Count computes node's figures from every IPAMBlock, every IPPool and the
// IPAMConfig: Summarize and Usage for one node.
func Count(node string, fams Families, blocks []Block, pools []Pool, cfg Config) (Usage, error) {
	return Summarize(blocks, pools, cfg).Usage(node, fams)
}

// pow2 is 2^n, saturated at MaxCount.
func pow2(n int) int64 {
	if n >= 24 {
		return MaxCount
	}
	return 1 << max(n, 0)
}

// sat clamps a figure at MaxCount; its terms are bounded (see clusterFamily)
// so that the sum is below 2^63.
func sat(v int64) int64 { return min(v, MaxCount) }

// ParseFamilies reads the families a calico-ipam section assigns:
// assign_ipv4 (default "true") and assign_ipv6 (default "false"), strings
// as Calico's CNI plugin takes them.
func ParseFamilies(ipam []byte) (Families, error) {
	var o struct {
		AssignIPv4 *string `json:"assign_ipv4"`
		AssignIPv6 *string `json:"assign_ipv6"`
	}
	if err := json.Unmarshal(ipam, &o); err != nil {
		return Families{}, fmt.Errorf("calico-ipam configuration: %w", err)
	}
	f := Families{IPv4: true}
	for _, s := range []struct {
		field string
		v     *string
		into  *bool
	}{{"assign_ipv4", o.AssignIPv4, &f.IPv4}, {"assign_ipv6", o.AssignIPv6, &f.IPv6}} {
		if s.v == nil {
			continue
		}
		switch *s.v {
		case "true":
			*s.into = true
		case "false":
			*s.into = false
		default:
			return Families{}, fmt.Errorf("calico-ipam configuration: %s is %q, want \"true\" or \"false\"", s.field, *s.v)
		}
	}
	return f, nil
}
