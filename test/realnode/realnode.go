// Package realnode runs a real Kubernetes node beside the local control
// plane: the kubelet, containerd with its CRI plugin, runc and the CNI
// plugins bridge, host-local and loopback, all as processes on this machine,
// built into bin/ by hack/build-tools.sh. Pods run in real containers, in
// real cgroups, with real pod IPs from a small host-local range, so that
// Headroom's figures can be checked against the kubelet's and its decisions
// against what really happens: forks that fail, addresses that run out.
//
// A real node uses host-global paths that the shipped node agent reads
// where any kubelet node has them (/etc/cni/net.d, /var/lib/cni/networks),
// so one runs per machine at a time; Start says so when another runs.
// Everything the node puts on the host — processes, mounts, network
// namespaces, the bridge, cgroups, files, the sysctls the kubelet rewrites —
// is recorded in its directory and removed by Stop (or Teardown, for the
// demo's detached node).
package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/pkg/nodeagent"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// Names of the node's network on the host.
const (
	// NetworkName begins each node's CNI network name,
	// <NetworkName>-<slot>: host-local keeps its allocations in
	// /var/lib/cni/networks/<network>.
	NetworkName = "headroom"
	// bridgePrefix begins the bridge the bridge plugin makes for each
	// node's pods, <bridgePrefix><slot>.
	bridgePrefix = "headroom"
	// CNIConfDir is where container runtimes and the shipped node agent
	// look for the network configuration. Nodes on one machine share it,
	// so each node's configuration is in a directory of its own there,
	// <CNIConfDir>/<node name>, which its containerd and its node agent
	// (--cni-conf-dir) read.
	CNIConfDir  = "/etc/cni/net.d"
	cniConfName = "10-headroom.conflist"
	// HostLocalDataDir is host-local's default state directory.
	HostLocalDataDir = "/var/lib/cni/networks"
	// PauseImage is the sandbox image hack/build-tools.sh builds from
	// Kubernetes' own pause program (bin/images/pause.tar).
	PauseImage = "registry.k8s.io/pause:3.10.2"
	// DefaultPodSubnet is the first node's range: 13 pod IPs, a /28 less
	// network, broadcast and the gateway address host-local keeps free.
	// The node in slot i gets 10.244.i.0/28.
	DefaultPodSubnet = "10.244.0.0/28"
)

