package relievenodepressure

import (
	"errors"
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// oomTrigger is the OOM trigger: the node's worst-case memory shortfall
// against its allocatable memory, by the model OOMRisk scores with. It
// needs no sample of its own (the model uses the memory sample where it
// is fresh), so its reliefs wait for none.
func oomTrigger(t *OOMTrigger) *trigger {
	return &trigger{
		key: EvictionReasonOOM, name: "OOM",
		assess: func(c *cycle, node *v1.Node, pods []*v1.Pod) (projection, error) { return c.assessOOM(t, node, pods) },
		// A replacement's worst case is counted against the destination's
		// model: the node's worst-case shortfall with it stays at or below
		// the threshold.
		room: func(c *cycle, node *v1.Node) (*roomFigure, error) {
			pods, err := c.handle.GetPodsAssignedToNodeFunc()(node.Name, nil)
			if err != nil {
				return nil, err
			}
			o, err := c.assessOOM(t, node, pods)
			if err != nil || o.model.Allocatable() == 0 {
				return nil, nil
			}
			model, allocatable := o.model, o.model.Allocatable()
			return &roomFigure{
				used: model.TotalWorst(),
				need: func(_ *nodeRelief, pod *v1.Pod) (int64, bool) { return oomkill.NewIncoming(pod).WorstOn(model), true },
				fits: func(used, need int64) bool {
					return !exceeds(max(addSat(used, need)-allocatable, 0), allocatable, o.threshold)
				},
			}, nil
		},
	}
}

// oomPressure is a node's projection by the OOM trigger: its shortfall
// without the pods evicted so far.
type oomPressure struct {
	model             *oomkill.Node
	start, shortfall  int64
	threshold, target int64
	evicted           []*v1.Pod
	// swapErr is why the node's swap figures were ignored, or nil.
	swapErr error
}

// assessOOM returns the memory-shortfall projection of node, or why its
// memory is unknown. The model is OOMRisk's: on the node's memory sample
// where it is fresh and valid (oomkill.MemorySampleOf), on declarations
// alone otherwise.
func (c *cycle) assessOOM(t *OOMTrigger, node *v1.Node, pods []*v1.Pod) (*oomPressure, error) {
	est := oomkill.Estimate{
		RequestMultiplierPercent:      *t.NoLimitRequestPercent,
		FractionOfAllocatablePermille: *t.NoLimitAllocatablePermille,
	}
	opts, stats, sampleErr := oomkill.MemorySampleOf(node, c.now, t.MaxSampleAge.Duration)
	var swapErr error
	if sampleErr == nil {
		swapErr = stats.SwapErr
	}
	model, err := oomkill.NewNode(node, pods, est, opts...)
	if err != nil {
		return nil, err
	}
	return &oomPressure{
		model: model, start: model.Shortfall(), shortfall: model.Shortfall(),
		threshold: *t.ThresholdPercent, target: *t.TargetPercent, swapErr: swapErr,
	}, nil
}

func (p *oomPressure) level() gauge {
	return gauge{start: p.start, used: p.shortfall, allocatable: p.model.Allocatable(), threshold: p.threshold, target: p.target,
		noAllocatable: "no allocatable memory"}
}

// gain is how much lower the shortfall is once pod is evicted too; only
// computed while the trigger is pending.
func (p *oomPressure) gain(pod *v1.Pod) (int64, error) {
	if !p.level().pending() {
		return 0, nil
	}
	without := p.model.ShortfallWithout(append(p.evicted[:len(p.evicted):len(p.evicted)], pod)...)
	return max(p.shortfall-without, 0), nil
}

func (p *oomPressure) frees(_ *v1.Pod, g int64) (reason, whyNot string) {
	if g <= 0 {
		return "", ""
	}
	return p.summary(), ""
}

func (p *oomPressure) remove(pod *v1.Pod, _ int64) {
	p.evicted = append(p.evicted, pod)
	p.shortfall = p.model.ShortfallWithout(p.evicted...)
}

func (p *oomPressure) clone() projection {
	c := *p
	c.evicted = p.evicted[:len(p.evicted):len(p.evicted)]
	return &c
}

// accounts: the model counts the node's pods as they are, so an evicted
// pod is out of it once it has left; the trigger waits for no sample.
func (p *oomPressure) accounts(*v1.Pod) bool { return true }

func (p *oomPressure) sampleTime() time.Time { return time.Time{} }

func (p *oomPressure) keysAndValues(prefix string) []any {
	return []any{logKey(prefix, "OOMShortfall"), fmt.Sprintf("%d/%d bytes (%s)", p.shortfall, p.model.Allocatable(),
		percent(p.shortfall, p.model.Allocatable()))}
}

func (p *oomPressure) summary() string {
	return fmt.Sprintf("OOM shortfall %s of memory > threshold %d%%", percent(p.start, p.model.Allocatable()), p.threshold)
}

// malformedNode reports swap annotations the model ignored.
func (p *oomPressure) malformedNode() *malformedNode {
	var ie *sample.InvalidError
	if errors.As(p.swapErr, &ie) {
		return &malformedNode{reason: ReasonMalformedSwap, annotation: ie.Key, err: p.swapErr, consequence: "the OOM model counts no swap"}
	}
	return nil
}
