package nodeagent

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/memstats"
)

// Working set, as the kubelet computes it. The kubelet's Summary API takes
// a cgroup's memory.workingSetBytes from cAdvisor
// (pkg/kubelet/stats/helper.go cadvisorInfoToMemoryStats), which sets it in
// container/libcontainer/handler.go setMemoryStats from runc's cgroup
// readers (github.com/opencontainers/cgroups fs and fs2):
//
//	working set = usage − inactive file, 0 when inactive file exceeds usage
//
// with usage memory.usage_in_bytes and inactive file total_inactive_file of
// memory.stat on cgroup v1, memory.current and inactive_file on cgroup v2;
// without that key in memory.stat, the usage. The v2 root cgroup has no
// memory.current: runc's fs2 (rootStatsFromMeminfo) takes anon + file of
// its memory.stat as the usage, the counterpart of v1's root
// usage_in_bytes. containerd's CRI stats (getWorkingSet, getWorkingSetV2)
// apply the same rule. The node's figure is the root cgroup's: the Summary
// API's node memory is cAdvisor's root container "/" (pkg/kubelet/server/
// stats/summary.go), and the eviction manager's memory.available is the
// node's capacity less it.
//
// These few files are read here rather than through cAdvisor or runc's
// packages, for the reason cgroup.go gives for the kubelet's names: those
// pull in far more than a small agent needs, and runc's fs2 recognises the
// root cgroup only at /sys/fs/cgroup, where the agent's mount is not.
// TestWorkingSetMatchesCAdvisor holds the two readers together on real
// cgroups.
const (
	memoryUsageV1   = "memory.usage_in_bytes"
	memoryCurrentV2 = "memory.current"
	memoryStat      = "memory.stat"
	inactiveFileV1  = "total_inactive_file"
	inactiveFileV2  = "inactive_file"
	anonV2, fileV2  = "anon", "file"
	memTotalPrefix  = "MemTotal:"
)

// Swap, as the kernel counts it per cgroup. cgroup v2: memory.swap.current
// (the cgroup's and its descendants' swap, hierarchical like
// memory.current). cgroup v1 with swap accounting: memory.memsw.usage_in_bytes
// − memory.usage_in_bytes (memory+swap less memory, both hierarchical),
// or, where the memsw file is not there, total_swap of memory.stat (the
// hierarchical swap; v1 memory.stat's swap counts the cgroup's own pages
// only, and a pod's pages are its containers'). The node's swap space is
// SwapTotal of meminfo, in kB, as the kernel's totalpages of oom_badness
// adds it to RAM.
const (
	swapCurrentV2   = "memory.swap.current"
	memswUsageV1    = "memory.memsw.usage_in_bytes"
	totalSwapV1     = "total_swap"
	swapTotalPrefix = "SwapTotal:"
)

// MemoryHysteresis is when a change of the node's working set is worth a
// Node write.
type MemoryHysteresis struct {
	// Bytes and Percent (of the node's memory capacity) set the threshold
	// together: the working set must move by more than the larger of the
	// two since the last write. Bytes is also the threshold of one pod's
	// figure in memory-pods. Zero disables either part.
	Bytes   int64
	Percent float64
}

// Threshold is the hysteresis in bytes for a node of the given capacity:
// max(Bytes, Percent% of capacity).
func (h MemoryHysteresis) Threshold(capacity int64) int64 {
	return threshold(h.Bytes, h.Percent, capacity)
}

// MemoryProbe publishes the node's memory working set (memstats'
// memory-used and memory-sampled-at), read from the root cgroup as the
// kubelet reads it.
type MemoryProbe struct {
	CgroupRoot string
	// ProcRoot is where meminfo is read: the node's capacity (MemTotal, as
	// cAdvisor's machine info and so the Node's capacity.memory), for the
	// hysteresis.
	ProcRoot   string
	Hysteresis MemoryHysteresis
	// MaxAge is how old an adopted sample may be (the max interval).
	MaxAge time.Duration

	unknownLogged bool // "no memory controller" was logged
	// hadSwap: the node had swap figures (sampled, or in the annotations
	// adopted at start); a sample without swap then withdraws them.
	hadSwap bool
}

// MemoryProbeName is the MemoryProbe's name in logs and metrics.
const MemoryProbeName = "memory"

