package perf

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/headroom-k8s/headroom/plugins"
	"github.com/headroom-k8s/headroom/plugins/oomrisk"
)

// The HeadroomNoop profile replaces each of Headroom's plugins with a
// stand-in that does nothing at the same extension points (and weight), so
// that it measures what the scheduler framework itself spends on three more
// plugins per node: Headroom's own cost is the difference between Headroom
// and HeadroomNoop.

// noopPrefix names a stand-in: noopPrefix + the plugin's name.
const noopPrefix = "Noop"

// noopFilterScore stands in for NodePIDs and NodeIPs: PreFilter, Filter,
// PreScore, Score and NormalizeScore.
type noopFilterScore struct{ name string }

func (p noopFilterScore) Name() string { return p.name }
func (noopFilterScore) PreFilter(context.Context, fwk.CycleState, *corev1.Pod, []fwk.NodeInfo) (*fwk.PreFilterResult, *fwk.Status) {
	return nil, nil
}
func (noopFilterScore) PreFilterExtensions() fwk.PreFilterExtensions { return nil }
func (noopFilterScore) Filter(context.Context, fwk.CycleState, *corev1.Pod, fwk.NodeInfo) *fwk.Status {
	return nil
}
func (noopFilterScore) PreScore(context.Context, fwk.CycleState, *corev1.Pod, []fwk.NodeInfo) *fwk.Status {
	return nil
}
func (noopFilterScore) Score(context.Context, fwk.CycleState, *corev1.Pod, fwk.NodeInfo) (int64, *fwk.Status) {
	return 0, nil
}
func (p noopFilterScore) ScoreExtensions() fwk.ScoreExtensions { return p }
func (noopFilterScore) NormalizeScore(context.Context, fwk.CycleState, *corev1.Pod, fwk.NodeScoreList) *fwk.Status {
	return nil
}

// noopScore stands in for OOMRisk: PreScore and Score.
type noopScore struct{ name string }

func (p noopScore) Name() string { return p.name }
func (noopScore) PreScore(context.Context, fwk.CycleState, *corev1.Pod, []fwk.NodeInfo) *fwk.Status {
	return nil
}
func (noopScore) Score(context.Context, fwk.CycleState, *corev1.Pod, fwk.NodeInfo) (int64, *fwk.Status) {
	return fwk.MaxNodeScore, nil
}
func (noopScore) ScoreExtensions() fwk.ScoreExtensions { return nil }

// The HeadroomFloor profile's stand-ins do nothing either, but are called
// as plugins that score every node are: Filter and Score run on every node
// for NodePIDs and NodeIPs, OOMRisk's PreScore skips Score, and all of them
// sign pods. What separates HeadroomFloor from the default profile is the
// framework's own cost of two more Filter and two more Score plugins per
// node, which no plugin that scores every node avoids (Headroom's NodePIDs
// and NodeIPs skip Score where every node has ample headroom).
const floorPrefix = "Floor"

// floorFilterScore stands in for NodePIDs and NodeIPs in HeadroomFloor.
type floorFilterScore struct{ noopFilterScore }

func (floorFilterScore) SignPod(context.Context, *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return nil, nil
}
func (p floorFilterScore) ScoreExtensions() fwk.ScoreExtensions { return p }

// floorScore stands in for OOMRisk in HeadroomFloor: it skips scoring.
type floorScore struct{ noopScore }

func (floorScore) PreScore(context.Context, fwk.CycleState, *corev1.Pod, []fwk.NodeInfo) *fwk.Status {
	return fwk.NewStatus(fwk.Skip)
}
func (floorScore) SignPod(context.Context, *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return nil, nil
}

// The HeadroomTightFloor profile is HeadroomFloor where OOMRisk's stand-in
// scores every node too, as OOMRisk does on the tight fleet (TightFleet),
// where every node holds pods its memory overcommits: the framework's own
// cost of two more Filter and three more Score plugins per node, the least
// that the shipped plugins cost there whatever their code.
const tightFloorPrefix = "TightFloor"

// tightFloorScore stands in for OOMRisk in HeadroomTightFloor.
type tightFloorScore struct{ noopScore }

func (tightFloorScore) SignPod(context.Context, *corev1.Pod) ([]fwk.SignFragment, *fwk.Status) {
	return nil, nil
}

// noopRegistry returns the stand-ins' factories (HeadroomNoop's,
// HeadroomFloor's and HeadroomTightFloor's).
func noopRegistry() frameworkruntime.Registry {
	r := frameworkruntime.Registry{}
	// Every figure plugin filters and scores; OOMRisk only scores.
	for _, f := range plugins.Figures() {
		name := f.Name()
		r[floorPrefix+name] = func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
			return floorFilterScore{noopFilterScore{name: floorPrefix + name}}, nil
		}
		r[tightFloorPrefix+name] = func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
			return floorFilterScore{noopFilterScore{name: tightFloorPrefix + name}}, nil
		}
		r[noopPrefix+name] = func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
			return noopFilterScore{name: noopPrefix + name}, nil
		}
	}
	r[tightFloorPrefix+oomrisk.Name] = func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
		return tightFloorScore{noopScore{name: tightFloorPrefix + oomrisk.Name}}, nil
	}
	r[floorPrefix+oomrisk.Name] = func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
		return floorScore{noopScore{name: floorPrefix + oomrisk.Name}}, nil
	}
	r[noopPrefix+oomrisk.Name] = func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
		return noopScore{name: noopPrefix + oomrisk.Name}, nil
	}
	return r
}