// Binaries a real node needs in bin/.
var Binaries = []string{"kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "runc", "bridge", "host-local", "loopback"}

// Options shape the node.
type Options struct {
	// Name of the Node; default "real-node". Nodes of one cluster need
	// names of their own.
	Name string
	// ReservedPIDs is the kubelet's systemReserved.pid. With
	// enforceNodeAllocatable [pods], kubepods' pids.max is
	// pid_max − ReservedPIDs: the pods' real PID budget. Default: pid_max
	// less 2,000.
	ReservedPIDs int64
	// ReservedMemory is the kubelet's systemReserved.memory in bytes; 0
	// reserves none. With enforceNodeAllocatable [pods], kubepods' memory
	// limit is the machine's memory (MemTotal, the Node's capacity) less
	// it: the pods' real memory budget, where the kernel's OOM killer acts
	// when the pods together reach it. MemoryReservedFor gives the value
	// for a budget.
	ReservedMemory int64
	// PodSubnet is host-local's range; default 10.244.<slot>.0/28, where
	// slot numbers the cluster's real nodes from 0 (DefaultPodSubnet).
	PodSubnet string
	// EvictionHard is the kubelet's evictionHard; default only what keeps
	// the node from evicting for disk on a busy test machine.
	EvictionHard map[string]string
	// EvictionSoft and EvictionSoftGracePeriod are the kubelet's soft
	// eviction thresholds and their grace periods; default none.
	EvictionSoft, EvictionSoftGracePeriod map[string]string
	// EvictionMaxPodGracePeriod is the kubelet's evictionMaxPodGracePeriod
	// (seconds): a soft eviction gives a pod min(it, the pod's
	// terminationGracePeriodSeconds); default 0, the kubelet's.
	EvictionMaxPodGracePeriod int32
	// EvictionPressureTransitionPeriod is how long the kubelet keeps a
	// pressure condition after its signal went back under the threshold;
	// default 30 s, so that a test sees the node's conditions settle.
	EvictionPressureTransitionPeriod time.Duration
	// PodPIDsLimit is the kubelet's podPidsLimit: each pod's pids.max;
	// default 0, none.
	PodPIDsLimit int64
	// Images are image tarballs imported into containerd, beside
	// bin/images/pause.tar; default every other tarball of bin/images.
	Images []string
}

// Node is a running real node.
type Node struct {
	Name string
	// IP is the node's InternalIP: the host's own IPv4 address.
	IP string
	// Dir holds the node's state, configuration and logs.
	Dir string
	// Socket is containerd's CRI endpoint.
	Socket string
	// KubeletConfig is the kubelet's configuration file.
	KubeletConfig string
	// PIDBudget is kubepods' pids.max: the most tasks the node's pods may
	// hold together.
	PIDBudget int64
	// ReservedPIDs is systemReserved.pid.
	ReservedPIDs int64
	// MemoryBudget is kubepods' memory limit in bytes (memory.limit_in_bytes
	// on cgroup v1, memory.max on v2): the most memory the node's pods may
	// hold together; -1 for none.
	MemoryBudget int64
	// ReservedMemory is systemReserved.memory in bytes.
	ReservedMemory int64
	// PodSubnet is host-local's range of the node's pods.
	PodSubnet string
	// Network is the node's CNI network: host-local's allocations are in
	// HostLocalDataDir/Network.
	Network string

	cp         *controlplane.ControlPlane
	kubelet    *controlplane.Process
	containerd *controlplane.Process
	host       *hostState
}

// ErrUnsupported wraps the reason a machine cannot run a real node (not
// root, no cgroups, no bridge). Tests skip on it, except under CI.
var ErrUnsupported = errors.New("this machine cannot run a real node")

// Supported reports whether this machine can run a real node, and if not,
// why, in one line.
func Supported(binDir string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: not root", ErrUnsupported)
	}
	if _, err := detectCgroups(); err != nil {
		return fmt.Errorf("%w: %v", ErrUnsupported, err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: no ip command (iproute2)", ErrUnsupported)
	}
	for _, b := range Binaries {
		if _, err := os.Stat(filepath.Join(binDir, b)); err != nil {
			return fmt.Errorf("%s not built (run hack/build-tools.sh): %w", b, err)
		}
	}
	return nil
}

// Start starts containerd and the kubelet as a Node of cp (started with
// Options.RealNode and a controller manager), imports the images and waits
// until the Node is Ready. On error everything started is undone.
func Start(ctx context.Context, cp *controlplane.ControlPlane, opts Options) (*Node, error) {
	return start(ctx, cp, opts, func() {})
}

// start is Start, calling claimed once the node has its slot among the
// cluster's real nodes (or has failed before), so that nodes started at
// once take their slots in order.
//
// AmplePIDBudget is a pods' PID budget for a node whose test is not about
// PIDs: far above what its pods and the machine's other tasks hold, so that
// NodePIDs' estimate, which counts the default PIDs of a pod (100) for
// every pod its node's last sample has not seen yet, cannot decide where
// pods go. The default budget (2,000) is the PID tests' small, real one.
const AmplePIDBudget = 8000

// ReservedForBudget is the ReservedPIDs (systemReserved.pid) that leaves
// the pods a budget of budget PIDs on this machine: pid_max − budget.
func ReservedForBudget(budget int64) (int64, error) {
	pidMax, err := ReadInt("/proc/sys/kernel/pid_max")
	if err != nil {
		return 0, err
	}
	if budget <= 0 || budget >= pidMax {
		return 0, fmt.Errorf("a PID budget of %d: want 0 < budget < pid_max (%d)", budget, pidMax)
	}
	return pidMax - budget, nil
}

func start(ctx context.Context, cp *controlplane.ControlPlane, opts Options, claimed func()) (_ *Node, err error) {
	claimedOnce := sync.OnceFunc(claimed)
	defer claimedOnce()
	if err := Supported(cp.BinDir); err != nil {
		return nil, err
	}
	if opts.Name == "" {
		opts.Name = "real-node"
	}
	pidMax, err := ReadInt("/proc/sys/kernel/pid_max")
	if err != nil {
		return nil, err
	}
	if opts.ReservedPIDs == 0 {
		opts.ReservedPIDs = pidMax - 2000
	}
	if opts.ReservedPIDs <= 0 || opts.ReservedPIDs >= pidMax {
		return nil, fmt.Errorf("ReservedPIDs %d: want 0 < reserved < pid_max (%d)", opts.ReservedPIDs, pidMax)
	}
	if opts.ReservedMemory != 0 {
		total, err := MachineMemory()
		if err != nil {
			return nil, err
		}
		if opts.ReservedMemory < 0 || opts.ReservedMemory >= total {
			return nil, fmt.Errorf("ReservedMemory %d: want 0 <= reserved < the machine's memory (%d)", opts.ReservedMemory, total)
		}
	}
	ip, err := hostIPv4()
	if err != nil {
		return nil, err
	}
	n := &Node{
		Name:           opts.Name,
		IP:             ip,
		Dir:            filepath.Join(cp.Dir, "node-"+opts.Name),
		cp:             cp,
		ReservedPIDs:   opts.ReservedPIDs,
		ReservedMemory: opts.ReservedMemory,
	}
	n.Socket = socketPath(n.Dir)
	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return nil, err
	}
	// The socket's directory is what a node agent with CRI access mounts:
	// as containerd's /run/containerd, it holds the socket and is 0711, so
	// that a non-root process in group 0 reaches the socket (root:root
	// 0660) and nothing else; containerd's root and state stay 0700.
	if err := os.MkdirAll(filepath.Dir(n.Socket), 0o711); err != nil {
		return nil, err
	}
	n.host, err = claimHost(n.Dir, opts.Name)
	claimedOnce()
	if err != nil {
		return nil, err
	}
	if opts.PodSubnet == "" {
		opts.PodSubnet = fmt.Sprintf("10.244.%d.0/28", n.host.Slot)
	}
	n.PodSubnet, n.Network = opts.PodSubnet, n.host.Network
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, n.logTails())
			n.Stop()
		}
	}()
	if err := n.host.prepare(opts.PodSubnet, cp.BinDir); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx); err != nil {
		return nil, err
	}
	if err := n.importImages(ctx, opts.Images); err != nil {
		return nil, err
	}
	if err := n.startKubelet(ctx, opts); err != nil {
		return nil, err
	}
	if n.PIDBudget, err = ReadInt(filepath.Join(n.host.Cgroups.pidsDir(n.host.CgroupName), "kubepods", "pids.max")); err != nil {
		return nil, fmt.Errorf("the pods' PID budget: %w", err)
	}
	if n.MemoryBudget, err = n.readMemoryBudget(); err != nil {
		return nil, fmt.Errorf("the pods' memory budget: %w", err)
	}
	return n, nil
}

