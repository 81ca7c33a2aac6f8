package perf

import (
	"context"
	"math"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"
	frameworkruntime "k8s.io/kubernetes/pkg/scheduler/framework/runtime"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins"
	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/plugins/nodepids"
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

// The HeadroomLookupFloor profile is HeadroomTightFloor whose stand-ins
// do the least a plugin that reads a node's figure does in Filter and
// Score, what the project asks of its own: a lookup of the node's figure,
// parsed from its annotation once and kept by node name in a read-mostly
// map, and a comparison (OOMRisk's: the node's requested memory against
// its allocatable). Its ratio to HeadroomTightFloor is what the lookups alone
// cost; Headroom's to it, what Headroom does beyond them.
const lookupFloorPrefix = "LookupFloor"

// usedAnnotation is the annotation each figure plugin's stand-in looks up.
var usedAnnotation = map[string]string{
	nodepids.Name: pidstats.AnnotationUsed,
	nodeips.Name:  ipstats.AnnotationUsed,
}

// lookupFilterScore stands in for NodePIDs and NodeIPs in
// HeadroomLookupFloor. Its figures are a read-mostly map (sync.Map): after
// a node's first lookup, reads take no lock.
type lookupFilterScore struct {
	floorFilterScore
	key string
	by  *sync.Map // node name → the figure (int64)
}

func (p lookupFilterScore) figureOf(node *corev1.Node) int64 {
	if v, ok := p.by.Load(node.Name); ok {
		return v.(int64)
	}
	v, _ := strconv.ParseInt(node.Annotations[p.key], 10, 64)
	p.by.Store(node.Name, v)
	return v
}

func (p lookupFilterScore) Filter(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	if p.figureOf(ni.Node()) == math.MaxInt64 {
		return fwk.NewStatus(fwk.Unschedulable, "figure out of range")
	}
	return nil
}

func (p lookupFilterScore) Score(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	return p.figureOf(ni.Node()) % (fwk.MaxNodeScore + 1), nil
}

func (p lookupFilterScore) ScoreExtensions() fwk.ScoreExtensions { return p }

// lookupScore stands in for OOMRisk in HeadroomLookupFloor.
type lookupScore struct{ tightFloorScore }

func (lookupScore) Score(_ context.Context, _ fwk.CycleState, _ *corev1.Pod, ni fwk.NodeInfo) (int64, *fwk.Status) {
	if ni.GetRequested().GetMemory() > ni.GetAllocatable().GetMemory() {
		return 0, nil
	}
	return fwk.MaxNodeScore, nil
}

// noopRegistry returns the stand-ins' factories (HeadroomNoop's,
// HeadroomFloor's, HeadroomTightFloor's and HeadroomLookupFloor's).
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
		r[lookupFloorPrefix+name] = func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
			return lookupFilterScore{floorFilterScore: floorFilterScore{noopFilterScore{name: lookupFloorPrefix + name}},
				key: usedAnnotation[name], by: &sync.Map{}}, nil
		}
	}
	r[lookupFloorPrefix+oomrisk.Name] = func(context.Context, runtime.Object, fwk.Handle) (fwk.Plugin, error) {
		return lookupScore{tightFloorScore{noopScore{name: lookupFloorPrefix + oomrisk.Name}}}, nil
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
