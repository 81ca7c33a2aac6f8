package nodeagent

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

const (
	uidGuaranteed = "6a0b5b6e-2f60-4c1e-9a53-3b1c0d1e2f01"
	uidBurstable  = "6a0b5b6e-2f60-4c1e-9a53-3b1c0d1e2f02"
	uidBestEffort = "6a0b5b6e-2f60-4c1e-9a53-3b1c0d1e2f03"
)

// podDirs are the pod cgroups of the three QoS classes, relative to the
// cgroup root, as the kubelet names them with each driver.
func podDirs(v1 bool, driver CgroupDriver) map[types.UID]string {
	prefix := ""
	if v1 {
		prefix = "pids/"
	}
	if driver == DriverCgroupfs {
		return map[types.UID]string{
			uidGuaranteed: prefix + "kubepods/pod" + uidGuaranteed,
			uidBurstable:  prefix + "kubepods/burstable/pod" + uidBurstable,
			uidBestEffort: prefix + "kubepods/besteffort/pod" + uidBestEffort,
		}
	}
	u := func(s string) string { return strings.ReplaceAll(s, "-", "_") }
	return map[types.UID]string{
		uidGuaranteed: prefix + "kubepods.slice/kubepods-pod" + u(uidGuaranteed) + ".slice",
		uidBurstable:  prefix + "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u(uidBurstable) + ".slice",
		uidBestEffort: prefix + "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u(uidBestEffort) + ".slice",
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPodPIDsProbeLayouts(t *testing.T) {
	for _, v1 := range []bool{true, false} {
		for _, driver := range []CgroupDriver{DriverCgroupfs, DriverSystemd} {
			t.Run(fmt.Sprintf("v1=%v/%s", v1, driver), func(t *testing.T) {
				root := t.TempDir()
				want := map[types.UID]int64{uidGuaranteed: 40, uidBurstable: 700, uidBestEffort: 3}
				for uid, dir := range podDirs(v1, driver) {
					writeFile(t, filepath.Join(root, dir, pidsCurrent), strconv.FormatInt(want[uid], 10)+"\n")
					// A container cgroup below the pod is not a pod.
					writeFile(t, filepath.Join(root, dir, "cri-containerd-0123.scope", pidsCurrent), "1\n")
				}
				// Things the kubelet or others put next to pod cgroups.
				base := filepath.Dir(filepath.Join(root, podDirs(v1, driver)[uidGuaranteed]))
				writeFile(t, filepath.Join(base, pidsCurrent), "743\n")
				writeFile(t, filepath.Join(base, "podnot-a-uid", pidsCurrent), "99\n")
				writeFile(t, filepath.Join(base, "kubepods-podnot_a_uid.slice", pidsCurrent), "99\n")
				writeFile(t, filepath.Join(base, "system.slice", pidsCurrent), "99\n")
				// A static pod (named by its manifest's hash, listed as the
				// UUID those 32 hex digits spell, the key its mirror pod is
				// found by) and an empty pod (not listed).
				want["0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"] = 99
				if driver == DriverCgroupfs {
					writeFile(t, filepath.Join(base, "pod0a1b2c3d4e5f60718293a4b5c6d7e8f9", pidsCurrent), "99\n")
					writeFile(t, filepath.Join(base, "pod6a0b5b6e-2f60-4c1e-9a53-3b1c0d1e2f09", pidsCurrent), "0\n")
				} else {
					writeFile(t, filepath.Join(base, "kubepods-pod0a1b2c3d4e5f60718293a4b5c6d7e8f9.slice", pidsCurrent), "99\n")
					writeFile(t, filepath.Join(base, "kubepods-pod6a0b5b6e_2f60_4c1e_9a53_3b1c0d1e2f09.slice", pidsCurrent), "0\n")
				}
				if !v1 {
					// A v1 unified mount without pids must not be mistaken.
					if err := os.MkdirAll(filepath.Join(root, "unified"), 0o755); err != nil {
						t.Fatal(err)
					}
				}

				layout, err := DetectCgroupLayout(root)
				if err != nil {
					t.Fatal(err)
				}
				if layout.V1 != v1 || layout.Driver != driver {
					t.Errorf("detected %+v", layout)
				}
				s, err := (&PodPIDsProbe{CgroupRoot: root}).Sample(context.Background(), time.Now())
				if err != nil {
					t.Fatal(err)
				}
				got := map[types.UID]int64{}
				for _, e := range s.(podSample).list.Entries() {
					got[e.UID] = e.Value
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Errorf("pods %v, want %v", got, want)
				}
				if v := s.Annotations()[pidstats.AnnotationPIDPods]; !strings.HasPrefix(v, uidBurstable+"=700,") {
					t.Errorf("annotation %q not largest first", v)
				}
			})
		}
	}
}

func TestPodPIDsProbeErrors(t *testing.T) {
	root := t.TempDir()
	p := &PodPIDsProbe{CgroupRoot: root}
	s, err := p.Sample(context.Background(), time.Now())
	if err == nil || !strings.Contains(err.Error(), "no kubepods cgroup under "+root) {
		t.Fatalf("err = %v", err)
	}
	if w, ok := s.(Withdrawer); !ok || len(s.Annotations()) != 0 || !slices.Equal(w.Withdrawn(), []string{pidstats.AnnotationPIDPods}) {
		t.Fatalf("sample %v, want the list withdrawn", s)
	}
	// A pod cgroup without pids.current (it is being removed) is skipped; a
	// malformed one is reported and withdraws the list, which would be
	// incomplete without it.
	writeFile(t, filepath.Join(root, "kubepods", "burstable", "pod"+uidBurstable, "cgroup.procs"), "")
	writeFile(t, filepath.Join(root, "kubepods", "besteffort", "pod"+uidBestEffort, pidsCurrent), "lots\n")
	writeFile(t, filepath.Join(root, "kubepods", "pod"+uidGuaranteed, pidsCurrent), "12\n")
	s, err = p.Sample(context.Background(), time.Now())
	if err == nil || !strings.Contains(err.Error(), "lots") {
		t.Fatalf("err = %v", err)
	}
	if w, ok := s.(Withdrawer); !ok || len(s.Annotations()) != 0 || len(w.Withdrawn()) != 1 {
		t.Errorf("sample %v, want the list withdrawn", s)
	}
	if err := os.Remove(filepath.Join(root, "kubepods", "besteffort", "pod"+uidBestEffort, pidsCurrent)); err != nil {
		t.Fatal(err)
	}
	if s, err = p.Sample(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := s.Annotations()[pidstats.AnnotationPIDPods]; got != uidGuaranteed+"=12" {
		t.Errorf("annotation %q", got)
	}
}

// TestPodPIDsProbeOnRealCgroups builds kubepods/burstable/pod<uid>/<container>
// cgroups in this machine's cgroup v1 pids hierarchy (or cgroup v2), moves
// real processes into them and compares the probe's figure with the
// kernel's own count of the tasks in them.
func TestPodPIDsProbeOnRealCgroups(t *testing.T) {
	hierarchy, v1 := "/sys/fs/cgroup/pids", true
	if _, err := os.Stat(filepath.Join(hierarchy, "cgroup.procs")); err != nil {
		hierarchy, v1 = "/sys/fs/cgroup", false
		if _, err := os.Stat(filepath.Join(hierarchy, "cgroup.subtree_control")); err != nil {
			t.Skip("skipping: no cgroup v1 pids hierarchy at /sys/fs/cgroup/pids and no cgroup v2 at /sys/fs/cgroup")
		}
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	parent := filepath.Join(hierarchy, fmt.Sprintf("headroom-test-%x", b))
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Skipf("skipping: cannot create a cgroup under %s (needs root and a writable cgroup mount): %v", hierarchy, err)
	}
	var made []string // cgroups to remove, parents first
	made = append(made, parent)
	var procs []*exec.Cmd
	t.Cleanup(func() {
		for _, c := range procs {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		for i := len(made) - 1; i >= 0; i-- {
			// rmdir of a cgroup fails while tasks remain; they were killed
			// and reaped above, but the kernel may take a moment.
			for try := 0; ; try++ {
				err := syscall.Rmdir(made[i])
				if err == nil || os.IsNotExist(err) || try == 50 {
					if err != nil && !os.IsNotExist(err) {
						t.Errorf("removing cgroup %s: %v", made[i], err)
					}
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	})
	if !v1 {
		// cgroup v2: the pids controller must be enabled for the children.
		if err := os.WriteFile(filepath.Join(parent, "cgroup.subtree_control"), []byte("+pids"), 0o644); err != nil {
			t.Skipf("skipping: cannot enable the pids controller in %s: %v", parent, err)
		}
	}
	mkdir := func(parts ...string) string {
		dir := filepath.Join(append([]string{parent}, parts...)...)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		made = append(made, dir)
		if !v1 && len(parts) < 4 {
			if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	// The probe's root: <root>/pids/kubepods (v1) or <root>/kubepods (v2)
	// must be our test-owned tree, so a symlink stands in for the mount.
	root := t.TempDir()
	link := filepath.Join(root, "pids")
	if !v1 {
		root = filepath.Join(root, "cgroup")
		link = root
	}
	if err := os.Symlink(parent, link); err != nil {
		t.Fatal(err)
	}
	mkdir("kubepods")
	mkdir("kubepods", "burstable")
	pods := map[string]int{ // pod UID → processes per container
		"3f9c1a7e-1111-4c1e-9a53-3b1c0d1e2f01": 3,
		"3f9c1a7e-2222-4c1e-9a53-3b1c0d1e2f02": 1,
	}
	for uid, n := range pods {
		mkdir("kubepods", "burstable", "pod"+uid)
		for _, container := range []string{"c1", "c2"} {
			dir := mkdir("kubepods", "burstable", "pod"+uid, container)
			for range n {
				cmd := exec.Command("sleep", "300")
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				procs = append(procs, cmd)
				if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
					t.Fatalf("moving pid %d into %s: %v", cmd.Process.Pid, dir, err)
				}
			}
		}
	}

	s, err := (&PodPIDsProbe{CgroupRoot: root}).Sample(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	entries := s.(podSample).list.Entries()
	if len(entries) != len(pods) {
		t.Fatalf("probe saw %v, want %d pods", entries, len(pods))
	}
	for _, e := range entries {
		// The kernel's own count: the tasks (threads) listed in the pod's
		// container cgroups.
		var kernel int64
		for _, container := range []string{"c1", "c2"} {
			b, err := os.ReadFile(filepath.Join(parent, "kubepods", "burstable", "pod"+string(e.UID), container, tasksFile(v1)))
			if err != nil {
				t.Fatal(err)
			}
			kernel += int64(len(slices.DeleteFunc(strings.Split(string(b), "\n"), func(s string) bool { return s == "" })))
		}
		if want := int64(2 * pods[string(e.UID)]); kernel != want {
			t.Errorf("pod %s: kernel lists %d tasks, want %d", e.UID, kernel, want)
		}
		if e.Value != kernel {
			t.Errorf("pod %s: probe read %d PIDs, the kernel lists %d tasks", e.UID, e.Value, kernel)
		}
	}
	t.Logf("real cgroups (v1=%v) under %s: %v", v1, parent, entries)
}

func tasksFile(v1 bool) string {
	if v1 {
		return "tasks"
	}
	return "cgroup.threads"
}

// TestDetectCgroupLayoutNested: a kubelet with a cgroupRoot of its own
// nests kubepods one level down; the agent finds it there, and refuses to
// guess between two.
func TestDetectCgroupLayoutNested(t *testing.T) {
	for _, tc := range []struct {
		name, dir string
		v1        bool
		driver    CgroupDriver
	}{
		{"v1 cgroupfs", "pids/kubelet/kubepods", true, DriverCgroupfs},
		{"v1 systemd", "pids/kubelet/kubepods.slice", true, DriverSystemd},
		{"v2 cgroupfs", "kubelet/kubepods", false, DriverCgroupfs},
		{"v2 systemd", "kubelet/kubepods.slice", false, DriverSystemd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if tc.v1 {
				// Other v1 hierarchies hold the same tree; only pids counts.
				writeFile(t, filepath.Join(root, "memory", "kubelet", "kubepods", "memory.usage_in_bytes"), "1\n")
			}
			writeFile(t, filepath.Join(root, tc.dir, "pod"+uidBurstable, pidsCurrent), "7\n")
			layout, err := DetectCgroupLayout(root)
			if err != nil {
				t.Fatal(err)
			}
			if want := (CgroupLayout{Dir: filepath.Join(root, tc.dir), V1: tc.v1, Driver: tc.driver}); layout != want {
				t.Errorf("layout %+v, want %+v", layout, want)
			}
			// A second kubelet's tree beside it: no guess.
			writeFile(t, filepath.Join(root, strings.Replace(tc.dir, "kubelet", "other", 1), pidsCurrent), "1\n")
			if _, err := DetectCgroupLayout(root); err == nil || !strings.Contains(err.Error(), "several kubepods cgroups") {
				t.Errorf("two nested trees: err = %v", err)
			}
			// The top level wins over nested trees.
			writeFile(t, filepath.Join(root, strings.Replace(tc.dir, "kubelet/", "", 1), pidsCurrent), "1\n")
			if layout, err := DetectCgroupLayout(root); err != nil || layout.Dir != filepath.Join(root, strings.Replace(tc.dir, "kubelet/", "", 1)) {
				t.Errorf("top-level tree: %+v, %v", layout, err)
			}
		})
	}
}
