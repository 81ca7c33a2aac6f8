package nodeagent

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/cadvisor/container"
	"github.com/google/cadvisor/container/libcontainer"
	"github.com/opencontainers/cgroups"
	cgroupsfs "github.com/opencontainers/cgroups/fs"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-base/metrics/testutil"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// memoryFiles writes a cgroup's memory figures as the kernel shows them:
// v1 memory.usage_in_bytes and memory.stat with both the cgroup's own
// inactive_file and the hierarchical total_inactive_file (the one the rule
// takes); v2 memory.current and memory.stat's inactive_file.
func memoryFiles(t *testing.T, dir string, v1 bool, usage, inactiveFile int64) {
	t.Helper()
	if v1 {
		writeFile(t, filepath.Join(dir, memoryUsageV1), strconv.FormatInt(usage, 10)+"\n")
		writeFile(t, filepath.Join(dir, memoryStat), fmt.Sprintf("cache 0\nrss %d\ninactive_file 7\nactive_file 0\ntotal_cache 0\ntotal_rss %d\ntotal_inactive_file %d\ntotal_active_file 0\n", usage, usage, inactiveFile))
		return
	}
	writeFile(t, filepath.Join(dir, memoryCurrentV2), strconv.FormatInt(usage, 10)+"\n")
	writeFile(t, filepath.Join(dir, memoryStat), fmt.Sprintf("anon %d\nfile 0\nkernel 4096\nactive_anon 0\ninactive_anon 0\nactive_file 0\ninactive_file %d\n", usage, inactiveFile))
}

// memoryPodDirs are podDirs in the memory hierarchy.
func memoryPodDirs(v1 bool, driver CgroupDriver) map[types.UID]string {
	dirs := podDirs(v1, driver)
	for uid, d := range dirs {
		if v1 {
			dirs[uid] = cgroupV1Memory + "/" + strings.TrimPrefix(d, cgroupV1PIDs+"/")
		}
	}
	return dirs
}

// TestMemoryProbesLayouts builds the kubelet's pod cgroups of every QoS
// class with both drivers on cgroup v1 (the memory hierarchy beside the
// pids one) and v2, and reads the node's and the pods' working sets.
func TestMemoryProbesLayouts(t *testing.T) {
	const mi = 1 << 20
	for _, v1 := range []bool{true, false} {
		for _, driver := range []CgroupDriver{DriverCgroupfs, DriverSystemd} {
			t.Run(fmt.Sprintf("v1=%v/%s", v1, driver), func(t *testing.T) {
				root := t.TempDir()
				usage := map[types.UID]int64{uidGuaranteed: 512 * mi, uidBurstable: 2048 * mi, uidBestEffort: 3 * mi}
				inactive := map[types.UID]int64{uidGuaranteed: 12 * mi, uidBurstable: 48 * mi, uidBestEffort: 5 * mi}
				for uid, dir := range memoryPodDirs(v1, driver) {
					memoryFiles(t, filepath.Join(root, dir), v1, usage[uid], inactive[uid])
					// A container cgroup below the pod is not a pod.
					memoryFiles(t, filepath.Join(root, dir, "cri-containerd-0123.scope"), v1, 1, 0)
				}
				// The PID probe's pods, which the memory probe does not read.
				for _, dir := range podDirs(v1, driver) {
					writeFile(t, filepath.Join(root, dir, pidsCurrent), "3\n")
				}
				// The root cgroup: v1's usage_in_bytes, v2's anon + file.
				if v1 {
					memoryFiles(t, filepath.Join(root, cgroupV1Memory), true, 9000*mi, 1000*mi)
				} else {
					writeFile(t, filepath.Join(root, memoryStat), fmt.Sprintf("anon %d\nfile %d\ninactive_file %d\n", 6000*mi, 3000*mi, 1000*mi))
					if err := os.MkdirAll(filepath.Join(root, "unified"), 0o755); err != nil {
						t.Fatal(err)
					}
				}
				writeFile(t, filepath.Join(root, "meminfo"), "MemTotal:       16777216 kB\n")

				s, err := (&MemoryProbe{CgroupRoot: root, ProcRoot: root}).Sample(context.Background(), t0)
				if err != nil {
					t.Fatal(err)
				}
				ms := s.(memSample)
				if ms.stats.Used != 8000*mi || ms.capacity != 16<<30 {
					t.Errorf("node: working set %d, capacity %d; want %d and %d", ms.stats.Used, ms.capacity, 8000*mi, 16<<30)
				}
				if got := s.Annotations(); got[memstats.AnnotationUsed] != strconv.Itoa(8000*mi) || got[memstats.AnnotationSampledAt] != "2026-05-01T12:00:00Z" || len(got) != 2 {
					t.Errorf("node annotations %v", got)
				}

				ps, err := (&MemoryPodsProbe{CgroupRoot: root}).Sample(context.Background(), t0)
				if err != nil {
					t.Fatal(err)
				}
				want := uidBurstable + "=" + strconv.Itoa(2000*mi) + "," + uidGuaranteed + "=" + strconv.Itoa(500*mi)
				if got := ps.Annotations()[memstats.AnnotationPods]; got != want {
					t.Errorf("memory-pods %q, want %q (largest first; best-effort's inactive file above its usage: 0, not listed)", got, want)
				}
			})
		}
	}
}

