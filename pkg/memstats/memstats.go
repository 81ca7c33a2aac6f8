// Package memstats is the measured-memory model shared by the OOMRisk
// scheduler plugin, the RelieveNodePressure descheduler plugin,
// kubectl-headroom and headroom-node-agent, which writes it.
//
// A node's measured memory travels as three Node annotations written by the
// node agent: the node's working set (as the kubelet computes it: usage −
// inactive file, of the root cgroup), the sample's time, and the working
// sets of the node's biggest memory users at the same sample, measured from
// each pod's cgroup. On a node with swap two more travel with them, of the
// agent's own design (not in the project contract): the node's swap space
// (AnnotationSwapTotal) and its biggest pods' swapped-out bytes
// (AnnotationSwapPods), which the OOM model counts in the kernel's badness.
// The estimate of memory in use now (Estimate) is the one rule every reader
// applies; it is pidstats' estimate over another figure (sample.Tally). A
// pod's declarations are read as the scheduler reads them
// (ResourceOptions).
package memstats

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/kubernetes/pkg/features"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

// Annotation keys, fixed by the project contract.
const (
	// AnnotationUsed is the node's memory working set in bytes when sampled.
	AnnotationUsed = "headroom.dev/memory-used"
	// AnnotationSampledAt is the RFC 3339 time of the sample.
	AnnotationSampledAt = "headroom.dev/memory-sampled-at"
	// AnnotationPods lists the working sets of the node's biggest memory
	// users at the same sample: comma-separated <pod UID>=<bytes>, largest
	// first.
	AnnotationPods = "headroom.dev/memory-pods"

	// AnnotationSwapTotal is the node's swap space in bytes (SwapTotal of
	// /proc/meminfo) when sampled; written only where the node has swap,
	// with the memory sample (its time is AnnotationSampledAt).
	AnnotationSwapTotal = "headroom.dev/swap-total"
	// AnnotationSwapPods lists what the node's biggest swap users had
	// swapped out at the same sample, from each pod's cgroup (cgroup v2
	// memory.swap.current; v1 memory.memsw.usage_in_bytes −
	// memory.usage_in_bytes): comma-separated <pod UID>=<bytes>, largest
	// first, bounded like AnnotationPods; written only with
	// AnnotationSwapTotal.
	AnnotationSwapPods = "headroom.dev/swap-pods"
)

// MaxBytes is the largest figure accepted, for the node and for one pod:
// 1 PiB, far beyond any machine, and small enough that sums of a node's
// figures cannot overflow int64.
const MaxBytes int64 = 1 << 50

// MaxListedPods is the most pods AnnotationPods lists, as pid-pods.
const MaxListedPods = 32

// PodListFormat is AnnotationPods' format.
var PodListFormat = sample.PodListFormat{Key: AnnotationPods, Unit: "bytes", MaxEntries: MaxListedPods, MaxValue: MaxBytes}

// SwapPodListFormat is AnnotationSwapPods' format: AnnotationPods' under
// its own key.
var SwapPodListFormat = sample.PodListFormat{Key: AnnotationSwapPods, Unit: "bytes", MaxEntries: MaxListedPods, MaxValue: MaxBytes}

const sampleKind = "memory"

// ErrNoStats means the node carries no memory annotations: its measured
// memory is unknown, and readers keep to the pods' declarations.
var ErrNoStats = errors.New("node has no memory annotations")

// IsUnknown reports whether err leaves the node's measured memory unknown:
// no annotations, malformed ones, or a stale sample.
func IsUnknown(err error) bool {
	return errors.Is(err, ErrNoStats) || sample.IsInvalid(err) || sample.IsStale(err)
}

// NodeStats is one memory sample of a node.
type NodeStats struct {
	// Used is the node's working set in bytes.
	Used      int64
	SampledAt time.Time
	// Pods are the biggest pods' working sets at the same sample. The zero
	// PodList (no annotation, or a malformed one) lists nothing.
	Pods sample.PodList
	// SwapTotal is the node's swap space in bytes; 0 for a node without
	// swap, or whose annotation is missing or malformed (SwapErr says).
	SwapTotal int64
	// SwapPods are the biggest pods' swapped-out bytes at the same sample
	// (a complete list names every pod with anything in swap); the zero
	// PodList where the node reports no swap.
	SwapPods sample.PodList
	// SwapErr is why the node's swap annotations were ignored, or nil.
	SwapErr error
}