// Name implements Probe.
func (p *MemoryProbe) Name() string { return MemoryProbeName }

// Sample implements Probe. Where --cgroup-root holds no memory controller
// at all (no v1 memory hierarchy, no v2 root memory.stat: a kernel whose v2
// root has no statistics yet, where the kubelet's own root figures are
// incomplete, or a tree without one), the node's memory is unknown, not an
// error: nothing is published, readers keep to the pods' declarations, and
// that is logged once, as for an IPAM the agent cannot read.
func (p *MemoryProbe) Sample(ctx context.Context, now time.Time) (Sample, error) {
	logger := klog.FromContext(ctx)
	if _, _, ok := memoryHierarchy(p.CgroupRoot); !ok {
		if !p.unknownLogged {
			logger.Info("Memory is unknown on this node; publishing no memory figures",
				"reason", fmt.Sprintf("no memory controller under %s (neither %s nor %s)", p.CgroupRoot,
					filepath.Join(cgroupV1Memory, memoryUsageV1), memoryStat))
			p.unknownLogged = true
		}
		return nil, nil
	}
	if p.unknownLogged {
		logger.Info("Memory figures readable again", "cgroupRoot", p.CgroupRoot)
		p.unknownLogged = false
	}
	used, where, err := ReadNodeWorkingSet(p.CgroupRoot)
	if err != nil {
		return nil, err
	}
	capacity, err := ReadMemTotal(p.ProcRoot)
	if err != nil {
		return nil, err
	}
	swap, err := ReadSwapTotal(p.ProcRoot)
	if err != nil {
		return nil, err
	}
	s := memstats.NodeStats{Used: used, SampledAt: now, SwapTotal: swap}
	withdrawSwap := swap == 0 && p.hadSwap
	p.hadSwap = p.hadSwap || swap > 0
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	logger.V(5).Info("Read the node's working set", "cgroup", where, "workingSetBytes", used, "capacityBytes", capacity, "swapBytes", swap)
	return memSample{stats: s, capacity: capacity, hysteresis: p.Hysteresis, withdrawSwap: withdrawSwap}, nil
}

// Adopt implements Probe: the node's memory annotations are adopted when
// they parse and are younger than MaxAge.
func (p *MemoryProbe) Adopt(annotations map[string]string, now time.Time) (Sample, error) {
	s, err := memstats.ParseNode(annotations, now, p.MaxAge)
	if err != nil {
		return nil, err
	}
	s.Pods = memstats.NodeStats{}.Pods // the per-pod probe's
	s.SwapPods = memstats.NodeStats{}.SwapPods
	_, total := annotations[memstats.AnnotationSwapTotal]
	_, pods := annotations[memstats.AnnotationSwapPods]
	p.hadSwap = p.hadSwap || total || pods
	return memSample{stats: s, hysteresis: p.Hysteresis}, nil
}

type memSample struct {
	stats memstats.NodeStats
	// capacity is the node's memory in bytes (MemTotal); 0 in an adopted
	// sample, whose annotations do not carry it.
	capacity   int64
	hysteresis MemoryHysteresis
	// withdrawSwap: the node has no swap now but had swap figures written.
	withdrawSwap bool
}

func (s memSample) Annotations() map[string]string { return s.stats.Annotations() }

// Withdrawn implements Withdrawer: a node whose swap is gone (swapoff
// since the figures were written) carries no swap figures, which would
// otherwise stay from an earlier sample.
func (s memSample) Withdrawn() []string {
	if !s.withdrawSwap {
		return nil
	}
	return []string{memstats.AnnotationSwapTotal, memstats.AnnotationSwapPods}
}
func (s memSample) SampledAt() time.Time { return s.stats.SampledAt }
func (s memSample) String() string {
	return fmt.Sprintf("workingSet=%d capacity=%d swap=%d", s.stats.Used, s.capacity, s.stats.SwapTotal)
}

