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
	"github.com/headroom-k8s/headroom/pkg/sample"
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

// DependsOn implements Dependent: the list is one sample with the PID
// totals, so it is written only together with a fresh PIDProbe sample.
func (p *PodPIDsProbe) DependsOn() string { return PIDProbeName }

// Sample implements Probe. The list must name every pod it could measure,
// or readers would take an unlisted pod for one that held no PIDs
// (pidstats.PodList.Complete). So when the kubepods cgroup cannot be found
// or listed, or one pod's pids.current cannot be read, it returns a sample
// that withdraws the list, with the error: the next write removes the
// annotation and readers fall back to the pods' declared PIDs. Until a
// write is due for another reason, the old list stays next to the totals it
// was taken with. A pod whose cgroup vanishes while it is read (it just
// stopped) is skipped.
func (p *PodPIDsProbe) Sample(ctx context.Context, now time.Time) (Sample, error) {
	return samplePodList(ctx, p.CgroupRoot, cgroupV1PIDs, func(pod PodCgroup, _ CgroupLayout) (int64, error) {
		return ReadPIDsCurrent(pod.Dir)
	}, p.emptySample())
}

func (p *PodPIDsProbe) emptySample() podSample {
	return podSample{format: pidstats.PodListFormat, unit: "PIDs", hysteresis: p.HysteresisPIDs}
}

// samplePodList is the per-pod probes' one way to measure: every pod cgroup
// of the kubepods cgroup of controller's hierarchy under cgroupRoot, each
// read with read, published as empty's format. A pod whose read fails with
// fs.ErrNotExist (its cgroup vanished: it just stopped) is skipped, and so
// is a pod holding nothing (a pod that holds nothing frees nothing: no use
// listing it). Any other failure withdraws the list, with the error.
func samplePodList(ctx context.Context, cgroupRoot, controller string, read func(PodCgroup, CgroupLayout) (int64, error), empty podSample) (Sample, error) {
	withdrawn := empty
	withdrawn.withdrawn = true
	layout, err := DetectControllerLayout(cgroupRoot, controller)
	if err != nil {
		return withdrawn, err
	}
	pods, err := layout.PodCgroups()
	if err != nil {
		return withdrawn, err
	}
	figures := make([]sample.PodFigure, 0, len(pods))
	var errs []error
	for _, pod := range pods {
		n, err := read(pod, layout)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		}
		if n > 0 {
			figures = append(figures, sample.PodFigure{UID: pod.UID, Value: n})
		}
	}
	if len(errs) > 0 {
		return withdrawn, fmt.Errorf("withdrawing %s, which would be incomplete: %w", empty.format.Key, errors.Join(errs...))
	}
	klog.FromContext(ctx).V(5).Info("Read pod cgroups", "layout", layout, "pods", len(figures), "annotation", empty.format.Key)
	s := empty
	s.list = empty.format.New(figures)
	return s, nil
}

// Adopt implements Probe.
func (p *PodPIDsProbe) Adopt(annotations map[string]string, _ time.Time) (Sample, error) {
	return adoptPodList(annotations, p.emptySample())
}

// adoptPodList is the per-pod probes' Adopt: the list the node carries
// under empty's key, parsed strictly.
func adoptPodList(annotations map[string]string, empty podSample) (Sample, error) {
	v, ok := annotations[empty.format.Key]
	if !ok {
		return nil, fmt.Errorf("no %s annotation", empty.format.Key)
	}
	l, err := empty.format.Parse(v)
	if err != nil {
		return nil, err
	}
	s := empty
	s.list = l
	return s, nil
}

// podSample is a sample of a per-pod probe (pid-pods, memory-pods).
type podSample struct {
	format sample.PodListFormat
	list   sample.PodList
	// withdrawn: the probe could not measure every pod; the annotation is
	// removed with the next write instead of written.
	withdrawn  bool
	hysteresis int64
	// unit names the figure in log lines ("PIDs", "bytes").
	unit string
}

func (s podSample) Annotations() map[string]string {
	if s.withdrawn {
		return nil
	}
	return map[string]string{s.format.Key: s.list.String()}
}

// Withdrawn implements Withdrawer.
func (s podSample) Withdrawn() []string {
	if s.withdrawn {
		return []string{s.format.Key}
	}
	return nil
}

func (s podSample) SampledAt() time.Time { return time.Time{} }
func (s podSample) String() string {
	if s.withdrawn {
		return "<withdrawn>"
	}
	return s.list.String()
}

// Changed reports the largest move of one pod's figure beyond the
// hysteresis; a pod missing from either list counts as 0 there. A
// withdrawal never asks for a write, and a list after a withdrawal always
// does.
func (s podSample) Changed(last Sample) (bool, string) {
	l, ok := last.(podSample)
	switch {
	case s.withdrawn:
		// A withdrawal needs no write of its own: the list written stays
		// true to the totals written with it until they are rewritten.
		return false, ""
	case !ok:
		return true, "no per-pod sample written"
	case l.withdrawn:
		return true, "per-pod list measured again after it was withdrawn"
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
		consider(e.UID, e.Value, prev)
	}
	for _, e := range l.list.Entries() {
		if _, listed := s.list.Lookup(e.UID); !listed {
			consider(e.UID, 0, e.Value)
		}
	}
	if worst > s.hysteresis {
		return true, fmt.Sprintf("pod %s moved by %d %s, more than the hysteresis of %d", who, worst, s.unit, s.hysteresis)
	}
	return false, ""
}
