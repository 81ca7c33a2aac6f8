//go:build e2ebench

package e2ebench

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/headroom-k8s/headroom/test/realnode"
)

// A′ is the default stack (kube-scheduler's default profile, no Headroom)
// with each real node's kubelet told to act at Headroom's lines, as an
// operator can configure today: a soft eviction threshold where Headroom's
// trigger fires, with a short grace period, graceful termination for the
// pods it evicts (evictionMaxPodGracePeriod), and the hard threshold kept
// at the allocatable line. The settings are derived from the node's own
// figures and Headroom's thresholds, never written down as constants.
const (
	// tunedSoftGrace is evictionSoftGracePeriod of every soft threshold:
	// short, as the line is already Headroom's early one, and long enough
	// that one sample over it does not evict (the kubelet's housekeeping
	// looks every 10 s).
	tunedSoftGrace = 2 * time.Second
	// tunedMaxPodGrace is evictionMaxPodGracePeriod: a soft eviction gives
	// a pod min(it, the pod's terminationGracePeriodSeconds); 30 s is the
	// API's default terminationGracePeriodSeconds, so that a pod that keeps
	// the default gets its whole grace.
	tunedMaxPodGrace = 30
	// tunedPressureTransition is evictionPressureTransitionPeriod: the
	// kubelet's default. It only delays lifting a pressure condition (and
	// its NoSchedule taint) after the signal went back under the line;
	// an operator has no reason to shorten it, which lets the condition
	// flap, and it decides no eviction.
	tunedPressureTransition = 5 * time.Minute
	// memoryHardAvailable is the kubelet's default hard memory.available
	// threshold, which every stack keeps: allocatable memory is the pods'
	// budget less it, and the kubelet applies it to
	// allocatableMemory.available too (pkg/kubelet/eviction
	// addAllocatableThresholds).
	memoryHardAvailable = 100 << 20
)

// lineOf is the highest figure at which a trigger of thresholdPercent of
// allocatable does not fire: ⌊allocatable × thresholdPercent / 100⌋.
// Headroom's triggers fire when used × 100 > thresholdPercent ×
// allocatable, which for a whole used is used > lineOf. It cannot
// overflow.
func lineOf(allocatable, thresholdPercent int64) int64 {
	return allocatable/100*thresholdPercent + allocatable%100*thresholdPercent/100
}

// tunedKubelet is what A′ changes in a real node's kubelet.
type tunedKubelet struct {
	evictionHard, evictionSoft, evictionSoftGracePeriod map[string]string
	evictionMaxPodGracePeriod                           int32
	evictionPressureTransitionPeriod                    time.Duration
}

// apply sets the tuned kubelet's settings in opts (the hard thresholds
// join those opts has).
func (k tunedKubelet) apply(opts *realnode.Options) {
	hard := map[string]string{}
	for s, v := range defaultEvictionHard() {
		hard[s] = v
	}
	for s, v := range opts.EvictionHard {
		hard[s] = v
	}
	for s, v := range k.evictionHard {
		hard[s] = v
	}
	opts.EvictionHard = hard
	opts.EvictionSoft = k.evictionSoft
	opts.EvictionSoftGracePeriod = k.evictionSoftGracePeriod
	opts.EvictionMaxPodGracePeriod = k.evictionMaxPodGracePeriod
	opts.EvictionPressureTransitionPeriod = k.evictionPressureTransitionPeriod
}

// defaultEvictionHard is the hard thresholds of every stack's kubelet
// besides the PID one: the kubelet's memory default and what keeps a busy
// test machine's disks from evicting.
func defaultEvictionHard() map[string]string {
	return map[string]string{
		"memory.available": strconv.Itoa(memoryHardAvailable), "nodefs.available": "1%", "imagefs.available": "1%", "nodefs.inodesFree": "1%",
	}
}