// StartNodes starts a real node for each of opts in cp at once, as Start
// does; on error it stops those that started.
func StartNodes(ctx context.Context, cp *controlplane.ControlPlane, opts ...Options) ([]*Node, error) {
	if len(opts) == 0 {
		opts = []Options{{}}
	}
	names := map[string]bool{}
	for i := range opts {
		if opts[i].Name == "" && i == 0 {
			opts[i].Name = "real-node"
		}
		if opts[i].Name == "" || names[opts[i].Name] {
			return nil, fmt.Errorf("real node %d: every node of a cluster needs a name of its own (Options.Name %q)", i, opts[i].Name)
		}
		names[opts[i].Name] = true
	}
	nodes := make([]*Node, len(opts))
	errs := make([]error, len(opts))
	// Node i takes its slot after node i−1: slots, and so the default pod
	// ranges, follow the order of opts.
	claimed := make([]chan struct{}, len(opts))
	for i := range claimed {
		claimed[i] = make(chan struct{})
	}
	var wg sync.WaitGroup
	for i := range opts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i > 0 {
				<-claimed[i-1]
			}
			nodes[i], errs[i] = start(ctx, cp, opts[i], func() { close(claimed[i]) })
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		var started []*Node
		for _, n := range nodes {
			if n != nil {
				started = append(started, n)
			}
		}
		StopNodes(started)
		return nil, err
	}
	return nodes, nil
}

// StopNodes stops nodes, the last started first.
func StopNodes(nodes []*Node) {
	for i := len(nodes) - 1; i >= 0; i-- {
		nodes[i].Stop()
	}
}

