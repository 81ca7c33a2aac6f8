// Package cniipam reads how many pod IPs a node's CNI IPAM can hand out and
// how many it has handed out, from the network configuration the container
// runtime uses and the IPAM plugin's state on disk.
//
// The network is the first .conflist, .conf or .json file of the CNI
// configuration directory in lexical order, parsed with the CNI project's
// libcni as the runtime parses it. Its IPAM section is the first one among
// the network's plugins (a chained plugin's counts as well). Only the
// host-local IPAM plugin keeps state this package can read: its range sets
// are loaded and canonicalised with host-local's own code, and its
// allocations are the files <dataDir>/<network name>/<IP> that host-local
// writes. Any other IPAM (calico-ipam, a cloud provider's, one built at run
// time by a delegating plugin such as flannel) is reported as an
// *UnsupportedError: its headroom is unknown, not zero.
package cniipam

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
)

// DefaultConfDir is where container runtimes look for CNI network
// configurations unless told otherwise.
const DefaultConfDir = "/etc/cni/net.d"

// DefaultDataDir is where host-local keeps its allocations when the
// configuration names no dataDir.
const DefaultDataDir = "/var/lib/cni/networks"

// HostLocal is the type of the IPAM plugin whose state this package reads.
const HostLocal = "host-local"

// confExtensions are the file name extensions container runtimes load.
var confExtensions = []string{".conflist", ".conf", ".json"}

// ErrUnsupported is what every *UnsupportedError matches with errors.Is.
var ErrUnsupported = errors.New("IPAM state cannot be read")

// ErrNoNetwork means the configuration directory is missing or holds no
// network configuration: the container runtime has no pod network (yet),
// or the directory is not where the reader looks (not mounted).
var ErrNoNetwork = errors.New("no CNI network configuration")

// IsNoNetwork reports whether err is, or wraps, ErrNoNetwork.
func IsNoNetwork(err error) bool { return errors.Is(err, ErrNoNetwork) }

// UnsupportedError reports a network whose IPAM this package cannot read:
// another IPAM type than host-local, or no IPAM section at all (the plugin
// allocates addresses its own way).
type UnsupportedError struct {
	// File is the network configuration file.
	File string
	// Network is the network's name.
	Network string
	// IPAMType is the type of the network's first IPAM section, "" when no
	// plugin of the network has one.
	IPAMType string
}