func TestReadWorkingSet(t *testing.T) {
	for _, tc := range []struct {
		name  string
		v1    bool
		files map[string]string
		want  int64
		err   string
	}{
		{"v1: usage − total_inactive_file", true, map[string]string{memoryUsageV1: "1000\n", memoryStat: "inactive_file 1\ntotal_inactive_file 300\n"}, 700, ""},
		{"v1: floored at 0", true, map[string]string{memoryUsageV1: "1000\n", memoryStat: "total_inactive_file 3000\n"}, 0, ""},
		{"v1: no total_inactive_file: the usage", true, map[string]string{memoryUsageV1: "1000\n", memoryStat: "cache 3\n"}, 1000, ""},
		{"v2: memory.current − inactive_file", false, map[string]string{memoryCurrentV2: "1000\n", memoryStat: "anon 5\nfile 5\ninactive_file 250\n"}, 750, ""},
		{"v2 root: anon + file − inactive_file", false, map[string]string{memoryStat: "anon 500\nfile 700\ninactive_file 250\n"}, 950, ""},
		{"v2: a figure beyond int64 saturates", false, map[string]string{memoryCurrentV2: "18446744073709551615\n", memoryStat: "inactive_file 0\n"}, math.MaxInt64, ""},
		{"v2 root without anon", false, map[string]string{memoryStat: "file 700\n"}, 0, "no memory.current and no anon and file"},
		{"no memory.stat", false, map[string]string{memoryCurrentV2: "1\n"}, 0, "no such file"},
		{"malformed usage", true, map[string]string{memoryUsageV1: "-1\n", memoryStat: "total_inactive_file 0\n"}, 0, `"-1" is not a non-negative integer`},
		{"malformed memory.stat", false, map[string]string{memoryCurrentV2: "1\n", memoryStat: "inactive_file lots\n"}, 0, `inactive_file "lots"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tc.files {
				writeFile(t, filepath.Join(dir, name), content)
			}
			got, err := ReadWorkingSet(dir, tc.v1)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("ReadWorkingSet = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestReadMemTotal(t *testing.T) {
	for content, want := range map[string]int64{
		"MemTotal:       16384000 kB\nMemFree: 1 kB\n": 16384000 * 1024,
		"MemFree: 1 kB\nMemTotal: 1 kB\n":              1024,
		"MemTotal: 12 MB\n":                            -1,
		"MemTotal: 0 kB\n":                             -1,
		"MemTotal: 99999999999999999999 kB\n":          -1,
		"MemFree: 1 kB\n":                              -1,
	} {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, "meminfo"), content)
		got, err := ReadMemTotal(dir)
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
	if _, err := ReadMemTotal(t.TempDir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no meminfo: err = %v", err)
	}
}

func TestMemoryProbeErrors(t *testing.T) {
	root := t.TempDir()
	p := &MemoryProbe{CgroupRoot: root, ProcRoot: root}
	// No memory controller at all: unknown, not an error; nothing to write.
	writeFile(t, filepath.Join(root, "pids", "kubepods", pidsCurrent), "1\n")
	if s, err := p.Sample(context.Background(), t0); s != nil || err != nil {
		t.Fatalf("no memory controller: %v, %v; want no sample and no error", s, err)
	}
	if s, err := (&MemoryPodsProbe{CgroupRoot: root}).Sample(context.Background(), t0); s != nil || err != nil {
		t.Fatalf("per-pod, no memory controller: %v, %v; want no sample and no error", s, err)
	}
	if _, _, err := ReadNodeWorkingSet(root); err == nil || !strings.Contains(err.Error(), "no memory cgroup under "+root) {
		t.Fatalf("ReadNodeWorkingSet: %v", err)
	}
	writeFile(t, filepath.Join(root, memoryStat), "anon 1\nfile 1\ninactive_file 1\n")
	if s, err := p.Sample(context.Background(), t0); s != nil || err == nil || !strings.Contains(err.Error(), "meminfo") {
		t.Fatalf("no meminfo: %v, %v", s, err)
	}
	writeFile(t, filepath.Join(root, "meminfo"), "MemTotal: 1024 kB\n")
	// Beyond memstats.MaxBytes: not published (readers would reject it).
	writeFile(t, filepath.Join(root, memoryStat), fmt.Sprintf("anon %d\nfile 1\ninactive_file 0\n", memstats.MaxBytes))
	if s, err := p.Sample(context.Background(), t0); s != nil || err == nil || !strings.Contains(err.Error(), memstats.AnnotationUsed) {
		t.Fatalf("huge figure: %v, %v", s, err)
	}
}

func TestMemoryPodsProbeErrors(t *testing.T) {
	root := t.TempDir()
	writeFile(t, filepath.Join(root, memoryStat), "anon 1\nfile 1\ninactive_file 1\n") // a v2 root
	p := &MemoryPodsProbe{CgroupRoot: root}
	s, err := p.Sample(context.Background(), t0)
	if err == nil || !strings.Contains(err.Error(), "no kubepods cgroup under "+root) {
		t.Fatalf("err = %v", err)
	}
	if w, ok := s.(Withdrawer); !ok || len(s.Annotations()) != 0 || !slices.Equal(w.Withdrawn(), []string{memstats.AnnotationPods}) {
		t.Fatalf("sample %v, want the list withdrawn", s)
	}
	// A pod cgroup without memory files while its directory is there: the
	// memory controller is not enabled for it, which is not a pod that
	// stopped. The list would be incomplete: withdrawn.
	writeFile(t, filepath.Join(root, "kubepods", "burstable", "pod"+uidBurstable, pidsCurrent), "3\n")
	memoryFiles(t, filepath.Join(root, "kubepods", "pod"+uidGuaranteed), false, 5000, 0)
	s, err = p.Sample(context.Background(), t0)
	if err == nil || !strings.Contains(err.Error(), "has no memory figures") || !strings.Contains(err.Error(), "withdrawing "+memstats.AnnotationPods) {
		t.Fatalf("err = %v", err)
	}
	if w, ok := s.(Withdrawer); !ok || len(w.Withdrawn()) != 1 || len(s.Annotations()) != 0 {
		t.Errorf("sample %v, want the list withdrawn", s)
	}
	// A malformed figure withdraws it too.
	memoryFiles(t, filepath.Join(root, "kubepods", "burstable", "pod"+uidBurstable), false, 100, 0)
	writeFile(t, filepath.Join(root, "kubepods", "burstable", "pod"+uidBurstable, memoryCurrentV2), "lots\n")
	if _, err := p.Sample(context.Background(), t0); err == nil || !strings.Contains(err.Error(), "lots") {
		t.Fatalf("err = %v", err)
	}
	// Readable again: listed, largest first.
	memoryFiles(t, filepath.Join(root, "kubepods", "burstable", "pod"+uidBurstable), false, 100, 0)
	if s, err = p.Sample(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	if got := s.Annotations()[memstats.AnnotationPods]; got != uidGuaranteed+"=5000,"+uidBurstable+"=100" {
		t.Errorf("memory-pods %q", got)
	}
	// Nothing held anywhere: the empty list, which says every pod was
	// measured and none held anything.
	memoryFiles(t, filepath.Join(root, "kubepods", "burstable", "pod"+uidBurstable), false, 0, 0)
	memoryFiles(t, filepath.Join(root, "kubepods", "pod"+uidGuaranteed), false, 10, 20)
	if s, err = p.Sample(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	if got, ok := s.Annotations()[memstats.AnnotationPods]; !ok || got != "" {
		t.Errorf("memory-pods %q (present %v), want the empty list", got, ok)
	}
}

// TestMemoryPodsBounds: of many pods, the 32 biggest are listed, largest
// first, in at most memstats.PodListFormat.MaxBytes() — the cap the
// admission policy holds the agent to.
func TestMemoryPodsBounds(t *testing.T) {
	if MaxMemoryPodsBytes != memstats.PodListFormat.MaxBytes() || AnnotationCaps[memstats.AnnotationPods] != MaxMemoryPodsBytes {
		t.Fatalf("MaxMemoryPodsBytes %d, cap %d, memstats' bound %d", MaxMemoryPodsBytes, AnnotationCaps[memstats.AnnotationPods], memstats.PodListFormat.MaxBytes())
	}
	root := t.TempDir()
	writeFile(t, filepath.Join(root, memoryStat), "anon 1\nfile 1\ninactive_file 1\n") // a v2 root
	for i := range 40 {
		uid := fmt.Sprintf("0a1b2c3d-0000-4000-8000-%012d", i)
		usage := memstats.MaxBytes - 1 - int64(i) // the longest figures there are
		if i >= 35 {
			usage = memstats.MaxBytes * 4 // clamped to MaxBytes
		}
		memoryFiles(t, filepath.Join(root, "kubepods", "besteffort", "pod"+uid), false, usage, 0)
	}
	s, err := (&MemoryPodsProbe{CgroupRoot: root}).Sample(context.Background(), t0)
	if err != nil {
		t.Fatal(err)
	}
	v := s.Annotations()[memstats.AnnotationPods]
	l, err := memstats.PodListFormat.Parse(v)
	if err != nil {
		t.Fatal(err)
	}
	e := l.Entries()
	if len(e) != memstats.MaxListedPods || l.Complete() {
		t.Fatalf("%d entries (complete %v), want a full list of %d", len(e), l.Complete(), memstats.MaxListedPods)
	}
	if e[0].Value != memstats.MaxBytes || e[0].UID != "0a1b2c3d-0000-4000-8000-000000000035" || e[31].Value != memstats.MaxBytes-27 {
		t.Errorf("entries %v…%v", e[0], e[31])
	}
	if len(v) > MaxMemoryPodsBytes {
		t.Errorf("%d bytes, more than %d", len(v), MaxMemoryPodsBytes)
	}
	if err := CheckAnnotation(memstats.AnnotationPods, v); err != nil {
		t.Error(err)
	}
	t.Logf("full list: %d bytes (cap %d)", len(v), MaxMemoryPodsBytes)
}

func TestMemSampleChanged(t *testing.T) {
	const gi, mi = int64(1) << 30, int64(1) << 20
	h := MemoryHysteresis{Bytes: 100 * mi, Percent: 2}
	mk := func(capacity, used int64) memSample {
		return memSample{stats: memstats.NodeStats{Used: used, SampledAt: t0}, capacity: capacity, hysteresis: h}
	}
	if got := h.Threshold(64 * gi); got != 1374389535 { // 2% of 64 GiB, rounded up
		t.Errorf("threshold of 64 GiB %d", got)
	}
	if got := h.Threshold(4 * gi); got != 100*mi {
		t.Errorf("threshold of 4 GiB %d, want the 100 MiB floor", got)
	}
	last := mk(16*gi, 8*gi) // 2% of 16 GiB = 327.68 MiB
	th := h.Threshold(16 * gi)
	for _, tc := range []struct {
		name, why string
		cur       memSample
		last      Sample
		want      bool
	}{
		{"no change", "", mk(16*gi, 8*gi), last, false},
		{"up by the threshold", "", mk(16*gi, 8*gi+th), last, false},
		{"up past it", "moved by", mk(16*gi, 8*gi+th+1), last, true},
		{"down past it", "moved by", mk(16*gi, 8*gi-th-1), last, true},
		{"no memory sample written", "no memory sample", mk(16*gi, 8*gi), pidSample{}, true},
		// 1 GiB left at the last write, 934 MiB now: a tenth of that,
		// 93.4 MiB, is the threshold.
		{"near full: within a tenth of what is left", "", mk(16*gi, 15*gi+90*mi), mk(16*gi, 15*gi), false},
		{"near full: past it", "hysteresis of 97412710", mk(16*gi, 15*gi+95*mi), mk(16*gi, 15*gi), true},
		{"full: any move", "hysteresis of 0", mk(16*gi, 16*gi+1), mk(16*gi, 16*gi), true},
		// An adopted sample carries no capacity: this sample's counts.
		{"after adopting", "", mk(16*gi, 15*gi+90*mi), memSample{stats: memstats.NodeStats{Used: 15 * gi}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, why := tc.cur.Changed(tc.last)
			if got != tc.want || !strings.Contains(why, tc.why) {
				t.Errorf("Changed = %v (%q), want %v (%q)", got, why, tc.want, tc.why)
			}
		})
	}
	// One pod's figure: the bytes part alone, as pid-pods.
	const a, b = "0a1b2c3d-0000-4000-8000-00000000000a", "0a1b2c3d-0000-4000-8000-00000000000b"
	list := func(figures ...sample.PodFigure) podSample {
		return podSample{format: memstats.PodListFormat, unit: "bytes", list: memstats.PodListFormat.New(figures), hysteresis: 100 * mi}
	}
	was := list(sample.PodFigure{UID: a, Value: 4 * gi}, sample.PodFigure{UID: b, Value: 50 * mi})
	if got, _ := list(sample.PodFigure{UID: a, Value: 4*gi + 100*mi}).Changed(was); got {
		t.Error("pod a within 100 MiB and pod b (50 MiB) gone: no write")
	}
	if got, why := list(sample.PodFigure{UID: a, Value: 4*gi - 101*mi}, sample.PodFigure{UID: b, Value: 50 * mi}).Changed(was); !got || !strings.Contains(why, "pod "+a+" moved by 105906176 bytes") {
		t.Errorf("pod a down 101 MiB: Changed = %v (%q)", got, why)
	}
}

// TestTickMemory runs the memory probes through the agent's write policy:
// the hysteresis, the per-pod list written only with the node's figure,
// and its withdrawal.
func TestTickMemory(t *testing.T) {
	const gi, mi = int64(1) << 30, int64(1) << 20
	h := newHarness(t, testConfig(), nil) // 16 GiB: threshold max(100 MiB, 327.68 MiB)
	h.setPodMemory(podA, 1*gi, 0)
	h.setNodeMemory(4 * gi)
	if err := h.r.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(1)
	wantMemory := func(used, pods string) {
		t.Helper()
		a := h.node().Annotations
		if a[memstats.AnnotationUsed] != used || a[memstats.AnnotationPods] != pods {
			t.Fatalf("memory-used %q memory-pods %q, want %q and %q", a[memstats.AnnotationUsed], a[memstats.AnnotationPods], used, pods)
		}
		if _, err := memstats.ParseNode(a, h.clock.Now(), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	wantMemory(strconv.FormatInt(4*gi, 10), podA+"=1073741824")

	// Within the hysteresis: the node by 300 MiB, pod A by 90 MiB.
	h.setNodeMemory(4*gi + 300*mi)
	h.setPodMemory(podA, gi+90*mi, 0)
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(1)
	// Pod A past its 100 MiB: the list, with the node's figure of the tick.
	h.setPodMemory(podA, gi+101*mi, 0)
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(2)
	wantMemory(strconv.FormatInt(4*gi+300*mi, 10), podA+"="+strconv.FormatInt(gi+101*mi, 10))
	// The node past its threshold.
	h.setNodeMemory(4*gi + 700*mi)
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(3)

	// The node's figure fails: the list stays with the figure it was
	// taken with, even when a pod moves far.
	writeFile(t, filepath.Join(h.cgroups, memoryStat), "anon lots\n")
	h.setPodMemory(podB, 3*gi, 0)
	if err := h.tick(10 * time.Second); err == nil || !strings.Contains(err.Error(), "probe memory") {
		t.Fatalf("err = %v", err)
	}
	h.wantPatches(3)
	h.setNodeMemory(4*gi + 700*mi)

	// Pod B's cgroup unreadable: the list is withdrawn with the next write
	// of the node's figure, here forced by the node moving.
	writeFile(t, filepath.Join(h.cgroups, "kubepods", "burstable", "pod"+podB, memoryCurrentV2), "lots\n")
	h.setNodeMemory(6 * gi)
	if err := h.tick(10 * time.Second); err == nil || !strings.Contains(err.Error(), "probe memory-pods") || !strings.Contains(err.Error(), "lots") {
		t.Fatalf("err = %v", err)
	}
	h.wantPatches(4)
	if v, ok := h.node().Annotations[memstats.AnnotationPods]; ok {
		t.Errorf("memory-pods %q still there", v)
	}
	if h.node().Annotations[memstats.AnnotationUsed] != strconv.FormatInt(6*gi, 10) {
		t.Errorf("memory-used %q", h.node().Annotations[memstats.AnnotationUsed])
	}
	if got := probeErrors(t, h, MemoryPodsProbeName); got != 1 {
		t.Errorf("memory-pods probe errors %v, want 1", got)
	}
	if got := probeErrors(t, h, MemoryProbeName); got != 1 {
		t.Errorf("memory probe errors %v, want 1", got)
	}
	// Readable again: the list comes back at once.
	h.setPodMemory(podB, 3*gi, 0)
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(5)
	wantMemory(strconv.FormatInt(6*gi, 10), podB+"=3221225472,"+podA+"="+strconv.FormatInt(gi+101*mi, 10))
}

func probeErrors(t *testing.T, h *harness, probe string) float64 {
	t.Helper()
	v, err := testutil.GetCounterMetricValue(h.r.Metrics().probeErrors.WithLabelValues(probe))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestWorkingSetMatchesCAdvisor holds the agent's reader to the kubelet's
// own: cAdvisor's libcontainer handler (the code behind the Summary API's
// workingSetBytes) over runc's cgroup v1 reader, on the machine's root
// memory cgroup and on a pod cgroup made here with a process holding 64 MiB.
func TestWorkingSetMatchesCAdvisor(t *testing.T) {
	hierarchy := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(hierarchy, memoryUsageV1)); err != nil {
		t.Skip("skipping: no cgroup v1 memory hierarchy at /sys/fs/cgroup/memory (on cgroup v2 cAdvisor recognises only /sys/fs/cgroup as the root)")
	}
	cadvisor := func(dir string) uint64 {
		t.Helper()
		m, err := cgroupsfs.NewManager(&cgroups.Cgroup{Resources: &cgroups.Resources{}}, map[string]string{"memory": dir})
		if err != nil {
			t.Fatal(err)
		}
		st, err := libcontainer.NewHandler(m, "/", 0, container.MetricSet{container.MemoryUsageMetrics: struct{}{}}).GetStats()
		if err != nil {
			t.Fatal(err)
		}
		return st.Memory.WorkingSet
	}
	// The machine's working set moves between two reads: ours must lie
	// within what cAdvisor read just before and just after, give or take
	// 1 MiB (page cache of other work coming and going).
	const slack = 1 << 20
	before := cadvisor(hierarchy)
	ours, dir, err := ReadNodeWorkingSet("/sys/fs/cgroup")
	after := cadvisor(hierarchy)
	if err != nil || dir != hierarchy {
		t.Fatalf("ReadNodeWorkingSet = %d, %s, %v", ours, dir, err)
	}
	if lo, hi := min(before, after), max(before, after); uint64(ours)+slack < lo || uint64(ours) > hi+slack {
		t.Errorf("root: agent %d, cAdvisor %d then %d", ours, before, after)
	}
	t.Logf("root working set: agent %d, cAdvisor %d / %d", ours, before, after)

	var b [6]byte
	_, _ = rand.Read(b[:])
	pod := filepath.Join(hierarchy, fmt.Sprintf("headroom-test-%x", b))
	if err := os.Mkdir(pod, 0o755); err != nil {
		t.Skipf("skipping: cannot create a cgroup under %s (needs root): %v", hierarchy, err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHoldMemoryHelper$")
	cmd.Env = append(os.Environ(), "HEADROOM_HOLD_MEMORY=64")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		for try := 0; try < 50; try++ {
			if err := syscall.Rmdir(pod); err == nil || os.IsNotExist(err) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Errorf("could not remove %s", pod)
	})
	if err := os.WriteFile(filepath.Join(pod, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The helper allocates once it is in the cgroup, then says so.
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := stdout.Read(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "holding") {
		t.Fatalf("helper: %q, %v", buf[:n], err)
	}
	theirs := cadvisor(pod)
	ws, err := ReadWorkingSet(pod, true)
	if err != nil {
		t.Fatal(err)
	}
	if d := int64(theirs) - ws; d > slack || d < -slack {
		t.Errorf("pod cgroup: agent %d, cAdvisor %d", ws, theirs)
	}
	if ws < 64<<20 {
		t.Errorf("pod cgroup: working set %d, less than the 64 MiB its process touched", ws)
	}
	t.Logf("pod cgroup holding 64 MiB: agent %d, cAdvisor %d", ws, theirs)
}

// TestHoldMemoryHelper is TestWorkingSetMatchesCAdvisor's child process: it
// touches HEADROOM_HOLD_MEMORY MiB and waits to be killed.
func TestHoldMemoryHelper(t *testing.T) {
	mib, err := strconv.Atoi(os.Getenv("HEADROOM_HOLD_MEMORY"))
	if err != nil {
		t.Skip("a helper process of TestWorkingSetMatchesCAdvisor")
	}
	// Wait until moved into the cgroup: the parent writes a line then.
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	held := make([]byte, mib<<20)
	for i := range held {
		held[i] = 1
	}
	fmt.Println("holding")
	time.Sleep(time.Hour)
	_ = held[len(held)-1]
}
