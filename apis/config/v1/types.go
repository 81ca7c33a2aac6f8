package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodePIDsArgs configures the NodePIDs plugin.
type NodePIDsArgs struct {
	metav1.TypeMeta `json:",inline"`

	// DefaultPodPIDs is the number of PIDs assumed for a pod without the
	// headroom.dev/pids annotation. Default 100.
	DefaultPodPIDs *int64 `json:"defaultPodPIDs,omitempty"`
	// MinFreePIDs is the absolute floor of PIDs a node must keep free after
	// placing a pod. Default 512.
	MinFreePIDs *int64 `json:"minFreePIDs,omitempty"`
	// MinFreePercent is the floor as a percentage of the node's allocatable
	// PIDs; the larger of the two floors applies. Default 5.
	MinFreePercent *int64 `json:"minFreePercent,omitempty"`
	// MaxSampleAge is how old a node's PID sample may be before the node's
	// PID headroom counts as unknown; "0s" means never. Default 10m, twice
	// headroom-node-agent's default maximum write interval.
	MaxSampleAge *metav1.Duration `json:"maxSampleAge,omitempty"`
	// UnknownNodeScore is the score, in [0, 100], of a node whose PID
	// headroom is unknown, or -1 for the mean score of the nodes whose
	// headroom is known, so that unknown nodes are neither favoured nor
	// penalised. Default -1.
	UnknownNodeScore *int64 `json:"unknownNodeScore,omitempty"`
	// AmpleFreePIDs is the number of free PIDs, after placing the pod, from
	// which a node scores as well as any other: Score counts a node's free
	// PIDs up to it, so among nodes that all have that much headroom the
	// other plugins decide, and NodePIDs speaks only where PIDs run short.
	// 0 means no limit: more free PIDs always score higher. Default 32768,
	// the default pid_max of a Linux machine: a node with a whole such
	// machine's PIDs to spare is not short of them.
	AmpleFreePIDs *int64 `json:"ampleFreePIDs,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// OOMRiskArgs configures the OOMRisk plugin.
type OOMRiskArgs struct {
	metav1.TypeMeta `json:",inline"`

	// OwnRiskWeight weighs the incoming pod's own risk of being killed.
	// Default 3.
	OwnRiskWeight *int64 `json:"ownRiskWeight,omitempty"`
	// CollateralWeight weighs the memory of existing pods the placement newly
	// puts at risk, relative to the incoming pod's worst case. Default 1.
	CollateralWeight *int64 `json:"collateralWeight,omitempty"`
	// NoLimitRequestPercent estimates the worst case of a container without
	// a memory limit as this percentage of its memory request. Default 200.
	NoLimitRequestPercent *int64 `json:"noLimitRequestPercent,omitempty"`
	// NoLimitAllocatablePermille estimates it as this share (per mille) of
	// the node's allocatable memory; the larger estimate applies. Default 100.
	NoLimitAllocatablePermille *int64 `json:"noLimitAllocatablePermille,omitempty"`
	// MaxSampleAge is how old a node's memory sample (headroom.dev/memory-*)
	// may be before the node is judged on its pods' declarations alone;
	// "0s" means never. Default 10m, as for NodePIDs: headroom-node-agent
	// writes the samples together.
	MaxSampleAge *metav1.Duration `json:"maxSampleAge,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeIPsArgs configures the NodeIPs plugin.
type NodeIPsArgs struct {
	metav1.TypeMeta `json:",inline"`

	// MinFreeIPs is the floor of pod IPs a node must keep free after placing
	// a pod that takes one (a pod not on the host network). Default 0: a
	// node is rejected only when it has no pod IP left.
	MinFreeIPs *int64 `json:"minFreeIPs,omitempty"`
	// MaxSampleAge is how old a node's pod-IP sample may be before the
	// node's pod-IP headroom counts as unknown; "0s" means never. Default
	// 10m, as for NodePIDs: headroom-node-agent writes both samples together.
	MaxSampleAge *metav1.Duration `json:"maxSampleAge,omitempty"`
	// UnknownNodeScore is the score, in [0, 100], of a node whose pod-IP
	// headroom is unknown, or -1 for the mean score of the nodes whose
	// headroom is known, so that unknown nodes are neither favoured nor
	// penalised. Default -1.
	UnknownNodeScore *int64 `json:"unknownNodeScore,omitempty"`
	// AmpleFreeIPs is the number of free pod IPs, after placing the pod,
	// from which a node scores as well as any other: Score counts a node's
	// free pod IPs up to it, so NodeIPs speaks only where pod IPs run short.
	// 0 means no limit. Default 110, the kubelet's default maxPods: a node
	// with that many pod IPs to spare is not limited by its IPAM.
	AmpleFreeIPs *int64 `json:"ampleFreeIPs,omitempty"`
	// IPSource is where the nodes' pod-IP figures come from: "Annotations",
	// the headroom.dev/ip-* annotations headroom-node-agent writes; or
	// "CalicoIPAM", Calico's IPAM objects (crd.projectcalico.org/v1
	// IPAMBlocks, IPPools, IPAMConfigs), which headroom-scheduler then
	// watches once for the whole cluster (it needs the rights to list and
	// watch them: manifests/scheduler/calico-ipam). With CalicoIPAM the
	// figures are live, so maxSampleAge does not apply. Default
	// "Annotations".
	IPSource *string `json:"ipSource,omitempty"`
}
