package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	statsapi "k8s.io/kubelet/pkg/apis/stats/v1alpha1"

	"github.com/headroom-k8s/headroom/pkg/nodeagent"
)

// Summary is the kubelet's Summary API (/stats/summary), read through the
// API server's node proxy as kubectl get --raw does.
func (n *Node) Summary(ctx context.Context) (*statsapi.Summary, error) {
	data, err := n.cp.Client.CoreV1().RESTClient().Get().
		AbsPath("/api/v1/nodes", n.Name, "proxy", "stats", "summary").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("the kubelet's Summary API: %w", err)
	}
	var s statsapi.Summary
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("the kubelet's Summary API: %w", err)
	}
	return &s, nil
}

// KubepodsDir is the kubelet's kubepods cgroup in the pids hierarchy.
func (n *Node) KubepodsDir() string {
	return filepath.Join(n.host.Cgroups.pidsDir(n.host.CgroupName), "kubepods")
}

// KubepodsMemoryDir is the kubelet's kubepods cgroup in the memory
// hierarchy.
func (n *Node) KubepodsMemoryDir() string {
	return filepath.Join(n.host.Cgroups.memoryDir(n.host.CgroupName), "kubepods")
}

// PodsWorkingSet is the working set of the node's pods together, kubepods',
// as the kubelet computes a working set (usage − inactive file) for its
// allocatableMemory.available eviction signal, read with the node agent's
// own reader.
func (n *Node) PodsWorkingSet() (int64, error) {
	return nodeagent.ReadWorkingSet(n.KubepodsMemoryDir(), !n.host.Cgroups.V2)
}

// PodsMemoryUsage is kubepods' memory usage, page cache included: what the
// kernel holds against MemoryBudget (memory.usage_in_bytes on cgroup v1,
// memory.current on v2).
func (n *Node) PodsMemoryUsage() (int64, error) {
	if n.host.Cgroups.V2 {
		return ReadInt(filepath.Join(n.KubepodsMemoryDir(), "memory.current"))
	}
	return ReadInt(filepath.Join(n.KubepodsMemoryDir(), "memory.usage_in_bytes"))
}

// readMemoryBudget reads kubepods' memory limit: -1 for none (v2's "max",
// or v1's page-rounded maximum).
func (n *Node) readMemoryBudget() (int64, error) {
	if n.host.Cgroups.V2 {
		return ReadInt(filepath.Join(n.KubepodsMemoryDir(), "memory.max"))
	}
	v, err := ReadInt(filepath.Join(n.KubepodsMemoryDir(), "memory.limit_in_bytes"))
	if err == nil && v >= 1<<62 {
		v = -1 // no limit: v1 shows PAGE_COUNTER_MAX pages in bytes
	}
	return v, err
}

// PodCgroupDir is pod's cgroup in the pids hierarchy, as the kubelet's
// cgroupfs driver names it.
func (n *Node) PodCgroupDir(pod *corev1.Pod) string {
	dir := n.KubepodsDir()
	switch pod.Status.QOSClass {
	case corev1.PodQOSBurstable:
		dir = filepath.Join(dir, "burstable")
	case corev1.PodQOSBestEffort:
		dir = filepath.Join(dir, "besteffort")
	}
	return filepath.Join(dir, "pod"+string(pod.UID))
}

// PodPIDs is the kernel's count of pod's tasks: its cgroup's pids.current.
func (n *Node) PodPIDs(pod *corev1.Pod) (int64, error) {
	return ReadInt(filepath.Join(n.PodCgroupDir(pod), "pids.current"))
}

// PodProcesses lists the processes in pod's cgroup, the pause container's
// included.
func (n *Node) PodProcesses(pod *corev1.Pod) []int {
	var pids []int
	dir := n.PodCgroupDir(pod)
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "cgroup.procs" {
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				var pid int
				if _, err := fmt.Sscan(f, &pid); err == nil {
					pids = append(pids, pid)
				}
			}
		}
		return nil
	})
	return pids
}

// HostLocalDir is host-local's state directory of the node's network.
func (n *Node) HostLocalDir() string { return filepath.Join(HostLocalDataDir, n.Network) }

// HostLocalAllocations are the addresses host-local has handed out on the
// node's network: the files named by an IP in its state directory.
func (n *Node) HostLocalAllocations() (map[string]string, error) {
	entries, err := os.ReadDir(n.HostLocalDir())
	if err != nil {
		return nil, err
	}
	ips := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if strings.Count(name, ".") != 3 && !strings.Contains(name, ":") {
			continue // last_reserved_ip.0, lock
		}
		data, _ := os.ReadFile(filepath.Join(n.HostLocalDir(), name))
		ips[name] = strings.SplitN(string(data), "\n", 2)[0] // the container ID
	}
	return ips, nil
}

// HostTasks is the host's task total as the kubelet counts it (its
// rlimit.curproc, the agent's pid-used): the number after the slash in
// field 4 of /proc/loadavg.
func HostTasks() (int64, error) {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(data))
	if len(f) < 4 {
		return 0, fmt.Errorf("/proc/loadavg: %q", data)
	}
	_, total, ok := strings.Cut(f[3], "/")
	if !ok {
		return 0, fmt.Errorf("/proc/loadavg: %q", data)
	}
	return strconv.ParseInt(total, 10, 64)
}
