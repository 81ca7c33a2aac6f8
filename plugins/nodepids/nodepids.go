// Package nodepids is Headroom's NodePIDs scheduler plugin. It keeps pods
// off nodes that are short of process IDs and prefers nodes with more free
// PIDs. Kubernetes keeps no PID account in the scheduler (Node allocatable has
// no pids), so the figures come from the headroom.dev/pid-* annotations that
// headroom-node-agent writes, read and estimated by pkg/pidstats. The plugin
// itself is plugins/figure's; this package is the figure. See README.md for
// the model and its arguments.
package nodepids

import (
	"iter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/apis/config"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/apis/config/validation"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/figure"
)

// Name is the plugin's name in the registry and in KubeSchedulerConfiguration.
const Name = "NodePIDs"

const (
	// ErrReasonTooFewPIDs is Filter's reason. It names no node and no number
	// so that the scheduler can aggregate it across nodes in the pod's
	// FailedScheduling event: "0/5 nodes are available: 2 node(s) had too
	// few free PIDs, ...".
	ErrReasonTooFewPIDs = "node(s) had too few free PIDs"
	// EventReasonInvalidPIDs is the reason of the Warning Event on a pod
	// whose headroom.dev/pids annotation is malformed.
	EventReasonInvalidPIDs = "InvalidPIDsAnnotation"
	// EventReasonInvalidNodePIDs is the reason of the Warning Event on a
	// Node whose headroom.dev/pid-* annotations are invalid.
	EventReasonInvalidNodePIDs = "InvalidPIDAnnotation"

	podPIDsSignerName = "headroom.dev/NodePIDs.PodPIDs"
)

// NodePIDs is the plugin: a PreFilter, Filter, PreScore and Score plugin
// over the PID figure.
type NodePIDs = figure.Plugin[pidstats.NodeStats]

// New builds the plugin from its args, which the kube-scheduler's scheme has
// decoded and defaulted into the internal *config.NodePIDsArgs. Nil args mean
// the defaults.
var New = Definition.New

// pids is the PID figure: pkg/pidstats' model with NodePIDsArgs.
type pids struct {
	defaultPodPIDs int64
	floor          pidstats.Floor
}

func (pids) Read(node *corev1.Node, now time.Time) (pidstats.NodeStats, error) {
	return pidstats.ParseNode(node.Annotations, now, 0)
}

// Estimate is the node's PID use as pkg/pidstats estimates it from the
// sample and the node's pods (RelieveNodePressure uses the same estimate).
func (f pids) Estimate(s pidstats.NodeStats, pods iter.Seq[*corev1.Pod]) pidstats.NodeStats {
	s.Used = pidstats.EstimateUsedSeq(s, pods, f.defaultPodPIDs)
	return s
}

// Floor is max(MinFreePIDs, MinFreePercent of the allocatable PIDs).
func (f pids) Floor(s pidstats.NodeStats) int64 { return f.floor.Of(s.Allocatable()) }

// Need is the pod's headroom.dev/pids, or DefaultPodPIDs. A malformed value
// counts as one above the most a pod can hold (it fits nowhere).
func (f pids) Need(pod *corev1.Pod) (int64, bool, error) {
	n, err := pidstats.PodPIDs(pod, f.defaultPodPIDs)
	return n, true, err
}

// Counted: a pod placed after its node's sample adds its declared PIDs to
// the node's estimate, whatever its phase.
func (f pids) Counted(pod *corev1.Pod) bool {
	n, _ := pidstats.PodPIDs(pod, f.defaultPodPIDs)
	return n > 0
}

// Sign: pods that need the same number of PIDs are alike.
func (f pids) Sign(pod *corev1.Pod) fwk.SignFragment {
	n, _ := pidstats.PodPIDs(pod, f.defaultPodPIDs)
	return fwk.SignFragment{Key: podPIDsSignerName, Value: n}
}

// Definition is NodePIDs as the registry lists it.
var Definition = &figure.Definition[config.NodePIDsArgs, pidstats.NodeStats]{
	Names: figure.Names{
		Plugin: Name, Kind: "PID", Noun: "PID", FilterReason: ErrReasonTooFewPIDs,
		InvalidNodeEvent: EventReasonInvalidNodePIDs,
		InvalidPodEvent:  EventReasonInvalidPIDs, PodAnnotation: pidstats.AnnotationPodPIDs,
	},
	NewV1Args: func() runtime.Object { return &configv1.NodePIDsArgs{} },
	Validate:  validation.ValidateNodePIDsArgs,
	Configure: func(a *config.NodePIDsArgs, _ fwk.Handle) (figure.Settings, figure.Figure[pidstats.NodeStats], error) {
		return figure.Settings{MaxSampleAge: a.MaxSampleAge.Duration, UnknownScore: a.UnknownNodeScore, Ample: a.AmpleFreePIDs},
			pids{defaultPodPIDs: a.DefaultPodPIDs, floor: pidstats.Floor{MinFreePIDs: a.MinFreePIDs, MinFreePercent: a.MinFreePercent}}, nil
	},
}