// Stop stops the kubelet, removes every pod sandbox through the CRI (as
// the kubelet would: containers killed, CNI DEL, network namespace
// removed), stops containerd and undoes everything the node did to the
// host.
func (n *Node) Stop() {
	if n.kubelet != nil {
		n.kubelet.Stop(10 * time.Second)
	}
	var errs []error
	if n.containerd != nil {
		if exited, _ := n.containerd.Exited(); !exited {
			errs = append(errs, removeSandboxes(n.Socket))
		}
		n.containerd.Stop(10 * time.Second)
	}
	if n.host != nil {
		errs = append(errs, n.host.release())
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(os.Stderr, "realnode: stopping %s: %v\n", n.Name, err)
	}
}

// Teardown stops the detached real node of the control plane in cpDir (the
// demo's) and undoes what it did to the host, as Stop does. It is a no-op
// where no real node ran.
func Teardown(cpDir string) error {
	dirs, _ := filepath.Glob(filepath.Join(cpDir, "node-*"))
	var errs []error
	for _, dir := range dirs {
		h, err := loadHostState(dir)
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			errs = append(errs, err)
			continue
		}
		name := strings.TrimPrefix(filepath.Base(dir), "node-")
		errs = append(errs, controlplane.StopDetachedProcess(cpDir, processName("kubelet", name)))
		sock := socketPath(dir)
		if _, err := os.Stat(sock); err == nil {
			errs = append(errs, removeSandboxes(sock))
		}
		errs = append(errs, controlplane.StopDetachedProcess(cpDir, processName("containerd", name)), h.release())
	}
	return errors.Join(errs...)
}

func (n *Node) logTails() string {
	var s string
	for _, p := range []*controlplane.Process{n.containerd, n.kubelet} {
		if p != nil {
			s += fmt.Sprintf("\n--- %s (last 3 KiB of %s) ---\n%s", p.Name, p.LogPath, p.Log(3<<10))
		}
	}
	return s
}

// processName names a node's kubelet or containerd among the cluster's
// processes (their logs and, detached, pid files): <bin>-<node name>.
func processName(bin, node string) string { return bin + "-" + node }

// socketPath is containerd's socket of the node in dir, in a directory of
// its own as /run/containerd/containerd.sock is.
func socketPath(dir string) string {
	return filepath.Join(dir, "run-containerd", "containerd.sock")
}

// StopContainerd stops the node's containerd as a service manager stops it
// for a restart (SIGTERM). Pods keep running: their shims are processes of
// their own.
func (n *Node) StopContainerd() {
	n.containerd.Stop(10 * time.Second)
}

// StartContainerd starts the node's containerd again after StopContainerd,
// with the same configuration, and waits until it answers on its socket.
func (n *Node) StartContainerd(ctx context.Context) error {
	return n.startContainerd(ctx)
}

func (n *Node) startContainerd(ctx context.Context) error {
	cfg := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(cfg, []byte(n.containerdConfig()), 0o644); err != nil {
		return err
	}
	// containerd finds containerd-shim-runc-v2 on PATH.
	env := []string{"PATH=" + n.cp.BinDir + ":" + os.Getenv("PATH")}
	p, err := n.cp.StartProcessEnv(processName("containerd", n.Name), "containerd", env, "--config", cfg)
	if err != nil {
		return err
	}
	n.containerd = p
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, fmt.Errorf("containerd exited: %v", err)
		}
		return exec.CommandContext(ctx, filepath.Join(n.cp.BinDir, "ctr"), "--address", n.Socket, "version").Run() == nil, nil
	})
}

