package nodeagent

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/headroom-k8s/headroom/pkg/memstats"
)

// swapFiles writes a pod cgroup's swap figures as the kernel shows them:
// v2 memory.swap.current; v1 memory.memsw.usage_in_bytes (memory + swap)
// beside memory.usage_in_bytes, or, with memswFile false, only memory.stat
// with the hierarchical total_swap (and the cgroup's own swap, smaller,
// which the rule must not take).
func swapFiles(t *testing.T, dir string, v1, memswFile bool, usage, swap int64) {
	t.Helper()
	memoryFiles(t, dir, v1, usage, 0)
	switch {
	case !v1:
		writeFile(t, filepath.Join(dir, swapCurrentV2), strconv.FormatInt(swap, 10)+"\n")
	case memswFile:
		writeFile(t, filepath.Join(dir, memswUsageV1), strconv.FormatInt(usage+swap, 10)+"\n")
	default:
		writeFile(t, filepath.Join(dir, memoryStat), fmt.Sprintf("cache 0\nrss %d\nswap 4096\ntotal_rss %d\ntotal_swap %d\ntotal_inactive_file 0\n", usage, usage, swap))
	}
}

// TestSwapProbesLayouts reads the node's swap space and its pods' swap on
// fake cgroup v1 trees (with memory.memsw.usage_in_bytes, and with only
// memory.stat's total_swap) and v2 trees, with both drivers; and publishes
// nothing on a node without swap.
func TestSwapProbesLayouts(t *testing.T) {
	const mi = 1 << 20
	for _, c := range []struct {
		v1, memsw bool
	}{{true, true}, {true, false}, {false, false}} {
		for _, driver := range []CgroupDriver{DriverCgroupfs, DriverSystemd} {
			t.Run(fmt.Sprintf("v1=%v/memsw=%v/%s", c.v1, c.memsw, driver), func(t *testing.T) {
				root := t.TempDir()
				swap := map[types.UID]int64{uidGuaranteed: 0, uidBurstable: 300 * mi, uidBestEffort: 700 * mi}
				for uid, dir := range memoryPodDirs(c.v1, driver) {
					swapFiles(t, filepath.Join(root, dir), c.v1, c.memsw, 100*mi, swap[uid])
				}
				if c.v1 {
					memoryFiles(t, filepath.Join(root, cgroupV1Memory), true, 900*mi, 0)
				} else {
					writeFile(t, filepath.Join(root, memoryStat), fmt.Sprintf("anon %d\nfile 0\ninactive_file 0\n", 900*mi))
				}
				meminfo := filepath.Join(root, "meminfo")
				writeFile(t, meminfo, "MemTotal:       16777216 kB\nSwapCached:            0 kB\nSwapTotal:       4194304 kB\nSwapFree:        3170304 kB\n")

				mp := &MemoryProbe{CgroupRoot: root, ProcRoot: root}
				s, err := mp.Sample(context.Background(), t0)
				if err != nil {
					t.Fatal(err)
				}
				if got := s.Annotations()[memstats.AnnotationSwapTotal]; got != strconv.Itoa(4<<30) {
					t.Errorf("swap-total %q, want %d", got, 4<<30)
				}
				ps, err := (&SwapPodsProbe{CgroupRoot: root, ProcRoot: root}).Sample(context.Background(), t0)
				if err != nil {
					t.Fatal(err)
				}
				want := uidBestEffort + "=" + strconv.Itoa(700*mi) + "," + uidBurstable + "=" + strconv.Itoa(300*mi)
				if got := ps.Annotations()[memstats.AnnotationSwapPods]; got != want {
					t.Errorf("swap-pods %q, want %q (largest first; nothing swapped: not listed)", got, want)
				}

				// swapoff: no swap figures, and those written are withdrawn.
				writeFile(t, meminfo, "MemTotal:       16777216 kB\nSwapTotal:             0 kB\n")
				if ps, err := (&SwapPodsProbe{CgroupRoot: root, ProcRoot: root}).Sample(context.Background(), t0); ps != nil || err != nil {
					t.Errorf("without swap the swap-pods probe sampled %v, %v", ps, err)
				}
				s, err = mp.Sample(context.Background(), t0)
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := s.Annotations()[memstats.AnnotationSwapTotal]; ok {
					t.Error("swap-total written on a node without swap")
				}
				if w := s.(Withdrawer).Withdrawn(); len(w) != 2 {
					t.Errorf("withdrawn %v, want both swap annotations", w)
				}
				// A node that never had swap writes no withdrawals either.
				s, _ = (&MemoryProbe{CgroupRoot: root, ProcRoot: root}).Sample(context.Background(), t0)
				if w := s.(Withdrawer).Withdrawn(); len(w) != 0 {
					t.Errorf("a node that never had swap withdraws %v", w)
				}
			})
		}
	}
}

// A pod cgroup without swap figures on a node with swap (v1 without swap
// accounting) withdraws the list with an error naming the cgroup.
func TestSwapPodsWithoutSwapAccounting(t *testing.T) {
	root := t.TempDir()
	for _, dir := range memoryPodDirs(true, DriverCgroupfs) {
		memoryFiles(t, filepath.Join(root, dir), true, 1<<20, 0)
	}
	memoryFiles(t, filepath.Join(root, cgroupV1Memory), true, 1<<30, 0)
	writeFile(t, filepath.Join(root, "meminfo"), "MemTotal: 1048576 kB\nSwapTotal: 1024 kB\n")
	s, err := (&SwapPodsProbe{CgroupRoot: root, ProcRoot: root}).Sample(context.Background(), t0)
	if err == nil || s == nil || len(s.(Withdrawer).Withdrawn()) != 1 {
		t.Fatalf("got %v, %v; want the list withdrawn with an error", s, err)
	}
}

func TestReadSwapTotal(t *testing.T) {
	for content, want := range map[string]int64{
		"MemTotal: 1024 kB\n":                      0, // a kernel without swap
		"MemTotal: 1024 kB\nSwapTotal: 0 kB\n":     0,
		"MemTotal: 1024 kB\nSwapTotal: 2048 kB\n":  2048 * 1024,
		"SwapTotal:       4194304 kB\nMemTotal: 1": 4 << 30,
		"SwapTotal: lots kB\n":                     -1,
		"SwapTotal: -1 kB\n":                       -1,
		"SwapTotal: 2048\n":                        -1,
		"SwapTotal: 1099511627777 kB\n":            -1, // beyond memstats.MaxBytes
	} {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "meminfo"), content)
		got, err := ReadSwapTotal(dir)
		if want < 0 {
			if err == nil {
				t.Errorf("%q: %d, want an error", content, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", content, got, err, want)
		}
	}
}