// Annotations are the Node annotations of s, as the node agent writes them.
// The per-pod list is left out when nothing was measured (the zero list).
func (s NodeStats) Annotations() map[string]string {
	a := map[string]string{
		AnnotationUsed:      strconv.FormatInt(s.Used, 10),
		AnnotationSampledAt: sample.FormatTime(s.SampledAt),
	}
	if s.Pods.Err() == nil && (s.Pods.Len() > 0 || s.Pods.Complete()) {
		a[AnnotationPods] = s.Pods.String()
	}
	if s.SwapTotal > 0 {
		a[AnnotationSwapTotal] = strconv.FormatInt(s.SwapTotal, 10)
		if s.SwapPods.Err() == nil && (s.SwapPods.Len() > 0 || s.SwapPods.Complete()) {
			a[AnnotationSwapPods] = s.SwapPods.String()
		}
	}
	return a
}

// CheckAge returns a *sample.StaleError when maxAge > 0 and s was sampled
// more than maxAge before now.
func (s NodeStats) CheckAge(now time.Time, maxAge time.Duration) error {
	return sample.CheckAge(sampleKind, s.SampledAt, now, maxAge)
}

// ParseNode reads a node's memory sample from its annotations:
//
//   - none of AnnotationUsed and AnnotationSampledAt: ErrNoStats (an
//     AnnotationPods alone is ignored: it belongs to no sample);
//   - one of them only, a figure that is not a base-10 integer in
//     [0, MaxBytes], a time that is not RFC 3339 or more than
//     sample.ClockSkewAllowance ahead of now: an *InvalidError naming the
//     annotation, and zero NodeStats;
//   - maxAge > 0 and the sample older than maxAge: the stats and a
//     *StaleError;
//   - otherwise the stats and nil.
//
// A malformed AnnotationPods never makes the node unknown: Pods lists
// nothing and Pods.Err says why, and the estimate falls back to the node's
// figure and the pods' requests.
func ParseNode(annotations map[string]string, now time.Time, maxAge time.Duration) (NodeStats, error) {
	present, err := sample.Present(annotations, sampleKind, AnnotationUsed, AnnotationSampledAt)
	if err != nil {
		return NodeStats{}, err
	}
	if !present {
		return NodeStats{}, ErrNoStats
	}
	var s NodeStats
	if s.Used, err = sample.ParseCount(AnnotationUsed, annotations[AnnotationUsed], MaxBytes); err != nil {
		return NodeStats{}, err
	}
	if s.SampledAt, err = sample.ParseTime(AnnotationSampledAt, annotations[AnnotationSampledAt], now); err != nil {
		return NodeStats{}, err
	}
	if v, ok := annotations[AnnotationPods]; ok {
		s.Pods, _ = PodListFormat.Parse(v) // malformed: lists nothing, Pods.Err says why
	}
	s.SwapTotal, s.SwapPods, s.SwapErr = parseSwap(annotations)
	if err := s.CheckAge(now, maxAge); err != nil {
		return s, err
	}
	return s, nil
}

// ResourceOptions are the options of component-helpers' PodRequests and
// PodLimits with which the scheduler counts a bound pod's resources
// (framework.PodInfo.CalculateResource in Kubernetes v1.36), under the
// process's feature gates: pod-level resources (spec.resources, KEP-2837)
// where PodLevelResources is on, and, for a pod being resized in place, the
// larger of what it asks for (spec), what the kubelet allocated
// (status.containerStatuses[].allocatedResources) and what runs
// (status.containerStatuses[].resources), as InPlacePodVerticalScaling and
// InPlacePodLevelResourcesVerticalScaling have it. Every model that reads a
// pod's memory declarations reads them with these options.
func ResourceOptions() resourcehelper.PodResourcesOptions {
	return resourcehelper.PodResourcesOptions{
		UseStatusResources: statusResourcesCounted(),
		InPlacePodLevelResourcesVerticalScalingEnabled: utilfeature.DefaultFeatureGate.Enabled(features.InPlacePodLevelResourcesVerticalScaling),
		SkipPodLevelResources:                          !utilfeature.DefaultFeatureGate.Enabled(features.PodLevelResources),
	}
}

// parseSwap reads the node's swap annotations. Without AnnotationSwapTotal
// the node reports no swap (the swap list alone belongs to no sample); a
// malformed total, or a malformed list, is ignored with the error: the
// model then counts no swap, as on a node without it, and the memory
// sample stays usable.
func parseSwap(annotations map[string]string) (int64, sample.PodList, error) {
	v, ok := annotations[AnnotationSwapTotal]
	if !ok {
		return 0, sample.PodList{}, nil
	}
	total, err := sample.ParseCount(AnnotationSwapTotal, v, MaxBytes)
	if err != nil {
		return 0, sample.PodList{}, err
	}
	lv, ok := annotations[AnnotationSwapPods]
	if !ok {
		return total, sample.PodList{}, nil
	}
	list, err := SwapPodListFormat.Parse(lv)
	if err != nil {
		return total, sample.PodList{}, err
	}
	return total, list, nil
}

