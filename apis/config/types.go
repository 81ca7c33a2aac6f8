package config

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// SchedulerName is the schedulerName of the secondary-scheduler profile
// Headroom ships, which runs its plugins: pods placed by it are the ones
// RelieveNodePressure evicts by default, and the profile kubectl-headroom
// reads by default.
const SchedulerName = "headroom-scheduler"

// Namespace is the namespace of the shipped manifests.
const Namespace = "headroom-system"

// UnknownNodeScoreMeanOfKnown, as NodePIDsArgs.UnknownNodeScore or
// NodeIPsArgs.UnknownNodeScore, scores a node with unknown headroom at the
// mean score of the nodes whose headroom is known in the same cycle:
// neither favoured nor penalised against them, whatever the spread of their
// free PIDs or pod IPs.
const UnknownNodeScoreMeanOfKnown int64 = -1

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodePIDsArgs configures the NodePIDs plugin.
type NodePIDsArgs struct {
	metav1.TypeMeta

	// DefaultPodPIDs is the number of PIDs assumed for a pod without the
	// headroom.dev/pids annotation.
	DefaultPodPIDs int64
	// MinFreePIDs is the absolute floor of PIDs a node must keep free after
	// placing a pod.
	MinFreePIDs int64
	// MinFreePercent is the floor as a percentage of the node's allocatable
	// PIDs; the larger of the two floors applies.
	MinFreePercent int64
	// MaxSampleAge is how old a node's PID sample may be before the node's
	// PID headroom counts as unknown. Zero means samples never go stale.
	MaxSampleAge metav1.Duration
	// UnknownNodeScore is the score, in [0, 100], of a node whose PID
	// headroom is unknown (no, malformed or stale annotations), or
	// UnknownNodeScoreMeanOfKnown.
	UnknownNodeScore int64
	// AmpleFreePIDs is the free PIDs after placement from which a node
	// scores as well as any: Score counts free PIDs up to it. Zero means no
	// limit.
	AmpleFreePIDs int64
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// OOMRiskArgs configures the OOMRisk plugin.
type OOMRiskArgs struct {
	metav1.TypeMeta

	// OwnRiskWeight weighs the incoming pod's own risk of being killed.
	OwnRiskWeight int64
	// CollateralWeight weighs the memory of existing pods the placement newly
	// puts at risk, relative to the incoming pod's worst case.
	CollateralWeight int64
	// NoLimitRequestPercent estimates the worst case of a container without
	// a memory limit as this percentage of its memory request...
	NoLimitRequestPercent int64
	// NoLimitAllocatablePermille ...or as this share (per mille) of the
	// node's allocatable memory, whichever is larger.
	NoLimitAllocatablePermille int64
	// MaxSampleAge is how old a node's memory sample may be before the
	// node is judged on its pods' declarations alone.
	MaxSampleAge metav1.Duration
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeIPsArgs configures the NodeIPs plugin.
type NodeIPsArgs struct {
	metav1.TypeMeta

	// MinFreeIPs is the floor of pod IPs a node must keep free after
	// placing a pod that takes one.
	MinFreeIPs int64
	// MaxSampleAge is how old a node's pod-IP sample may be before the
	// node's pod-IP headroom counts as unknown. Zero means samples never go
	// stale.
	MaxSampleAge metav1.Duration
	// UnknownNodeScore is the score, in [0, 100], of a node whose pod-IP
	// headroom is unknown (no, malformed or stale annotations), or
	// UnknownNodeScoreMeanOfKnown.
	UnknownNodeScore int64
	// AmpleFreeIPs is the free pod IPs after placement from which a node
	// scores as well as any: Score counts free pod IPs up to it. Zero means
	// no limit.
	AmpleFreeIPs int64
	// IPSource is where the nodes' pod-IP figures come from: IPSourceAnnotations
	// or IPSourceCalicoIPAM.
	IPSource string
}

// The sources of NodeIPsArgs.IPSource (and RelieveNodePressureArgs'
// ipSource).
const (
	// IPSourceAnnotations: the headroom.dev/ip-* annotations that
	// headroom-node-agent writes on each Node.
	IPSourceAnnotations = "Annotations"
	// IPSourceCalicoIPAM: Calico's IPAM objects (calico-ipam), which the
	// plugin's process watches once for the whole cluster
	// (pkg/calicoipam); the node agent publishes no pod-IP figures there.
	IPSourceCalicoIPAM = "CalicoIPAM"
)
