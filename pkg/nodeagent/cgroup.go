package nodeagent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

// DefaultCgroupRoot is where the host's cgroup filesystem is mounted.
const DefaultCgroupRoot = "/sys/fs/cgroup"

// CgroupDriver is the kubelet's cgroupDriver setting, which decides how the
// pod cgroups are named.
type CgroupDriver string

const (
	// DriverCgroupfs names pod cgroups kubepods/<qos>/pod<uid>, guaranteed
	// pods directly kubepods/pod<uid>.
	DriverCgroupfs CgroupDriver = "cgroupfs"
	// DriverSystemd names them kubepods.slice/kubepods-<qos>.slice/
	// kubepods-<qos>-pod<uid with _ for ->.slice, guaranteed pods
	// kubepods.slice/kubepods-pod<uid>.slice.
	DriverSystemd CgroupDriver = "systemd"
)

// The kubelet's names, as pkg/kubelet/cm builds them: the root cgroup
// "kubepods" (defaultNodeAllocatableCgroupName), QoS cgroups "burstable" and
// "besteffort" below it (qos_container_manager_linux.go), pod cgroups
// "pod"+UID (GetPodCgroupNameSuffix). With the systemd driver,
// CgroupName.ToSystemd joins the path components with "-", replaces "-"
// inside a component by "_" and expands the result into nested slices.
// The package is not imported for these few strings: it pulls cadvisor,
// runc's libcontainer and the device managers into a small agent.
const (
	kubepodsName   = "kubepods"
	podPrefix      = "pod"
	systemdSuffix  = ".slice"
	cgroupV1PIDs   = "pids"   // the v1 hierarchy of the pids controller
	cgroupV1Memory = "memory" // the v1 hierarchy of the memory controller
	pidsCurrent    = "pids.current"
	qosBurstable   = "burstable"
	qosBestEffort  = "besteffort"
	systemdPodsDir = kubepodsName + systemdSuffix
)

// CgroupLayout is where the kubelet's pod cgroups live on a host.
type CgroupLayout struct {
	// Dir is the kubepods cgroup directory, e.g.
	// /sys/fs/cgroup/pids/kubepods or /sys/fs/cgroup/kubepods.slice.
	Dir string
	// V1 is true for the cgroup v1 pids hierarchy, false for cgroup v2.
	V1     bool
	Driver CgroupDriver
}

// DetectCgroupLayout finds the kubepods cgroup under root in the pids
// controller's hierarchy: DetectControllerLayout(root, "pids").
func DetectCgroupLayout(root string) (CgroupLayout, error) {
	return DetectControllerLayout(root, cgroupV1PIDs)
}

// DetectControllerLayout finds the kubepods cgroup under root for a
// controller (pids, memory): its cgroup v1 hierarchy
// (root/<controller>/kubepods[.slice]) first, as on hybrid hosts the v2
// tree at root/unified carries no controller, then the v2 unified
// hierarchy (root/kubepods[.slice]). Where none is there, the same names
// one level deeper: a kubelet with a cgroupRoot of its own (kind's
// /kubelet, a test node's) nests kubepods below it. One such cgroup must be
// found there; several are an error that names them, since the agent
// cannot tell which kubelet is its node's.
func DetectControllerLayout(root, controller string) (CgroupLayout, error) {
	candidates := func(base string) []CgroupLayout {
		return []CgroupLayout{
			{Dir: filepath.Join(root, controller, base, kubepodsName), V1: true, Driver: DriverCgroupfs},
			{Dir: filepath.Join(root, controller, base, systemdPodsDir), V1: true, Driver: DriverSystemd},
			{Dir: filepath.Join(root, base, kubepodsName), Driver: DriverCgroupfs},
			{Dir: filepath.Join(root, base, systemdPodsDir), Driver: DriverSystemd},
		}
	}
	for _, c := range candidates("") {
		if isDir(c.Dir) {
			return c, nil
		}
	}
	// One level deeper: the v1 hierarchy's children on a v1 host, else the
	// v2 tree's.
	var found []CgroupLayout
	parent, v1 := root, false
	if isDir(filepath.Join(root, controller)) {
		parent, v1 = filepath.Join(root, controller), true
	}
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		for _, c := range candidates(e.Name()) {
			if c.V1 == v1 && isDir(c.Dir) {
				found = append(found, c)
			}
		}
	}
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return CgroupLayout{}, fmt.Errorf("no kubepods cgroup under %s (looked for %s, %s, %s and %s, and the same one level deeper): is --cgroup-root the host's cgroup mount, and does the kubelet run with cgroupsPerQOS?",
			root, filepath.Join(controller, kubepodsName), filepath.Join(controller, systemdPodsDir), kubepodsName, systemdPodsDir)
	default:
		dirs := make([]string, len(found))
		for i, c := range found {
			dirs[i] = c.Dir
		}
		return CgroupLayout{}, fmt.Errorf("several kubepods cgroups under %s (%s): point --cgroup-root at the one of this node's kubelet (<mount>/<cgroupRoot> on v2, <mount>/%s/<cgroupRoot> on v1)",
			root, strings.Join(dirs, ", "), controller)
	}
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