func (e *UnsupportedError) Error() string {
	if e.IPAMType == "" {
		return fmt.Sprintf("%s: network %q has no IPAM section; only %s IPAM state can be read", e.File, e.Network, HostLocal)
	}
	return fmt.Sprintf("%s: network %q uses IPAM type %q; only %s IPAM state can be read", e.File, e.Network, e.IPAMType, HostLocal)
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// IsUnsupported reports whether err is, or wraps, an *UnsupportedError.
func IsUnsupported(err error) bool { return errors.Is(err, ErrUnsupported) }

// Network is a network whose IPAM is host-local.
type Network struct {
	// File is the configuration file the network was read from.
	File string
	// Name is the network's name, which host-local names its state
	// directory after.
	Name string
	// Plugin is the type of the plugin that carries the IPAM section.
	Plugin string
	// StateDir is where host-local records the network's allocations:
	// <dataDir>/<Name>.
	StateDir string
	// RangeSets are the network's range sets, canonicalised by host-local:
	// every add takes one address from each.
	RangeSets []allocator.RangeSet
}

// Load reads the network the container runtime uses from confDir. It
// returns an *UnsupportedError when that network's IPAM is not host-local,
// an error wrapping ErrNoNetwork and naming the directory when there is no
// network, and an error naming the file when its configuration is invalid.
func Load(confDir string) (*Network, error) {
	files, err := libcni.ConfFiles(confDir, confExtensions)
	if err != nil {
		return nil, fmt.Errorf("reading CNI configuration directory %s: %w", confDir, err)
	}
	if len(files) == 0 {
		// libcni.ConfFiles reports a missing directory as empty.
		if _, err := os.Stat(confDir); err != nil {
			return nil, fmt.Errorf("%w: reading CNI configuration directory: %w", ErrNoNetwork, err)
		}
		return nil, fmt.Errorf("%w (%v) in %s", ErrNoNetwork, confExtensions, confDir)
	}
	slices.Sort(files)
	return loadFile(files[0])
}

func loadFile(file string) (*Network, error) {
	var list *libcni.NetworkConfigList
	var err error
	if filepath.Ext(file) == ".conflist" {
		list, err = libcni.ConfListFromFile(file)
	} else {
		var conf *libcni.NetworkConfig
		if conf, err = libcni.ConfFromFile(file); err == nil {
			list, err = libcni.ConfListFromConf(conf)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("CNI network configuration %s: %w", file, err)
	}
	for _, p := range list.Plugins {
		if p.Network.IPAM.Type == "" {
			continue
		}
		if p.Network.IPAM.Type != HostLocal {
			return nil, &UnsupportedError{File: file, Network: list.Name, IPAMType: p.Network.IPAM.Type}
		}
		return hostLocal(file, list, p)
	}
	return nil, &UnsupportedError{File: file, Network: list.Name}
}

// hostLocal loads the plugin's IPAM section the way host-local does when
// the runtime invokes it: the plugin's configuration with the list's name
// and version injected.
func hostLocal(file string, list *libcni.NetworkConfigList, p *libcni.PluginConfig) (*Network, error) {
	p, err := libcni.InjectConf(p, map[string]any{"name": list.Name, "cniVersion": list.CNIVersion})
	if err != nil {
		return nil, fmt.Errorf("CNI network configuration %s: plugin %s: %w", file, p.Network.Type, err)
	}
	ipam, _, err := allocator.LoadIPAMConfig(p.Bytes, "")
	if err != nil {
		return nil, fmt.Errorf("CNI network configuration %s: plugin %s: host-local IPAM: %w", file, p.Network.Type, err)
	}
	dataDir := ipam.DataDir
	if dataDir == "" {
		dataDir = DefaultDataDir
	}
	return &Network{
		File:      file,
		Name:      list.Name,
		Plugin:    p.Network.Type,
		StateDir:  filepath.Join(dataDir, list.Name),
		RangeSets: ipam.Ranges,
	}, nil
}

// RangeSetUsage is the state of one range set.
type RangeSetUsage struct {
	// RangeSet is host-local's description of the set, e.g.
	// "10.244.1.1-10.244.1.254" (the gateway .1 is skipped).
	RangeSet string
	// IPv6 is the set's address family.
	IPv6 bool
	// Capacity is the number of addresses host-local hands out from the set:
	// those from rangeStart to rangeEnd of each range (by default the subnet
	// without its network address and, for IPv4, its broadcast address), less
	// each range's gateway. It saturates at math.MaxInt64 (IPv6 ranges).
	Capacity int64
	// Used is the number of those addresses allocated: state files, leaked
	// ones included.
	Used int64
}

// Free is Capacity − Used.
func (r RangeSetUsage) Free() int64 { return r.Capacity - r.Used }

// Usage is the state of a network's IPAM.
type Usage struct {
	// Capacity and Used are those of the range set with the fewest free
	// addresses (the first of them on a tie): every pod takes one address
	// of each set, so that set runs out first. With one set per family (dual
	// stack) this is the family with the fewest free.
	Capacity int64
	Used     int64
	// RangeSets are all of the network's range sets, in configuration order.
	RangeSets []RangeSetUsage
}

// Usage counts the network's capacity and its allocations in StateDir. A
// missing state directory means nothing was allocated yet (host-local makes
// it on its first add). Files that are not addresses (host-local's lock and
// last_reserved_ip.* files) and addresses outside the range sets (left from
// an earlier configuration) do not count.
func (n *Network) Usage() (Usage, error) {
	allocated, err := allocations(n.StateDir)
	if err != nil {
		return Usage{}, err
	}
	u := Usage{RangeSets: make([]RangeSetUsage, 0, len(n.RangeSets))}
	for i := range n.RangeSets {
		rs := &n.RangeSets[i]
		r := RangeSetUsage{RangeSet: rs.String(), IPv6: (*rs)[0].RangeStart.To4() == nil, Capacity: capacity(*rs)}
		for _, addr := range allocated {
			if rng, err := rs.RangeFor(addr); err == nil && !addr.Equal(rng.Gateway) {
				r.Used++
			}
		}
		if len(u.RangeSets) == 0 || r.Free() < u.Capacity-u.Used {
			u.Capacity, u.Used = r.Capacity, r.Used
		}
		u.RangeSets = append(u.RangeSets, r)
	}
	return u, nil
}

// Read is Load followed by Usage: the figures of the network the runtime
// uses, with the network for the caller's log.
func Read(confDir string) (*Network, Usage, error) {
	n, err := Load(confDir)
	if err != nil {
		return nil, Usage{}, err
	}
	u, err := n.Usage()
	return n, u, err
}

// allocations lists the addresses host-local recorded in dir.
func allocations(dir string) ([]net.IP, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading host-local state: %w", err)
	}
	var ips []net.IP
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		if addr := net.ParseIP(e.Name()); addr != nil {
			ips = append(ips, addr)
		}
	}
	return ips, nil
}

// capacity counts the addresses host-local's iterator yields from the set:
// every address from RangeStart to RangeEnd of each range, except the
// range's gateway.
func capacity(rs allocator.RangeSet) int64 {
	total := new(big.Int)
	for i := range rs {
		r := &rs[i]
		n := new(big.Int).Sub(new(big.Int).SetBytes(r.RangeEnd.To16()), new(big.Int).SetBytes(r.RangeStart.To16()))
		n.Add(n, big.NewInt(1))
		if n.Sign() <= 0 {
			continue // rangeEnd before rangeStart: host-local hands out nothing there
		}
		if r.Gateway != nil && r.Contains(r.Gateway) {
			n.Sub(n, big.NewInt(1))
		}
		total.Add(total, n)
	}
	if !total.IsInt64() {
		return math.MaxInt64
	}
	return total.Int64()
}
