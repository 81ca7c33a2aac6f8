package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// PodPIDsProbe publishes the PIDs of the node's biggest PID users as
// pidstats.AnnotationPIDPods, read from each pod's cgroup (pids.current).
type PodPIDsProbe struct {
	CgroupRoot string
	// HysteresisPIDs: the list is worth a write when some pod's figure
	// moved by more than this since the last write (a pod entering or
	// leaving the list counts from or to 0), so small pods changing, or
	// swapping places at the list's tail, cause no write.
	HysteresisPIDs int64
}

// PodPIDsProbeName is the PodPIDsProbe's name in logs and metrics.
const PodPIDsProbeName = "pid-pods"

// Name implements Probe.
func (p *PodPIDsProbe) Name() string { return PodPIDsProbeName }

// Sample implements Probe. When the kubepods cgroup cannot be found or
// listed it returns an empty list with the error: the list is subtracted
// from the node's use of the same write, and a list left from an older
// sample would subtract pods that had already left the newer figure. A pod
// whose cgroup vanishes while it is read (it just stopped) is skipped.
func (p *PodPIDsProbe) Sample(ctx context.Context, now time.Time) (Sample, error) {
	layout, err := DetectCgroupLayout(p.CgroupRoot)
	if err != nil {
		return podSample{hysteresis: p.HysteresisPIDs}, err
	}
	pods, err := layout.PodCgroups()
	if err != nil {
		return podSample{hysteresis: p.HysteresisPIDs}, err
	}
	usage := make([]pidstats.PodUsage, 0, len(pods))
	var errs []error
	for _, pod := range pods {
		n, err := ReadPIDsCurrent(pod.Dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			// Not listing the pod is safe: only listed pods are subtracted.
			errs = append(errs, err)
			continue
		}
		if n > 0 { // a pod holding nothing frees nothing: no use listing it
			usage = append(usage, pidstats.PodUsage{UID: pod.UID, PIDs: n})
		}
	}
	klog.FromContext(ctx).V(5).Info("Read pod cgroups", "layout", layout, "pods", len(usage))
	return podSample{list: pidstats.NewPodList(usage), hysteresis: p.HysteresisPIDs}, errors.Join(errs...)
}

// Adopt implements Probe.
func (p *PodPIDsProbe) Adopt(annotations map[string]string, _ time.Time) (Sample, error) {
	v, ok := annotations[pidstats.AnnotationPIDPods]
	if !ok {
		return nil, fmt.Errorf("no %s annotation", pidstats.AnnotationPIDPods)
	}
	l, err := pidstats.ParsePodList(v)
	if err != nil {
		return nil, err
	}
	return podSample{list: l, hysteresis: p.HysteresisPIDs}, nil
}

type podSample struct {
	list       pidstats.PodList
	hysteresis int64
}

func (s podSample) Annotations() map[string]string {
	return map[string]string{pidstats.AnnotationPIDPods: s.list.String()}
}
func (s podSample) SampledAt() time.Time { return time.Time{} }
func (s podSample) String() string       { return s.list.String() }

// Changed reports the largest move of one pod's figure beyond the
// hysteresis; a pod missing from either list counts as 0 there.
func (s podSample) Changed(last Sample) (bool, string) {
	l, ok := last.(podSample)
	if !ok {
		return true, "no per-pod sample written"
	}
	var worst int64
	var who types.UID
	consider := func(uid types.UID, cur, prev int64) {
		if d := max(cur-prev, prev-cur); d > worst {
			worst, who = d, uid
		}
	}
	for _, e := range s.list.Entries() {
		prev, _ := l.list.Lookup(e.UID)
		consider(e.UID, e.PIDs, prev)
	}
	for _, e := range l.list.Entries() {
		if _, listed := s.list.Lookup(e.UID); !listed {
			consider(e.UID, 0, e.PIDs)
		}
	}
	if worst > s.hysteresis {
		return true, fmt.Sprintf("pod %s moved by %d PIDs, more than the hysteresis of %d", who, worst, s.hysteresis)
	}
	return false, ""
}
