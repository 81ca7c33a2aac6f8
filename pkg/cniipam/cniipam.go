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
//
// Each allocation's owner (the container ID host-local wrote into its state
// file) can be read, and a leaked one released exactly as host-local's DEL
// does, with host-local's own store and lock, only while it is still the
// allocation that was seen (Network.ReleaseIfUnchanged).
package cniipam

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/allocator"
	"github.com/containernetworking/plugins/plugins/ipam/host-local/backend/disk"
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
	// Plugin is the type of the network's first plugin (e.g. cilium-cni,
	// whose agent allocates the addresses).
	Plugin string
	// Chained is the type of a chained plugin whose host-local IPAM
	// section was skipped: its range is that plugin's own (aws-cni's
	// egress-cni), never the pods'.
	Chained string
}

func (e *UnsupportedError) Error() string {
	if e.Chained != "" {
		return fmt.Sprintf("%s: network %q: its first plugin %q has no IPAM section, and the %s range of the chained plugin %q is that plugin's own, not the pods'", e.File, e.Network, e.Plugin, HostLocal, e.Chained)
	}
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
	// <DataDir>/<Name>.
	StateDir string
	// DataDir is host-local's dataDir: the configuration's, or
	// DefaultDataDir.
	DataDir string
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

// ReadConfList reads a network configuration file as libcni does: a
// .conflist as a list, any other as a single plugin's configuration made a
// list of one.
func ReadConfList(file string) (*libcni.NetworkConfigList, error) {
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
	return list, nil
}

func loadFile(file string) (*Network, error) {
	list, err := ReadConfList(file)
	if err != nil {
		return nil, err
	}
	var first string
	if len(list.Plugins) > 0 {
		first = list.Plugins[0].Network.Type
	}
	for i, p := range list.Plugins {
		if p.Network.IPAM.Type == "" {
			continue
		}
		if i > 0 && p.Network.IPAM.Type == HostLocal {
			return nil, &UnsupportedError{File: file, Network: list.Name, Plugin: first, Chained: p.Network.Type}
		}
		if p.Network.IPAM.Type != HostLocal {
			return nil, &UnsupportedError{File: file, Network: list.Name, IPAMType: p.Network.IPAM.Type, Plugin: first}
		}
		return hostLocal(file, list, p)
	}
	return nil, &UnsupportedError{File: file, Network: list.Name, Plugin: first}
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
		DataDir:   dataDir,
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
	// Leaked is, of Used, the allocations Count was told are leaked.
	Leaked int64
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
	// Leaked is that set's Leaked.
	Leaked int64
	// RangeSets are all of the network's range sets, in configuration order.
	RangeSets []RangeSetUsage
}

// Usage counts the network's capacity and its allocations in StateDir. A
// missing state directory means nothing was allocated yet (host-local makes
// it on its first add). Files that are not addresses (host-local's lock and
// last_reserved_ip.* files) and addresses outside the range sets (left from
// an earlier configuration) do not count.
func (n *Network) Usage() (Usage, error) {
	allocs, err := n.Allocations()
	if err != nil {
		return Usage{}, err
	}
	return n.Count(allocs, nil), nil
}

// Count is the usage of the range sets by allocs (from Allocations), with
// the allocations for which leaked returns true counted as leaked as well
// as used; a nil leaked counts none.
func (n *Network) Count(allocs []Allocation, leaked func(Allocation) bool) Usage {
	u := Usage{RangeSets: make([]RangeSetUsage, 0, len(n.RangeSets))}
	for i := range n.RangeSets {
		rs := &n.RangeSets[i]
		r := RangeSetUsage{RangeSet: rs.String(), IPv6: (*rs)[0].RangeStart.To4() == nil, Capacity: capacity(*rs)}
		for _, a := range allocs {
			if rng, err := rs.RangeFor(a.IP); err == nil && !a.IP.Equal(rng.Gateway) {
				r.Used++
				if leaked != nil && leaked(a) {
					r.Leaked++
				}
			}
		}
		if len(u.RangeSets) == 0 || r.Free() < u.Capacity-u.Used {
			u.Capacity, u.Used, u.Leaked = r.Capacity, r.Used, r.Leaked
		}
		u.RangeSets = append(u.RangeSets, r)
	}
	return u
}

// Allocation is one address host-local recorded: a file <StateDir>/<IP>.
type Allocation struct {
	IP net.IP
	// ModTime is the file's modification time: when host-local reserved
	// the address (it writes the file once, on ADD).
	ModTime time.Time
	// Inode is the file's inode number. With ModTime it tells this
	// allocation from a later one of the same address: host-local's ADD
	// creates a new file (O_EXCL), DEL removes it.
	Inode uint64
}

// Same reports whether a and b are one allocation: the same address
// recorded by the same ADD.
func (a Allocation) Same(b Allocation) bool {
	return a.IP.Equal(b.IP) && a.ModTime.Equal(b.ModTime) && a.Inode == b.Inode
}

func allocation(ip net.IP, info fs.FileInfo) Allocation {
	a := Allocation{IP: ip, ModTime: info.ModTime()}
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		a.Inode = st.Ino
	}
	return a
}