// Changed writes the working set when it moved by more than the hysteresis
// threshold, which near exhaustion shrinks to a tenth of the memory left
// (capacity − working set, by this sample or the last written, whichever
// leaves less): the kubelet's memory.available, which its eviction
// thresholds (100Mi by default) watch.
func (s memSample) Changed(last Sample) (bool, string) {
	l, ok := last.(memSample)
	if !ok {
		return true, "no memory sample written"
	}
	if s.capacity > 0 && s.stats.SwapTotal != l.stats.SwapTotal {
		return true, fmt.Sprintf("swap space changed from %d to %d bytes", l.stats.SwapTotal, s.stats.SwapTotal)
	}
	delta := s.stats.Used - l.stats.Used // both in [0, MaxBytes]
	if delta < 0 {
		delta = -delta
	}
	th := s.hysteresis.Threshold(s.capacity)
	if s.capacity > 0 {
		avail := max(min(s.capacity-s.stats.Used, s.capacity-l.stats.Used), 0)
		if nearFull := avail / nearFullDivisor; nearFull < th {
			th = nearFull
		}
	}
	if delta > th {
		return true, fmt.Sprintf("working set moved by %d bytes, more than the hysteresis of %d", delta, th)
	}
	return false, ""
}

// MemoryPodsProbe publishes the working sets of the node's biggest memory
// users as memstats.AnnotationPods, read from each pod's cgroup in the
// memory hierarchy: the pod cgroups the PID probe reads in the pids one.
type MemoryPodsProbe struct {
	CgroupRoot string
	// HysteresisBytes: the list is worth a write when some pod's figure
	// moved by more than this since the last write (a pod entering or
	// leaving the list counts from or to 0).
	HysteresisBytes int64
}

// MemoryPodsProbeName is the MemoryPodsProbe's name in logs and metrics.
const MemoryPodsProbeName = "memory-pods"

// Name implements Probe.
func (p *MemoryPodsProbe) Name() string { return MemoryPodsProbeName }

// DependsOn implements Dependent: the list is one sample with the node's
// working set, so it is written only together with a fresh MemoryProbe
// sample.
func (p *MemoryPodsProbe) DependsOn() string { return MemoryProbeName }

// Sample implements Probe, with PodPIDsProbe's completeness rule: the list
// names every pod with a working set, or it is withdrawn (with the error)
// when the kubepods cgroup cannot be found or listed or one pod's figures
// cannot be read. A pod whose cgroup vanishes while it is read is skipped;
// a pod cgroup without the memory files is an error (the memory controller
// is not enabled there), not a pod that stopped.
func (p *MemoryPodsProbe) Sample(ctx context.Context, now time.Time) (Sample, error) {
	if _, _, ok := memoryHierarchy(p.CgroupRoot); !ok {
		return nil, nil // the node's memory is unknown (MemoryProbe)
	}
	return samplePodList(ctx, p.CgroupRoot, cgroupV1Memory, func(pod PodCgroup, l CgroupLayout) (int64, error) {
		n, err := ReadWorkingSet(pod.Dir, l.V1)
		if errors.Is(err, fs.ErrNotExist) && isDir(pod.Dir) {
			return 0, fmt.Errorf("pod cgroup %s has no memory figures (is the memory controller enabled for it?): %v", pod.Dir, err)
		}
		return n, err
	}, p.emptySample())
}

// Adopt implements Probe.
func (p *MemoryPodsProbe) Adopt(annotations map[string]string, _ time.Time) (Sample, error) {
	return adoptPodList(annotations, p.emptySample())
}

func (p *MemoryPodsProbe) emptySample() podSample {
	return podSample{format: memstats.PodListFormat, unit: "bytes", hysteresis: p.HysteresisBytes}
}

// SwapPodsProbe publishes what the node's biggest swap users have swapped
// out as memstats.AnnotationSwapPods, read from each pod's cgroup in the
// memory hierarchy, on a node with swap (SwapTotal of meminfo above 0);
// elsewhere it publishes nothing. It is the memory-pods probe's
// counterpart for swap: the kernel's oom_badness counts a task's swap
// entries with its resident memory.
type SwapPodsProbe struct {
	CgroupRoot string
	// ProcRoot is where meminfo is read (SwapTotal).
	ProcRoot string
	// HysteresisBytes: as MemoryPodsProbe's.
	HysteresisBytes int64
}

// SwapPodsProbeName is the SwapPodsProbe's name in logs and metrics.
const SwapPodsProbeName = "swap-pods"

// Name implements Probe.
func (p *SwapPodsProbe) Name() string { return SwapPodsProbeName }

