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
type NodePIDs = figure.Plugin

// Definition is NodePIDs as the registry lists it.
var Definition = &figure.Definition[config.NodePIDsArgs]{
	Names: figure.Names{
		Plugin: Name, Kind: "PID", Noun: "PID", FilterReason: ErrReasonTooFewPIDs,
		InvalidNodeEvent: EventReasonInvalidNodePIDs,
		InvalidPodEvent:  EventReasonInvalidPIDs, PodAnnotation: pidstats.AnnotationPodPIDs,
	},
	NewV1Args: func() runtime.Object { return &configv1.NodePIDsArgs{} },
	Validate:  validation.ValidateNodePIDsArgs,
	Configure: func(a *config.NodePIDsArgs) (figure.Settings, figure.Figure) {
		return figure.Settings{MaxSampleAge: a.MaxSampleAge.Duration, UnknownScore: a.UnknownNodeScore, Ample: a.AmpleFreePIDs},
			pids{defaultPodPIDs: a.DefaultPodPIDs, floor: pidstats.Floor{MinFreePIDs: a.MinFreePIDs, MinFreePercent: a.MinFreePercent}}
	},
}

// New builds the plugin from its args, which the kube-scheduler's scheme has
// decoded and defaulted into the internal *config.NodePIDsArgs. Nil args mean
// the defaults.
var New = Definition.New

// pids is the PID figure: pkg/pidstats' model with NodePIDsArgs.
type pids struct {
	defaultPodPIDs int64
	floor          pidstats.Floor
}

func (f pids) Read(node *corev1.Node, now time.Time) (figure.Sample, error) {
	s, err := pidstats.ParseNode(node.Annotations, now, 0)
	if err != nil {
		return nil, err
	}
	return &nodeSample{NodeStats: s, pids: f}, nil
}

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

// nodeSample is a node's PID sample.
type nodeSample struct {
	pidstats.NodeStats
	pids
}

func (s *nodeSample) SampledAt() time.Time { return s.NodeStats.SampledAt }

// Estimate is the node's PID use as pkg/pidstats estimates it from the
// sample and the node's pods (RelieveNodePressure uses the same estimate).
func (s *nodeSample) Estimate(pods iter.Seq[*corev1.Pod]) (used, free, floor int64) {
	est := s.NodeStats
	est.Used = pidstats.EstimateUsedSeq(s.NodeStats, pods, s.defaultPodPIDs)
	return est.Used, est.Free(), s.floor.Of(est.Allocatable())
}

func (s *nodeSample) Reported() (free, floor int64) {
	return s.Free(), s.floor.Of(s.Allocatable())
}

// Ignored is an invalid per-pod list: the reported use counts alone.
func (s *nodeSample) Ignored() (key, note string, err error) {
	if err := s.Pods.Err(); err != nil {
		return pidstats.AnnotationPIDPods, "the node's reported PID use counts alone", err
	}
	return "", "", nil
}

func (s *nodeSample) Details() []any {
	return []any{"allocatable", s.Allocatable(), "reportedUsed", s.Used}
}