// PodCgroup is one pod's cgroup directory.
type PodCgroup struct {
	UID types.UID
	Dir string
}

// PodCgroups lists the pod cgroups of every QoS class. Directories that
// are not pod cgroups (containers of the kubelet's own, other slices) are
// skipped. Static pods are listed too: they hold memory and PIDs like any
// pod. The kubelet names their cgroups by a hash of their manifest (32 hex
// digits, pkg/kubelet/config), which their mirror pod in the API carries
// in its kubernetes.io/config.mirror annotation; the UID is that hash in
// the form of a UUID (sample.StaticPodUID), under which readers find the
// mirror pod (sample.ListUID). A QoS directory that vanishes while listed
// is skipped; an unreadable kubepods directory is an error.
func (l CgroupLayout) PodCgroups() ([]PodCgroup, error) {
	top, err := os.ReadDir(l.Dir)
	if err != nil {
		return nil, fmt.Errorf("listing pod cgroups: %w", err)
	}
	var pods []PodCgroup
	for _, e := range top {
		if !e.IsDir() {
			continue
		}
		name := e.Name()
		if uid, ok := l.podUID(name, ""); ok {
			pods = append(pods, PodCgroup{UID: uid, Dir: filepath.Join(l.Dir, name)})
			continue
		}
		qos, ok := l.qosClass(name)
		if !ok {
			continue
		}
		qosDir := filepath.Join(l.Dir, name)
		entries, err := os.ReadDir(qosDir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing pod cgroups: %w", err)
		}
		for _, pe := range entries {
			if uid, ok := l.podUID(pe.Name(), qos); ok && pe.IsDir() {
				pods = append(pods, PodCgroup{UID: uid, Dir: filepath.Join(qosDir, pe.Name())})
			}
		}
	}
	return pods, nil
}

// qosClass recognises the burstable and besteffort cgroups.
func (l CgroupLayout) qosClass(name string) (string, bool) {
	for _, qos := range []string{qosBurstable, qosBestEffort} {
		if (l.Driver == DriverCgroupfs && name == qos) ||
			(l.Driver == DriverSystemd && name == kubepodsName+"-"+qos+systemdSuffix) {
			return qos, true
		}
	}
	return "", false
}

// podUID parses a pod cgroup's name in QoS class qos ("" for guaranteed).
func (l CgroupLayout) podUID(name, qos string) (types.UID, bool) {
	var uid string
	switch l.Driver {
	case DriverCgroupfs:
		var ok bool
		if uid, ok = strings.CutPrefix(name, podPrefix); !ok {
			return "", false
		}
	case DriverSystemd:
		prefix := kubepodsName + "-"
		if qos != "" {
			prefix += qos + "-"
		}
		rest, ok := strings.CutPrefix(name, prefix+podPrefix)
		if !ok {
			return "", false
		}
		if rest, ok = strings.CutSuffix(rest, systemdSuffix); !ok {
			return "", false
		}
		uid = strings.ReplaceAll(rest, "_", "-")
	}
	return sample.StaticPodUID(uid)
}

// ReadPIDsCurrent reads pids.current of a cgroup directory: the tasks
// (threads) in the cgroup and its descendants, as the kernel counts them
// against pids.max, in v1 and v2 alike.
func ReadPIDsCurrent(dir string) (int64, error) {
	return readSysctl(filepath.Join(dir, pidsCurrent))
}