// DependsOn implements Dependent: the list is one sample with the node's
// working set and swap space.
func (p *SwapPodsProbe) DependsOn() string { return MemoryProbeName }

// Sample implements Probe, with MemoryPodsProbe's completeness rule. A pod
// cgroup without the swap figures on a node with swap (v1 without swap
// accounting, swapaccount=0) withdraws the list with an error naming the
// file: readers then count no pod's swap, as on a node without it.
func (p *SwapPodsProbe) Sample(ctx context.Context, now time.Time) (Sample, error) {
	if _, _, ok := memoryHierarchy(p.CgroupRoot); !ok {
		return nil, nil // the node's memory is unknown (MemoryProbe)
	}
	swap, err := ReadSwapTotal(p.ProcRoot)
	if err != nil {
		return nil, err
	}
	if swap == 0 {
		return nil, nil // no swap: MemoryProbe withdraws the swap figures
	}
	return samplePodList(ctx, p.CgroupRoot, cgroupV1Memory, func(pod PodCgroup, l CgroupLayout) (int64, error) {
		n, err := ReadSwap(pod.Dir, l.V1)
		if errors.Is(err, fs.ErrNotExist) && isDir(pod.Dir) {
			return 0, fmt.Errorf("pod cgroup %s has no swap figures (is swap accounted for cgroups?): %v", pod.Dir, err)
		}
		return n, err
	}, p.emptySample())
}

// Adopt implements Probe.
func (p *SwapPodsProbe) Adopt(annotations map[string]string, _ time.Time) (Sample, error) {
	return adoptPodList(annotations, p.emptySample())
}

func (p *SwapPodsProbe) emptySample() podSample {
	return podSample{format: memstats.SwapPodListFormat, unit: "bytes", hysteresis: p.HysteresisBytes}
}

// ReadSwap reads what the cgroup in dir has swapped out, in bytes (see the
// rule above), v1 for a cgroup v1 memory hierarchy. Errors name the file; a
// missing file's error wraps fs.ErrNotExist.
func ReadSwap(dir string, v1 bool) (int64, error) {
	if !v1 {
		n, err := readCgroupUint(filepath.Join(dir, swapCurrentV2))
		return int64(min(n, math.MaxInt64)), err
	}
	memsw, err := readCgroupUint(filepath.Join(dir, memswUsageV1))
	if errors.Is(err, fs.ErrNotExist) {
		stat, serr := readMemoryStat(filepath.Join(dir, memoryStat))
		if serr != nil {
			return 0, serr
		}
		if n, ok := stat[totalSwapV1]; ok {
			return int64(min(n, math.MaxInt64)), nil
		}
		return 0, fmt.Errorf("%s: no %s and no %s in %s", dir, memswUsageV1, totalSwapV1, memoryStat)
	}
	if err != nil {
		return 0, err
	}
	usage, err := readCgroupUint(filepath.Join(dir, memoryUsageV1))
	if err != nil {
		return 0, err
	}
	// The two files are read one after the other: memory may move in
	// between, never below 0 swap.
	if memsw < usage {
		return 0, nil
	}
	return int64(min(memsw-usage, math.MaxInt64)), nil
}

// memoryHierarchy is the root cgroup of the memory controller under
// cgroupRoot (the host's cgroup mount): the v1 memory hierarchy
// (<root>/memory) where there is one, else the v2 root when it has
// memory.stat; ok false for neither.
func memoryHierarchy(cgroupRoot string) (dir string, v1, ok bool) {
	v1Dir := filepath.Join(cgroupRoot, cgroupV1Memory)
	if _, err := os.Stat(filepath.Join(v1Dir, memoryUsageV1)); err == nil {
		return v1Dir, true, true
	}
	if _, err := os.Stat(filepath.Join(cgroupRoot, memoryStat)); err == nil {
		return cgroupRoot, false, true
	}
	return "", false, false
}

// ReadNodeWorkingSet reads the node's working set from the root cgroup of
// the memory controller under cgroupRoot (memoryHierarchy). It returns the
// cgroup directory it read, for messages.
func ReadNodeWorkingSet(cgroupRoot string) (int64, string, error) {
	dir, v1, ok := memoryHierarchy(cgroupRoot)
	if !ok {
		return 0, cgroupRoot, fmt.Errorf("no memory cgroup under %s (looked for %s and %s): is --cgroup-root the host's cgroup mount?",
			cgroupRoot, filepath.Join(cgroupV1Memory, memoryUsageV1), memoryStat)
	}
	n, err := ReadWorkingSet(dir, v1)
	return n, dir, err
}