// Allocations lists the addresses recorded in StateDir, in file name
// order. Only the directory is read (listing and stat), not the files,
// which host-local makes readable by root alone. A missing state directory
// has none.
func (n *Network) Allocations() ([]Allocation, error) {
	entries, err := os.ReadDir(n.StateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading host-local state: %w", err)
	}
	var allocs []Allocation
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		addr := net.ParseIP(e.Name())
		if addr == nil {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // released since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("reading host-local state: %w", err)
		}
		allocs = append(allocs, allocation(addr, info))
	}
	return allocs, nil
}

// Stat returns ip's allocation as it is now, or ErrReleased when it is
// gone.
func (n *Network) Stat(ip net.IP) (Allocation, error) {
	file := filepath.Join(n.StateDir, ip.String())
	info, err := os.Stat(file)
	if errors.Is(err, fs.ErrNotExist) {
		return Allocation{}, fmt.Errorf("%s: %w", file, ErrReleased)
	}
	if err != nil {
		return Allocation{}, fmt.Errorf("reading host-local state: %w", err)
	}
	return allocation(ip, info), nil
}

// maxStateFile bounds what Owner reads of a state file: host-local writes
// a container ID (64 hex digits for containerd and CRI-O), CRLF and an
// interface name (at most 15 bytes on Linux).
const maxStateFile = 1 << 10

// ErrReleased means an allocation's state file is gone: the address was
// released since it was listed.
var ErrReleased = errors.New("allocation released")

// Owner reads whom host-local allocated ip to: the container ID and
// interface name the state file holds (host-local writes
// "<container ID>\r\n<interface>"; before CNI plugins v0.8 only the ID, then
// ifName is empty). A missing file is ErrReleased; a file too large or
// without a container ID is an error naming it.
func (n *Network) Owner(ip net.IP) (containerID, ifName string, err error) {
	file := filepath.Join(n.StateDir, ip.String())
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return "", "", fmt.Errorf("%s: %w", file, ErrReleased)
	}
	if err != nil {
		return "", "", fmt.Errorf("reading host-local state: %w", err)
	}
	defer f.Close()
	buf := make([]byte, maxStateFile+1)
	k, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", "", fmt.Errorf("reading host-local state %s: %w", file, err)
	}
	if k > maxStateFile {
		return "", "", fmt.Errorf("host-local state %s is larger than %d bytes: not an allocation", file, maxStateFile)
	}
	containerID, ifName, _ = strings.Cut(string(buf[:k]), disk.LineBreak)
	containerID, ifName = strings.TrimSpace(containerID), strings.TrimSpace(ifName)
	if containerID == "" || strings.ContainsFunc(containerID+ifName, unicode.IsSpace) {
		return "", "", fmt.Errorf("host-local state %s names no container: %q", file, buf[:min(k, 80)])
	}
	return containerID, ifName, nil
}

// ErrChanged means an allocation's state file is no longer the one that
// was seen, or no longer names the container it named: the address was
// released and allocated again since.
var ErrChanged = errors.New("allocation changed")

// ReleaseIfUnchanged frees the addresses allocated to containerID on ifName
// exactly as host-local's DEL does, with its own store, but only if alloc
// is still there as it was seen, and still names containerID and ifName.
// Both are checked under host-local's lock, which every ADD and DEL of the
// network takes, and the release follows under the same lock: no ADD can
// take the address between the check and the release. It returns the
// addresses released (every range set's, as DEL frees them), or an error
// matching ErrReleased or ErrChanged, having released nothing, when alloc
// is gone or is another allocation now. Its state directory must be
// writable.
func (n *Network) ReleaseIfUnchanged(alloc Allocation, containerID, ifName string) ([]net.IP, error) {
	store, err := disk.New(n.Name, n.DataDir)
	if err != nil {
		return nil, fmt.Errorf("opening host-local state of network %s: %w", n.Name, err)
	}
	defer store.Close()
	if err := store.Lock(); err != nil {
		return nil, fmt.Errorf("locking host-local state of network %s: %w", n.Name, err)
	}
	defer store.Unlock()
	now, err := n.Stat(alloc.IP)
	if err != nil {
		return nil, err
	}
	if !now.Same(alloc) {
		return nil, fmt.Errorf("%s: written again since it was seen (modified %s, inode %d; seen %s, inode %d): %w",
			filepath.Join(n.StateDir, alloc.IP.String()), now.ModTime.UTC().Format(time.RFC3339Nano), now.Inode,
			alloc.ModTime.UTC().Format(time.RFC3339Nano), alloc.Inode, ErrChanged)
	}
	id, iface, err := n.Owner(alloc.IP)
	if err != nil {
		return nil, err
	}
	if id != containerID || iface != ifName {
		return nil, fmt.Errorf("%s: allocated to container %s (%s) now, not %s (%s): %w",
			filepath.Join(n.StateDir, alloc.IP.String()), id, iface, containerID, ifName, ErrChanged)
	}
	ips := store.GetByID(containerID, ifName)
	if err := store.ReleaseByID(containerID, ifName); err != nil {
		return nil, fmt.Errorf("releasing the pod IPs of container %s: %w", containerID, err)
	}
	return ips, nil
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
