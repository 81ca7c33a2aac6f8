package realnode

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// cgroupMount is the host's cgroup filesystem.
const cgroupMount = "/sys/fs/cgroup"

// cgroups are the hierarchies the kubelet's cgroupRoot must exist in: the
// v1 controllers' mounts, or the one v2 tree.
type cgroups struct {
	V2 bool `json:"v2"`
	// Hierarchies are the v1 mounts (e.g. /sys/fs/cgroup/pids), or the v2
	// mount alone.
	Hierarchies []string `json:"hierarchies"`
}

func detectCgroups() (cgroups, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(cgroupMount, &st); err != nil {
		return cgroups{}, fmt.Errorf("no cgroup filesystem at %s: %v", cgroupMount, err)
	}
	const cgroup2Magic = 0x63677270
	if st.Type == cgroup2Magic {
		return cgroups{V2: true, Hierarchies: []string{cgroupMount}}, nil
	}
	entries, err := os.ReadDir(cgroupMount)
	if err != nil {
		return cgroups{}, err
	}
	var c cgroups
	for _, e := range entries {
		// The v1 controllers and the named systemd hierarchy, which the
		// kubelet checks too; not "unified", a v2 tree without controllers
		// on hybrid hosts.
		if !e.IsDir() || e.Name() == "unified" {
			continue
		}
		p := filepath.Join(cgroupMount, e.Name())
		if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeSymlink != 0 {
			continue // cpu and cpuacct are often links to cpu,cpuacct
		}
		c.Hierarchies = append(c.Hierarchies, p)
	}
	if _, err := os.Stat(filepath.Join(cgroupMount, "pids", "cgroup.procs")); err != nil {
		return cgroups{}, fmt.Errorf("cgroup v1 without a pids hierarchy at %s/pids", cgroupMount)
	}
	return c, nil
}

// pidsDir is the node cgroup's directory in the hierarchy of the pids
// controller.
func (c cgroups) pidsDir(name string) string {
	if c.V2 {
		return filepath.Join(cgroupMount, name)
	}
	return filepath.Join(cgroupMount, "pids", name)
}

// memoryDir is the node cgroup's directory in the hierarchy of the memory
// controller.
func (c cgroups) memoryDir(name string) string {
	if c.V2 {
		return filepath.Join(cgroupMount, name)
	}
	return filepath.Join(cgroupMount, "memory", name)
}

// create makes the cgroup name in every hierarchy. A new v1 cpuset cgroup
// has no CPUs and no memory nodes, and no task can join it until it is
// given its parent's.
func (c cgroups) create(name string) error {
	for _, h := range c.Hierarchies {
		dir := filepath.Join(h, name)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("making cgroup %s: %w", dir, err)
		}
		if !c.V2 && strings.Contains(filepath.Base(h), "cpuset") {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
					return fmt.Errorf("%s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// procs lists the processes in the cgroup name and below it.
func (c cgroups) procs(name string) []int {
	var pids []int
	_ = filepath.WalkDir(c.pidsDir(name), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		data, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// remove removes the cgroup name and everything below it in every
// hierarchy, deepest first (a cgroup goes only once it has no children and
// no tasks).
func (c cgroups) remove(name string) error {
	var errs []error
	hierarchies := c.Hierarchies
	if !c.V2 {
		// On hybrid hosts the kubelet nests its cgroups in the v2 tree at
		// unified too, without being asked to.
		hierarchies = append(hierarchies[:len(hierarchies):len(hierarchies)], filepath.Join(cgroupMount, "unified"))
	}
	for _, h := range hierarchies {
		root := filepath.Join(h, name)
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) })
		for _, d := range dirs {
			if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
				errs = append(errs, fmt.Errorf("rmdir %s: %w", d, err))
			}
		}
	}
	return errors.Join(errs...)
}