// PodSwap is what pod had swapped out at the sample: its listed figure, or
// 0 (on a complete list it swapped nothing; without a list, or for a pod
// placed after the sample, nothing is known and a pod that has just started
// has swapped little).
func (s NodeStats) PodSwap(pod *corev1.Pod) int64 {
	if pod == nil {
		return 0
	}
	n, _ := s.SwapPods.LookupPod(pod)
	return n
}

// PodRequest is the memory a pod declares, in bytes: its effective request
// as the scheduler counts it (containers, init containers and sidecars,
// pod-level requests, a resize in progress, overhead; ResourceOptions), at
// most MaxBytes.
func PodRequest(pod *corev1.Pod) int64 {
	return requestOf(pod, ResourceOptions())
}

func requestOf(pod *corev1.Pod, opts resourcehelper.PodResourcesOptions) int64 {
	reqs := resourcehelper.PodRequests(pod, opts)
	q, ok := reqs[corev1.ResourceMemory]
	if !ok || q.Sign() <= 0 {
		return 0
	}
	if v, ok := q.AsInt64(); ok {
		return min(v, MaxBytes)
	}
	return MaxBytes
}

// Declared is what a pod is taken to hold when nothing measured it: its
// memory request, or, for a pod whose containers and pod level request no
// memory, noRequest (the caller's figure, e.g. OOMRisk's estimate of a
// container without a limit or a request); at most MaxBytes. The pod's
// overhead (its RuntimeClass's, spec.overhead) is counted in both cases, as
// the scheduler's PodRequests adds it to every pod's requests: overhead
// alone never makes a pod that requests nothing look like one that
// requests that little.
func Declared(pod *corev1.Pod, noRequest int64) int64 {
	opts := ResourceOptions()
	if r := PodRequest(pod); r > 0 {
		opts.ExcludeOverhead = true
		if requestOf(pod, opts) > 0 {
			return r
		}
		// Only the overhead: the estimate of a pod without a request, and
		// the overhead on top.
		return min(sample.SaturatingAdd(max(noRequest, 0), r), MaxBytes)
	}
	return min(max(noRequest, 0), MaxBytes)
}

// PodHeld is the working set pod held at the sample as best known, and
// whether it was measured (listed):
//
//   - listed in Pods: its measured figure;
//   - not in the sample (placed after it, or not started by then): declared;
//   - otherwise, with a complete list: 0 (it held nothing at the sample);
//     with a full list: declared, at most the smallest listed figure;
//     without a list: declared.
//
// It is sample.PodFigureOf over the memory list, the rule RelieveNodePressure
// uses for PIDs.
func (s NodeStats) PodHeld(pod *corev1.Pod, declared int64) (int64, bool) {
	return sample.PodFigureOf(s.Pods, s.SampledAt, pod, declared, sample.ForPlacement)
}

// Estimate is the node's working set as best known, for placement:
// EstimateOn(sample.ForPlacement, ...).
func Estimate(s NodeStats, pods []*corev1.Pod, declared func(*corev1.Pod) int64) sample.Usage {
	return EstimateOn(sample.ForPlacement, s, pods, declared)
}

// EstimateOn is the node's working set as best known (sample.Tally):
//
//	s.Used
//	− the listed figures of pods that have left the node since the sample
//	  or have terminated
//	+ on basis ForPlacement, for each pod the sample cannot hold
//	  (sample.InSample) and the list does not name, declared(pod); on
//	  ForPressure nothing for them (sample.Basis)
//
// declared is what the caller's model takes an unmeasured pod to hold
// (OOMRisk: Declared, at most the pod's worst case). pods are the pods
// bound or assumed on the node now. Terminating pods count, in Held and in
// Leaving: their memory is freed only when the kubelet has stopped them.
func EstimateOn(basis sample.Basis, s NodeStats, pods []*corev1.Pod, declared func(*corev1.Pod) int64) sample.Usage {
	t := sample.NewTally(s.Pods, basis)
	for _, p := range pods {
		if p == nil || t.Listed(p) {
			continue
		}
		if !sample.Terminal(p) && !sample.InSample(p, s.SampledAt) {
			t.Add(p, min(max(declared(p), 0), MaxBytes))
		}
	}
	return t.Usage(s.Used)
}

// Validate reports figures the agent must not write.
func (s NodeStats) Validate() error {
	if s.Used < 0 || s.Used > MaxBytes {
		return &sample.InvalidError{Key: AnnotationUsed, Value: strconv.FormatInt(s.Used, 10), Reason: fmt.Sprintf("not within [0, %d]", MaxBytes)}
	}
	if s.SwapTotal < 0 || s.SwapTotal > MaxBytes {
		return &sample.InvalidError{Key: AnnotationSwapTotal, Value: strconv.FormatInt(s.SwapTotal, 10), Reason: fmt.Sprintf("not within [0, %d]", MaxBytes)}
	}
	if err := s.SwapPods.Err(); err != nil {
		return err
	}
	return s.Pods.Err()
}
