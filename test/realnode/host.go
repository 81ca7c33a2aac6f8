package realnode

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// hostState records what a real node changed on the host, in
// <node dir>/host.json, so that Stop — or Teardown, from another process —
// puts it all back. What the nodes of one cluster change together (host
// paths, sysctls) is the machine's part, in <cluster dir>/real-nodes.json,
// put back when the last of them stops.
type hostState struct {
	Dir        string `json:"dir"`
	CgroupName string `json:"cgroupName"`
	Cgroups    cgroups
	CNIBinDir  string `json:"cniBinDir"`
	// Slot numbers the node among the cluster's real nodes: its bridge,
	// network and default pod range.
	Slot    int    `json:"slot"`
	Network string `json:"network"`
	Bridge  string `json:"bridge"`
	// ConfDir is the node's CNI configuration directory, a directory of
	// its own below /etc/cni/net.d.
	ConfDir string `json:"confDir"`
}

// machineState is what a cluster's real nodes changed on the host
// together, recorded by the first before any kubelet ran.
type machineState struct {
	// Created are paths that did not exist before, removed in reverse.
	Created []string `json:"created"`
	// Sysctls the kubelet rewrites (setupKernelTunables), as they were.
	Sysctls map[string]string `json:"sysctls"`
	// NetNSBefore are the named network namespaces that existed before:
	// the others under /var/run/netns are the nodes' pods'.
	NetNSBefore []string `json:"netnsBefore"`
	// Nodes are the directories of the real nodes running, by slot ("" for
	// a free one).
	Nodes []string `json:"nodes"`
}

// kubeletSysctls are the host settings the kubelet's container manager
// writes at start (pkg/kubelet/cm setupKernelTunables).
var kubeletSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

const (
	stateFile        = "host.json"
	machineStateFile = "real-nodes.json"
	netnsDir         = "/var/run/netns"
)

// hostPaths are host-global directories the kubelet, containerd and the
// CNI plugins write outside the node's own directory.
var hostPaths = []string{
	"/var/lib/kubelet", // device-plugins
	"/var/log/containers",
	"/var/lib/cni",
	"/run/containerd", // shims' sockets
	CNIConfDir,
	netnsDir,
}

// cadvisorSocket is where the kubelet's cAdvisor looks for containerd, for
// the containers' process figures (the Summary API's process_stats). From
// 1.37 the kubelet has no flag that moves it (--containerd is gone), so a
// symlink there into /proc/self/cwd leads each kubelet, started in its
// node's directory, to its own node's containerd (socketPath).
const (
	cadvisorSocket       = "/run/containerd/containerd.sock"
	cadvisorSocketTarget = "/proc/self/cwd/run-containerd/containerd.sock"
)

// linkCadvisorSocket makes cadvisorSocket, refusing where something else
// is there (a containerd of the machine's own).
func linkCadvisorSocket() error {
	if target, err := os.Readlink(cadvisorSocket); err == nil && target == cadvisorSocketTarget {
		return nil
	} else if _, err := os.Lstat(cadvisorSocket); err == nil {
		return fmt.Errorf("%s exists: a containerd of this machine's own runs there, and real nodes need that path (the kubelet's cAdvisor finds each node's containerd through it)", cadvisorSocket)
	}
	if err := os.MkdirAll(filepath.Dir(cadvisorSocket), 0o711); err != nil {
		return err
	}
	return os.Symlink(cadvisorSocketTarget, cadvisorSocket)
}

// machineMu serialises the claims of nodes started at once.
var machineMu sync.Mutex

