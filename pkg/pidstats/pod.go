package pidstats

import (
	"fmt"
	"iter"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

// PodPIDs returns the PIDs a pod declares in its headroom.dev/pids
// annotation, or defaultPIDs when it has none. A malformed or negative value
// yields defaultPIDs and an error naming the pod, the key and the value, so
// the caller can warn (log, Event) and carry on. A negative defaultPIDs
// counts as 0, so the result is never negative.
func PodPIDs(pod *corev1.Pod, defaultPIDs int64) (int64, error) {
	defaultPIDs = max(defaultPIDs, 0)
	if pod == nil {
		return defaultPIDs, nil
	}
	v, ok := pod.Annotations[AnnotationPodPIDs]
	if !ok {
		return defaultPIDs, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return defaultPIDs, fmt.Errorf("pod %s/%s: annotation %s=%q is not a non-negative base-10 integer; using the default of %d PIDs",
			pod.Namespace, pod.Name, AnnotationPodPIDs, v, defaultPIDs)
	}
	return n, nil
}

// PlacedAfterSample reports whether the pod may be missing from a node
// sample taken at sampledAt: it has no PodScheduled=True condition yet (the
// scheduler's assumed pods, not bound yet), or that condition's
// LastTransitionTime is not before sampledAt truncated to the second.
// Conditions carry 1 s resolution, so a pod bound in the same second as the
// sample counts as placed after it.
func PlacedAfterSample(pod *corev1.Pod, sampledAt time.Time) bool {
	return sample.PlacedAfter(pod, sampledAt)
}

// PodContribution is what one pod of the node adds to the node's reported
// use: its PodPIDs when it was placed after the sample and is neither
// terminating nor terminal, otherwise 0: PIDs on their way out never count
// against a node. It does not allocate unless the annotation is malformed, in
// which case the default is used and the PodPIDs error is returned for the
// caller to report. Sum contributions with SaturatingAdd.
func PodContribution(pod *corev1.Pod, sampledAt time.Time, defaultPIDs int64) (int64, error) {
	if pod == nil || isLeaving(pod) || !PlacedAfterSample(pod, sampledAt) {
		return 0, nil
	}
	return PodPIDs(pod, defaultPIDs)
}

// EstimateUsed is the node's current PID use as best known:
//
//	stats.Used
//	− the stats.Pods figures of listed pods that have left the node since
//	  the sample (not among pods), are terminating (deletionTimestamp set)
//	  or are terminal
//	+ the PIDs of the node's pods placed after the sample (PodContribution)
//
// so that a burst scheduled within one reporting interval does not all land
// on one node, and PIDs that are being freed are not counted against it.
// pods are the pods bound or assumed on the node now. Terminal pods never
// add; malformed pod annotations count as defaultPIDs. The result is never
// negative and saturates at math.MaxInt64. It does not allocate.
func EstimateUsed(stats NodeStats, pods []*corev1.Pod, defaultPIDs int64) int64 {
	e := estimator{stats: stats, defaultPIDs: defaultPIDs}
	for _, p := range pods {
		e.add(p)
	}
	return e.result()
}

// EstimateUsedSeq is EstimateUsed over an iterator, for callers that hold
// the node's pods in another form (the scheduler's NodeInfo) and should not
// build a slice per call. It is kept small enough to be inlined, so that the
// iterator and the state need not escape to the heap.
func EstimateUsedSeq(stats NodeStats, pods iter.Seq[*corev1.Pod], defaultPIDs int64) int64 {
	e := estimator{stats: stats, defaultPIDs: defaultPIDs}
	pods(e.yield)
	return e.result()
}

// estimator accumulates EstimateUsed over a node's pods.
type estimator struct {
	stats       NodeStats
	defaultPIDs int64
	added       int64 // PIDs of pods placed after the sample
	staying     int64 // listed PIDs of pods still on the node and not leaving
}

func (e *estimator) yield(p *corev1.Pod) bool {
	e.add(p)
	return true
}

func (e *estimator) add(p *corev1.Pod) {
	if p == nil {
		return
	}
	// Pod UIDs are unique, so no listed figure is counted twice.
	if n, ok := e.stats.Pods.Lookup(p.UID); ok && !isLeaving(p) {
		e.staying += n
	}
	c, _ := PodContribution(p, e.stats.SampledAt, e.defaultPIDs)
	e.added = SaturatingAdd(e.added, c)
}

// result is reported − (listed − staying) + added, never negative. The
// listed figures sum to at most MaxListedPods × MaxPodPIDs = 2^27.
func (e *estimator) result() int64 {
	used := max(e.stats.Used-e.stats.Pods.total()+e.staying, 0)
	return SaturatingAdd(used, e.added)
}

// isLeaving reports whether a pod's PIDs are on their way out: it is
// terminating or has terminated.
func isLeaving(pod *corev1.Pod) bool {
	return pod.DeletionTimestamp != nil || isTerminal(pod)
}

func isTerminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
