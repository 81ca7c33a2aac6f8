package pidstats

import (
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

// PodPIDs returns the PIDs a pod declares in its headroom.dev/pids
// annotation, or defaultPIDs when it has none. A value above MaxPodPIDs
// (more than any node has) yields MaxPodPIDs, failing closed; a malformed one
// (not a base-10 integer, or negative) yields defaultPIDs. Either comes with
// an error naming the pod, the key and the value (cut to sample.MaxEcho
// bytes), so the caller can warn (log, Event, metric) and carry on. A negative defaultPIDs
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
	switch {
	case err == nil && n > MaxPodPIDs, errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(v, "-"):
		// A claim of more PIDs than any node has fails closed: the pod
		// counts for the most a pod can hold, not for the default.
		return MaxPodPIDs, fmt.Errorf("pod %s/%s: annotation %s=%s is above the maximum of %d; counting %d PIDs",
			pod.Namespace, pod.Name, AnnotationPodPIDs, sample.Quote(v), MaxPodPIDs, MaxPodPIDs)
	case err != nil || n < 0:
		return defaultPIDs, fmt.Errorf("pod %s/%s: annotation %s=%s is not a base-10 integer in [0, %d]; using the default of %d PIDs",
			pod.Namespace, pod.Name, AnnotationPodPIDs, sample.Quote(v), MaxPodPIDs, defaultPIDs)
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
// use: its PodPIDs when the sample cannot hold its PIDs (sample.InSample:
// placed after it, or bound before it but not started yet) and it has not
// terminated, otherwise 0. A terminating pod still adds: its processes run
// until the kubelet has stopped them. It does not allocate unless the
// annotation is malformed, in which case the default is used and the
// PodPIDs error is returned for the caller to report. Sum contributions
// with SaturatingAdd.
func PodContribution(pod *corev1.Pod, sampledAt time.Time, defaultPIDs int64) (int64, error) {
	if pod == nil || isTerminal(pod) || sample.InSample(pod, sampledAt) {
		return 0, nil
	}
	return PodPIDs(pod, defaultPIDs)
}

// Usage is a node's estimated PID use (sample.Usage).
type Usage = sample.Usage

// Estimate is the node's PID use as best known, for placement:
// EstimateOn(sample.ForPlacement, ...).
func Estimate(stats NodeStats, pods []*corev1.Pod, defaultPIDs int64) Usage {
	return EstimateOn(sample.ForPlacement, stats, pods, defaultPIDs)
}

// EstimateOn is the node's PID use as best known:
//
//	stats.Used
//	− the stats.Pods figures of listed pods that have left the node since
//	  the sample (not among pods) or have terminated
//	+ on basis ForPlacement, the PIDs of the node's pods the sample cannot
//	  hold (PodContribution) that the list does not name (a listed pod was
//	  measured); on ForPressure, nothing for them (sample.Basis)
//
// The declarations keep a burst scheduled within one reporting interval
// from all landing on one node. The listed figures and contributions of terminating pods
// are counted in Held and in Leaving. pods are the pods bound or assumed on
// the node now. Terminal pods never add; malformed pod annotations count as
// defaultPIDs. The results are never negative and saturate at
// math.MaxInt64. It does not allocate.
func EstimateOn(basis sample.Basis, stats NodeStats, pods []*corev1.Pod, defaultPIDs int64) Usage {
	e := estimator{stats: stats, defaultPIDs: defaultPIDs, tally: sample.NewTally(stats.Pods, basis)}
	for _, p := range pods {
		e.add(p)
	}
	return e.usage()
}

// EstimateUsed is Estimate's Held.
func EstimateUsed(stats NodeStats, pods []*corev1.Pod, defaultPIDs int64) int64 {
	return Estimate(stats, pods, defaultPIDs).Held
}

// EstimateUsedSeq is EstimateUsed over an iterator, for callers that hold
// the node's pods in another form (the scheduler's NodeInfo) and should not
// build a slice per call. It is kept small enough to be inlined, so that the
// iterator and the state need not escape to the heap.
func EstimateUsedSeq(stats NodeStats, pods iter.Seq[*corev1.Pod], defaultPIDs int64) int64 {
	e := estimator{stats: stats, defaultPIDs: defaultPIDs, tally: sample.NewTally(stats.Pods, sample.ForPlacement)}
	pods(e.yield)
	return e.usage().Held
}

// estimator accumulates Estimate over a node's pods.
type estimator struct {
	stats       NodeStats
	defaultPIDs int64
	tally       sample.Tally
}

func (e *estimator) yield(p *corev1.Pod) bool {
	e.add(p)
	return true
}

func (e *estimator) add(p *corev1.Pod) {
	if p == nil || e.tally.Listed(p) {
		return
	}
	c, _ := PodContribution(p, e.stats.SampledAt, e.defaultPIDs)
	e.tally.Add(p, c)
}

func (e *estimator) usage() Usage { return e.tally.Usage(e.stats.Used) }

func isTerminal(pod *corev1.Pod) bool { return sample.Terminal(pod) }