// containerdConfig is containerd's configuration (version 3): root, state
// and socket in the node's directory; the CRI plugin with runc from bin/,
// the node's CNI network and the pause image pinned. NRI is off (no NRI
// plugins run here), and so is the OOM-score restriction's opposite: these
// machines lack CAP_SYS_RESOURCE for lowering oom_score_adj, so the
// runtime must never ask for less than its own.
func (n *Node) containerdConfig() string {
	base := filepath.Join(n.Dir, "containerd")
	return fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = %[3]q

[plugins."io.containerd.grpc.v1.cri"]
  disable_tcp_service = true

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = %[4]q

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = [%[5]q]
    conf_dir = %[6]q
    max_conf_num = 1
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        BinaryName = %[7]q
        SystemdCgroup = false
`, filepath.Join(base, "root"), filepath.Join(base, "state"), n.Socket, PauseImage,
		n.host.CNIBinDir, n.host.ConfDir, filepath.Join(n.cp.BinDir, "runc"))
}

// importImages imports the pause image and the given (default: every
// other) image tarball of bin/images into containerd's k8s.io namespace,
// where the CRI plugin finds them: pods use them without a pull.
func (n *Node) importImages(ctx context.Context, images []string) error {
	dir := filepath.Join(n.cp.BinDir, "images")
	if len(images) == 0 {
		all, _ := filepath.Glob(filepath.Join(dir, "*.tar"))
		images = all
	}
	pause := filepath.Join(dir, "pause.tar")
	if _, err := os.Stat(pause); err != nil {
		return fmt.Errorf("the pause image is not built (run hack/build-tools.sh): %w", err)
	}
	seen := map[string]bool{}
	for _, img := range append([]string{pause}, images...) {
		if seen[img] {
			continue
		}
		seen[img] = true
		out, err := exec.CommandContext(ctx, filepath.Join(n.cp.BinDir, "ctr"), "--address", n.Socket,
			"-n", "k8s.io", "images", "import", "--local", img).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ctr images import %s: %v\n%s", img, err, out)
		}
	}
	return nil
}

func (n *Node) startKubelet(ctx context.Context, opts Options) error {
	kubeconfig, err := n.cp.NodeKubeconfig(n.Name)
	if err != nil {
		return err
	}
	evictionHard := map[string]string{"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%"}
	if opts.EvictionHard != nil {
		evictionHard = opts.EvictionHard
	}
	pressureTransition := 30 * time.Second
	if opts.EvictionPressureTransitionPeriod != 0 {
		pressureTransition = opts.EvictionPressureTransitionPeriod
	}
	var podPIDsLimit *int64
	if opts.PodPIDsLimit != 0 {
		podPIDsLimit = &opts.PodPIDsLimit
	}
	port, healthz := freePort(), freePort()
	falseV, trueV := false, true
	zero := int32(0)
	cfg := kubeletconfigv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: kubeletconfigv1beta1.SchemeGroupVersion.String(), Kind: "KubeletConfiguration"},
		// cgroupfs: runc manages the cgroups itself, no systemd here. On
		// cgroup v1 the kubelet refuses to start unless told not to fail.
		CgroupDriver: "cgroupfs",
		FailCgroupV1: &falseV,
		FailSwapOn:   &falseV,
		// Below a cgroup of the node's own, so that kubepods does not
		// stay behind in every hierarchy of the host.
		CgroupRoot:               "/" + n.host.CgroupName,
		CgroupsPerQOS:            &trueV,
		ContainerRuntimeEndpoint: "unix://" + n.Socket,
		// A real, small PID budget for pods: kubepods' pids.max is
		// pid_max − systemReserved.pid.
		EnforceNodeAllocatable: []string{"pods"},
		SystemReserved:         systemReserved(opts),
		EvictionHard:           evictionHard,
		EvictionSoft:           opts.EvictionSoft,
		// Soft thresholds need their grace periods: the kubelet refuses
		// one without.
		EvictionSoftGracePeriod:   opts.EvictionSoftGracePeriod,
		EvictionMaxPodGracePeriod: opts.EvictionMaxPodGracePeriod,
		Authentication: kubeletconfigv1beta1.KubeletAuthentication{
			X509:      kubeletconfigv1beta1.KubeletX509Authentication{ClientCAFile: n.cp.PKIFile(controlplane.ClientCAFile)},
			Webhook:   kubeletconfigv1beta1.KubeletWebhookAuthentication{Enabled: &trueV},
			Anonymous: kubeletconfigv1beta1.KubeletAnonymousAuthentication{Enabled: &falseV},
		},
		Authorization:      kubeletconfigv1beta1.KubeletAuthorization{Mode: kubeletconfigv1beta1.KubeletAuthorizationModeWebhook},
		Port:               int32(port),
		ReadOnlyPort:       zero,
		HealthzPort:        ptrInt32(int32(healthz)),
		HealthzBindAddress: "127.0.0.1",
		PodLogsDir:         filepath.Join(n.Dir, "pod-logs"),
		// The machine's own sysctls are put back by Stop; refusing to
		// start over them would need them changed first.
		ProtectKernelDefaults: false,
		// Status often enough for a test to see a change quickly.
		NodeStatusUpdateFrequency:        metav1.Duration{Duration: 5 * time.Second},
		NodeStatusReportFrequency:        metav1.Duration{Duration: 10 * time.Second},
		SyncFrequency:                    metav1.Duration{Duration: 10 * time.Second},
		EvictionPressureTransitionPeriod: metav1.Duration{Duration: pressureTransition},
		// Imported images are never pulled again: keep them.
		ImageGCHighThresholdPercent: ptrInt32(100),
		ImageGCLowThresholdPercent:  ptrInt32(99),
		ResolverConfig:              ptrString(""),
		MaxPods:                     110,
		PodPidsLimit:                podPIDsLimit,
		SerializeImagePulls:         &falseV,
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return err
	}
	n.KubeletConfig = filepath.Join(n.Dir, "kubelet-config.yaml")
	if err := os.WriteFile(n.KubeletConfig, data, 0o644); err != nil {
		return err
	}
	// In the node's directory: cAdvisor reaches the node's containerd
	// through cadvisorSocket, relative to the kubelet's working directory.
	p, err := n.cp.StartProcessIn(n.Dir, processName("kubelet", n.Name), "kubelet", nil,
		"--config="+n.KubeletConfig,
		"--kubeconfig="+kubeconfig,
		"--root-dir="+filepath.Join(n.Dir, "kubelet"),
		"--cert-dir="+filepath.Join(n.Dir, "kubelet-pki"),
		"--hostname-override="+n.Name,
		"--node-ip="+n.IP,
		"--v=1",
	)
	if err != nil {
		return err
	}
	n.kubelet = p
	return wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, fmt.Errorf("kubelet exited: %v", err)
		}
		node, err := n.cp.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, t := range node.Spec.Taints {
			if t.Key == corev1.TaintNodeNotReady {
				return false, nil
			}
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, nil
			}
		}
		return false, nil
	})
}

// systemReserved is the kubelet's systemReserved: the PIDs, and the
// memory when opts reserve any.
func systemReserved(opts Options) map[string]string {
	r := map[string]string{"pid": strconv.FormatInt(opts.ReservedPIDs, 10)}
	if opts.ReservedMemory > 0 {
		r["memory"] = strconv.FormatInt(opts.ReservedMemory, 10)
	}
	return r
}

// MachineMemory is the machine's memory in bytes as the kubelet takes it
// for the Node's capacity: MemTotal of /proc/meminfo (cAdvisor's machine
// info).
func MachineMemory() (int64, error) {
	return nodeagent.ReadMemTotal("/proc")
}

// MemoryReservedFor is the ReservedMemory that leaves the node's pods a
// memory budget of budget bytes (a multiple of the page size, as the
// kernel keeps the limit).
func MemoryReservedFor(budget int64) (int64, error) {
	total, err := MachineMemory()
	if err != nil {
		return 0, err
	}
	if budget <= 0 || budget >= total {
		return 0, fmt.Errorf("a pods' memory budget of %d bytes: want 0 < budget < the machine's memory (%d)", budget, total)
	}
	return total - budget, nil
}

func ptrInt32(v int32) *int32    { return &v }
func ptrString(v string) *string { return &v }

// hostIPv4 is the first global IPv4 address of an interface that is up:
// the kubelet's --node-ip must not be loopback.
func hostIPv4() (string, error) {
	ifaces, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for _, iface := range ifaces {
		if iface.Flags&net.FlagUp == 0 || iface.Flags&net.FlagLoopback != 0 || strings.HasPrefix(iface.Name, bridgePrefix) || strings.HasPrefix(iface.Name, "veth") {
			continue
		}
		addrs, err := iface.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsGlobalUnicast() {
				return ipn.IP.String(), nil
			}
		}
	}
	return "", fmt.Errorf("%w: no interface with a global IPv4 address for the kubelet's --node-ip", ErrUnsupported)
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("no free port: %v", err))
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ReadInt reads a file holding one integer, as cgroup files and sysctls
// do ("max" reads as -1).
func ReadInt(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	s := strings.TrimSpace(string(data))
	if s == "max" {
		return -1, nil
	}
	return strconv.ParseInt(s, 10, 64)
}