// tunedPIDs is A′'s PID eviction for a node whose PID capacity (the
// kubelet's MaxPID: min(pid_max, threads-max)) and systemReserved.pid are
// given, against Headroom's PID thresholdPercent (the shipped policy's).
// The kubelet's pid.available is capacity − the host's tasks; Headroom's
// trigger fires when the tasks pass lineOf(allocatable, threshold), that
// is when pid.available < capacity − that line: the soft threshold. The
// hard one stays at the allocatable line, pid.available < reserved (the
// tasks above allocatable), as in A and B.
func tunedPIDs(capacity, reserved, thresholdPercent int64) (tunedKubelet, error) {
	switch {
	case capacity <= 0:
		return tunedKubelet{}, fmt.Errorf("PID capacity %d: must be positive", capacity)
	case reserved <= 0 || reserved >= capacity:
		return tunedKubelet{}, fmt.Errorf("systemReserved.pid %d: want 0 < reserved < capacity (%d); the hard threshold pid.available < reserved must be positive", reserved, capacity)
	case thresholdPercent < 1 || thresholdPercent > 100:
		return tunedKubelet{}, fmt.Errorf("PID thresholdPercent %d: want 1 to 100", thresholdPercent)
	}
	line := lineOf(capacity-reserved, thresholdPercent)
	return tunedKubelet{
		evictionHard:                     map[string]string{"pid.available": strconv.FormatInt(reserved, 10)},
		evictionSoft:                     map[string]string{"pid.available": strconv.FormatInt(capacity-line, 10)},
		evictionSoftGracePeriod:          map[string]string{"pid.available": tunedSoftGrace.String()},
		evictionMaxPodGracePeriod:        tunedMaxPodGrace,
		evictionPressureTransitionPeriod: tunedPressureTransition,
	}, nil
}

// tunedMemory is A′'s memory eviction for a node whose pods' memory budget
// (kubepods' limit: capacity − systemReserved.memory) is given, against
// Headroom's memory thresholdPercent. Allocatable is the budget less the
// hard memory.available (memoryHardAvailable), and Headroom's memory
// trigger fires when the pods' working set passes lineOf(allocatable,
// threshold). The kubelet's signal for the pods' working set is
// allocatableMemory.available = budget − that working set (its
// memory.available is the whole machine's, which on a machine shared with
// other work says nothing about the node's pods): the soft threshold is
// allocatableMemory.available < budget − line. The hard memory.available
// stays, which the kubelet applies to allocatableMemory.available too: the
// allocatable line, as in A and B.
func tunedMemory(budget, thresholdPercent int64) (tunedKubelet, error) {
	switch {
	case budget <= memoryHardAvailable:
		return tunedKubelet{}, fmt.Errorf("pods' memory budget %d bytes: must be more than the hard memory.available threshold (%d)", budget, memoryHardAvailable)
	case thresholdPercent < 1 || thresholdPercent > 100:
		return tunedKubelet{}, fmt.Errorf("memory thresholdPercent %d: want 1 to 100", thresholdPercent)
	}
	line := lineOf(budget-memoryHardAvailable, thresholdPercent)
	return tunedKubelet{
		evictionSoft:                     map[string]string{"allocatableMemory.available": strconv.FormatInt(budget-line, 10)},
		evictionSoftGracePeriod:          map[string]string{"allocatableMemory.available": tunedSoftGrace.String()},
		evictionMaxPodGracePeriod:        tunedMaxPodGrace,
		evictionPressureTransitionPeriod: tunedPressureTransition,
	}, nil
}

// String is the tuned settings as a KubeletConfiguration's fields read.
func (k tunedKubelet) String() string {
	kv := func(m map[string]string) string {
		var parts []string
		for s, v := range m {
			parts = append(parts, s+": "+v)
		}
		sort.Strings(parts)
		return "{" + strings.Join(parts, ", ") + "}"
	}
	var b strings.Builder
	if len(k.evictionHard) > 0 {
		fmt.Fprintf(&b, "evictionHard %s (with the others of every stack), ", kv(k.evictionHard))
	}
	fmt.Fprintf(&b, "evictionSoft %s, evictionSoftGracePeriod %s, evictionMaxPodGracePeriod %d, evictionPressureTransitionPeriod %s",
		kv(k.evictionSoft), kv(k.evictionSoftGracePeriod), k.evictionMaxPodGracePeriod, k.evictionPressureTransitionPeriod)
	return b.String()
}