// claimHost takes a slot among the real nodes of the cluster whose
// directory holds dir — recording the host as it is for the first — and
// refuses where another cluster's real node runs (its network
// configuration is in place).
func claimHost(dir, name string) (*hostState, error) {
	machineMu.Lock()
	defer machineMu.Unlock()
	cg, err := detectCgroups()
	if err != nil {
		return nil, err
	}
	clusterDir := filepath.Dir(dir)
	m, err := loadMachineState(clusterDir)
	if errors.Is(err, fs.ErrNotExist) {
		if entries, _ := os.ReadDir(CNIConfDir); len(entries) > 0 {
			return nil, fmt.Errorf("%s is not empty: another real node runs on this machine (stop it with make down, or remove what is there if none does), or the machine has a network of its own, which is not Headroom's to move", CNIConfDir)
		}
		m = &machineState{Sysctls: map[string]string{}}
		for _, s := range kubeletSysctls {
			if data, err := os.ReadFile(filepath.Join("/proc/sys", s)); err == nil {
				m.Sysctls[s] = strings.TrimSpace(string(data))
			}
		}
		if entries, err := os.ReadDir(netnsDir); err == nil {
			for _, e := range entries {
				m.NetNSBefore = append(m.NetNSBefore, e.Name())
			}
		}
		for _, p := range hostPaths {
			if top := topMissing(p); top != "" {
				m.Created = append(m.Created, top)
			}
		}
		if err := linkCadvisorSocket(); err != nil {
			return nil, err
		}
		m.Created = append(m.Created, cadvisorSocket)
	} else if err != nil {
		return nil, err
	}
	slot := len(m.Nodes)
	for i, d := range m.Nodes {
		if d == dir {
			return nil, fmt.Errorf("real node %s already runs in %s", name, dir)
		}
		if d == "" && slot == len(m.Nodes) {
			slot = i
		}
	}
	if slot >= maxNodes {
		return nil, fmt.Errorf("at most %d real nodes per cluster: their bridges and pod ranges are numbered", maxNodes)
	}
	if slot == len(m.Nodes) {
		m.Nodes = append(m.Nodes, dir)
	} else {
		m.Nodes[slot] = dir
	}
	h := &hostState{
		Dir: dir, CgroupName: cgroupPrefix + name, Cgroups: cg, CNIBinDir: filepath.Join(dir, "cni-bin"),
		Slot: slot, Network: fmt.Sprintf("%s-%d", NetworkName, slot), Bridge: fmt.Sprintf("%s%d", bridgePrefix, slot),
		ConfDir: filepath.Join(CNIConfDir, name),
	}
	if err := m.save(clusterDir); err != nil {
		return nil, err
	}
	return h, h.save()
}

// cgroupPrefix begins the name of each node's cgroup (the kubelet's
// cgroupRoot), <cgroupPrefix><node name>.
const cgroupPrefix = "headroom-"

// maxNodes bounds the real nodes of a cluster: slot i's default pod range
// is 10.244.i.0/28.
const maxNodes = 16

// topMissing is the outermost directory of path (path itself included)
// that does not exist, which making path creates; "" when path exists.
func topMissing(path string) string {
	top := ""
	for p := path; p != "/" && p != "."; p = filepath.Dir(p) {
		if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		top = p
	}
	return top
}

func (h *hostState) save() error {
	data, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(h.Dir, stateFile), data, 0o644)
}

func (m *machineState) save(clusterDir string) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(clusterDir, machineStateFile), data, 0o644)
}

func loadMachineState(clusterDir string) (*machineState, error) {
	data, err := os.ReadFile(filepath.Join(clusterDir, machineStateFile))
	if err != nil {
		return nil, err
	}
	var m machineState
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(clusterDir, machineStateFile), err)
	}
	return &m, nil
}

func loadHostState(dir string) (*hostState, error) {
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var h hostState
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, stateFile), err)
	}
	return &h, nil
}