// ReadWorkingSet reads the working set of the cgroup in dir (see the rule
// above), v1 for a cgroup v1 memory hierarchy. Errors name the file; a
// missing file's error wraps fs.ErrNotExist.
func ReadWorkingSet(dir string, v1 bool) (int64, error) {
	usageFile, inactiveKey := memoryUsageV1, inactiveFileV1
	if !v1 {
		usageFile, inactiveKey = memoryCurrentV2, inactiveFileV2
	}
	stat, err := readMemoryStat(filepath.Join(dir, memoryStat))
	if err != nil {
		return 0, err
	}
	var usage uint64
	switch u, err := readCgroupUint(filepath.Join(dir, usageFile)); {
	case err == nil:
		usage = u
	case !v1 && errors.Is(err, fs.ErrNotExist):
		// The v2 root cgroup: anon + file stand for its usage, as in runc.
		anon, okA := stat[anonV2]
		file, okF := stat[fileV2]
		if !okA || !okF {
			return 0, fmt.Errorf("%s: no %s and no %s and %s in %s", dir, usageFile, anonV2, fileV2, memoryStat)
		}
		usage = anon + file
	default:
		return 0, err
	}
	ws := usage
	if inactive, ok := stat[inactiveKey]; ok {
		if ws < inactive {
			ws = 0
		} else {
			ws -= inactive
		}
	}
	return int64(min(ws, math.MaxInt64)), nil
}

// readMemoryStat reads the "<key> <value>" lines of memory.stat that the
// working set needs, strictly.
func readMemoryStat(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	want := map[string]bool{inactiveFileV1: true, inactiveFileV2: true, anonV2: true, fileV2: true, totalSwapV1: true}
	stat := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		key, v, ok := strings.Cut(sc.Text(), " ")
		if !ok || !want[key] {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %s %q is not a non-negative integer", path, key, v)
		}
		stat[key] = n
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	return stat, nil
}

// readCgroupUint reads a cgroup file holding one non-negative integer and
// a newline.
func readCgroupUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	v := strings.TrimSuffix(string(b), "\n")
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a non-negative integer", path, v)
	}
	return n, nil
}

// ReadSwapTotal reads the node's swap space in bytes from
// <procRoot>/meminfo (SwapTotal, in kB); 0 without swap. A meminfo without
// a SwapTotal line (a kernel built without swap) has none.
func ReadSwapTotal(procRoot string) (int64, error) {
	n, found, err := readMeminfo(procRoot, swapTotalPrefix, true)
	if err != nil || !found {
		return 0, err
	}
	return n, nil
}

// ReadMemTotal reads the node's memory capacity in bytes from
// <procRoot>/meminfo (MemTotal, in kB), as cAdvisor's machine info does for
// the Node's capacity.memory.
func ReadMemTotal(procRoot string) (int64, error) {
	n, found, err := readMeminfo(procRoot, memTotalPrefix, false)
	if err == nil && !found {
		err = fmt.Errorf("%s has no %s line", filepath.Join(procRoot, "meminfo"), memTotalPrefix)
	}
	return n, err
}

// readMeminfo reads the line of <procRoot>/meminfo with prefix, a size in
// kB, in bytes: positive (zero too where zeroOK), at most memstats.MaxBytes.
// found is false when there is no such line.
func readMeminfo(procRoot, prefix string, zeroOK bool) (n int64, found bool, err error) {
	path := filepath.Join(procRoot, "meminfo")
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false, fmt.Errorf("reading %s: %w", path, err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		v, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		kb, ok := strings.CutSuffix(strings.TrimSpace(v), " kB")
		n, err := strconv.ParseInt(strings.TrimSpace(kb), 10, 64)
		if !ok || err != nil || n < 0 || (n == 0 && !zeroOK) || n > memstats.MaxBytes/1024 {
			return 0, true, fmt.Errorf("%s: %s %q is not a size in kB", path, prefix, strings.TrimSpace(v))
		}
		return n * 1024, true, nil
	}
	return 0, false, nil
}