// prepare makes the node's cgroup in every hierarchy, its CNI plugin
// directory and network configuration.
func (h *hostState) prepare(podSubnet, binDir string) error {
	if err := h.Cgroups.create(h.CgroupName); err != nil {
		return err
	}
	if err := os.MkdirAll(h.CNIBinDir, 0o755); err != nil {
		return err
	}
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if err := os.Symlink(filepath.Join(binDir, p), filepath.Join(h.CNIBinDir, p)); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	if err := os.MkdirAll(h.ConfDir, 0o755); err != nil {
		return err
	}
	// isGateway stays false: with it the bridge plugin turns on the host's
	// ip_forward. Nothing sends traffic to a pod; the pods need an address,
	// which is what host-local hands out and what runs short.
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [{
    "type": "bridge",
    "bridge": %q,
    "isGateway": false,
    "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]]}
  }]
}
`, h.Network, h.Bridge, podSubnet)
	return os.WriteFile(filepath.Join(h.ConfDir, cniConfName), []byte(conf), 0o644)
}

// release undoes what the node did to the host: processes left in its
// cgroups and containerd's shims, mounts below its directory, the bridge,
// the cgroups, its network's files; then, when it is the cluster's last
// real node, what the nodes did together: their pods' network namespaces,
// the files and directories they created, and the sysctls. It goes on past
// errors and reports them all.
func (h *hostState) release() error {
	var errs []error
	killLeftovers(h)
	errs = append(errs, unmountBelow(h.Dir))
	if out, err := exec.Command("ip", "link", "del", h.Bridge).CombinedOutput(); err != nil && !strings.Contains(string(out), "Cannot find device") {
		errs = append(errs, fmt.Errorf("ip link del %s: %v: %s", h.Bridge, err, out))
	}
	errs = append(errs, h.Cgroups.remove(h.CgroupName))
	os.RemoveAll(h.ConfDir)
	os.RemoveAll(filepath.Join(HostLocalDataDir, h.Network))
	if results, _ := filepath.Glob("/var/lib/cni/results/" + h.Network + "-*"); len(results) > 0 {
		for _, r := range results {
			os.Remove(r)
		}
	}
	errs = append(errs, h.leave())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.Remove(filepath.Join(h.Dir, stateFile))
}

// leave frees the node's slot; the last node out puts back what the
// cluster's real nodes changed together.
func (h *hostState) leave() error {
	machineMu.Lock()
	defer machineMu.Unlock()
	clusterDir := filepath.Dir(h.Dir)
	m, err := loadMachineState(clusterDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	running := 0
	for i, d := range m.Nodes {
		if d == h.Dir {
			m.Nodes[i] = ""
		}
		if m.Nodes[i] != "" {
			running++
		}
	}
	if running > 0 {
		return m.save(clusterDir)
	}
	var errs []error
	errs = append(errs, removeNetNS(m.NetNSBefore))
	for i := len(m.Created) - 1; i >= 0; i-- {
		if err := unmountBelow(m.Created[i]); err != nil {
			errs = append(errs, err)
		}
		if err := os.RemoveAll(m.Created[i]); err != nil {
			errs = append(errs, err)
		}
	}
	for s, v := range m.Sysctls {
		if err := os.WriteFile(filepath.Join("/proc/sys", s), []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring %s: %w", s, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.Remove(filepath.Join(clusterDir, machineStateFile))
}

// killLeftovers kills every process still in the node's cgroups (pods'
// processes the runtime did not stop) and every process that names the
// node's directory on its command line (containerd's shims, which leave
// containerd's process group on purpose).
func killLeftovers(h *hostState) {
	for attempt := 0; attempt < 50; attempt++ {
		pids := h.Cgroups.procs(h.CgroupName)
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, f := range procs {
			data, err := os.ReadFile(f)
			// The directory with its slash: another node's directory may
			// begin with this one's name (node-a, node-a-2).
			if err != nil || !strings.Contains(string(data), h.Dir+"/") {
				continue
			}
			if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil && pid != os.Getpid() {
				pids = append(pids, pid)
			}
		}
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// unmountBelow detaches every mount at or below dir, deepest first.
func unmountBelow(dir string) error {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	defer f.Close()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) < 5 {
			continue
		}
		// Field 5 is the mount point, with spaces and the like octal-escaped.
		p := unescapeMountPoint(fields[4])
		if p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	var errs []error
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

func unescapeMountPoint(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeNetNS removes the named network namespaces that appeared under
// /var/run/netns since the first real node started (pods' sandboxes that
// the runtime did not remove).
func removeNetNS(netNSBefore []string) error {
	before := map[string]bool{}
	for _, n := range netNSBefore {
		before[n] = true
	}
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		if before[e.Name()] || !strings.HasPrefix(e.Name(), "cni-") {
			continue
		}
		p := filepath.Join(netnsDir, e.Name())
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
		if err := os.Remove(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeSandboxes stops and removes every pod sandbox of the runtime at
// socket through the CRI, as `crictl rmp -fa` does: the runtime kills the
// containers, calls the CNI plugins' DEL (host-local frees the address)
// and removes the network namespace.
func removeSandboxes(socket string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := runtimeService(ctx, socket)
	if err != nil {
		return err
	}
	sandboxes, err := rs.ListPodSandbox(ctx, &criapi.PodSandboxFilter{})
	if err != nil {
		return fmt.Errorf("listing pod sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range sandboxes {
		if err := rs.StopPodSandbox(ctx, sb.Id); err != nil {
			errs = append(errs, fmt.Errorf("stopping sandbox %s: %w", sb.Id, err))
			continue
		}
		if err := rs.RemovePodSandbox(ctx, sb.Id); err != nil {
			errs = append(errs, fmt.Errorf("removing sandbox %s: %w", sb.Id, err))
		}
	}
	return errors.Join(errs...)
}

// SandboxIDs lists the IDs of the node's pod sandboxes, in every state,
// through the CRI as `crictl pods -q` does.
func (n *Node) SandboxIDs(ctx context.Context) (map[string]bool, error) {
	rs, err := runtimeService(ctx, n.Socket)
	if err != nil {
		return nil, err
	}
	sandboxes, err := rs.ListPodSandbox(ctx, &criapi.PodSandboxFilter{})
	if err != nil {
		return nil, err
	}
	ids := map[string]bool{}
	for _, sb := range sandboxes {
		ids[sb.Id] = true
	}
	return ids, nil
}
