package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// State is the state of a node's sample as Headroom's plugins see it: the
// states of the scheduler's headroom_nodes gauge.
type State string

const (
	// StateKnown: a valid sample no older than the plugin's maxSampleAge.
	StateKnown State = "known"
	// StateUnknown: the node carries no sample (or, for memory, no
	// allocatable memory).
	StateUnknown State = "unknown"
	// StateStale: a valid sample older than the plugin's maxSampleAge; the
	// plugin treats the node as unknown, its figures are shown all the same.
	StateStale State = "stale"
	// StateInvalid: annotations the plugin ignores.
	StateInvalid State = "invalid"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeHeadroomList is what kubectl headroom nodes prints: one item per
// node, in the order of --sort-by.
type NodeHeadroomList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	// SchedulerConfiguration names the configuration whose profile the
	// figures were computed with (a ConfigMap of the cluster, a file, or
	// the built-in default).
	SchedulerConfiguration string `json:"schedulerConfiguration"`
	// Profile is the schedulerName of that profile.
	Profile string `json:"profile"`
	// Pod is the pod whose placement the items' verdicts are for
	// (namespace/name), when one was given.
	Pod string `json:"pod,omitempty"`

	Items []NodeHeadroom `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeHeadroom is one node's headroom as Headroom's plugins see it. Its name
// and labels are the Node's.
type NodeHeadroom struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// PIDs are NodePIDs' figures.
	PIDs PIDHeadroom `json:"pids"`
	// PodIPs are NodeIPs' figures.
	PodIPs IPHeadroom `json:"podIPs"`
	// Memory is OOMRisk's model of the node.
	Memory MemoryHeadroom `json:"memory"`
	// Verdict is the plugins' decision for the pod given with --pod or
	// --pod-file; absent without one.
	Verdict *Verdict `json:"verdict,omitempty"`
}

// PIDHeadroom is the node's PID sample and the use estimated from it. The
// figures are set when State is known or stale.
type PIDHeadroom struct {
	State State `json:"state"`
	// Message says why the state is not known.
	Message string `json:"message,omitempty"`
	// SampledAt is the time of the node agent's sample.
	SampledAt *metav1.Time `json:"sampledAt,omitempty"`
	// Capacity, Reserved and Allocatable (capacity − reserved) are the
	// node's; Used is the PIDs in use when sampled.
	Capacity    *int64 `json:"capacity,omitempty"`
	Reserved    *int64 `json:"reserved,omitempty"`
	Allocatable *int64 `json:"allocatable,omitempty"`
	Used        *int64 `json:"used,omitempty"`
	// EstimatedUsed is Used plus the PIDs of the pods placed since the
	// sample, less those of listed pods gone since; EstimatedFree is
	// Allocatable − EstimatedUsed, at least 0.
	EstimatedUsed *int64 `json:"estimatedUsed,omitempty"`
	EstimatedFree *int64 `json:"estimatedFree,omitempty"`
}

// IPHeadroom is the node's pod-IP sample and the use estimated from it. The
// figures are set when State is known or stale.
type IPHeadroom struct {
	State     State        `json:"state"`
	Message   string       `json:"message,omitempty"`
	SampledAt *metav1.Time `json:"sampledAt,omitempty"`
	// Capacity is the addresses the node's CNI IPAM can hand out; Used
	// those allocated when sampled.
	Capacity *int64 `json:"capacity,omitempty"`
	Used     *int64 `json:"used,omitempty"`
	// EstimatedUsed is Used plus the pods on the pod network placed since
	// the sample; EstimatedFree is Capacity − EstimatedUsed, at least 0.
	EstimatedUsed *int64 `json:"estimatedUsed,omitempty"`
	EstimatedFree *int64 `json:"estimatedFree,omitempty"`
	// Leaked is, of Used, the addresses allocated to no live pod sandbox
	// of the node when sampled; unset where the IPAM cannot tell.
	Leaked *int64 `json:"leaked,omitempty"`
}

// MemoryHeadroom is OOMRisk's model of the node, in bytes. The figures are
// set when State is known.
type MemoryHeadroom struct {
	State   State  `json:"state"`
	Message string `json:"message,omitempty"`
	// AllocatableBytes is the node's allocatable memory.
	AllocatableBytes *int64 `json:"allocatableBytes,omitempty"`
	// WorstCaseBytes is the sum of the pods' worst-case memory (limits, or
	// OOMRisk's estimate without one).
	WorstCaseBytes *int64 `json:"worstCaseBytes,omitempty"`
	// ShortfallBytes is how far the worst case exceeds the node's memory.
	ShortfallBytes *int64 `json:"shortfallBytes,omitempty"`
	// AtRiskBytes is the memory of the containers the OOM killer would
	// take to cover the shortfall.
	AtRiskBytes *int64 `json:"atRiskBytes,omitempty"`
	// Measured is the state of the node's memory sample
	// (headroom.dev/memory-*): known when OOMRisk builds its model on it.
	Measured State `json:"measured"`
	// MeasuredMessage says why the sample is not used.
	MeasuredMessage string `json:"measuredMessage,omitempty"`
	// SampledAt is the sample's time.
	SampledAt *metav1.Time `json:"sampledAt,omitempty"`
	// UsedBytes is the node's working set as the shared estimate has it:
	// the sample's figure, less the listed pods that left, plus the
	// requests of pods placed after it.
	UsedBytes *int64 `json:"usedBytes,omitempty"`
	// ShortfallNowBytes is how far UsedBytes exceeds allocatable.
	ShortfallNowBytes *int64 `json:"shortfallNowBytes,omitempty"`
}

// Verdict is what the profile's Headroom plugins decide for a pod on the
// node, from a scheduling cycle as the kube-scheduler runs it.
type Verdict struct {
	// Filter is "passes", or "fails".
	Filter string `json:"filter"`
	// FilterPlugin and FilterMessage are the rejecting plugin and its
	// reason when Filter fails.
	FilterPlugin  string `json:"filterPlugin,omitempty"`
	FilterMessage string `json:"filterMessage,omitempty"`
	// Score is the sum of the plugins' weighted scores on a node that
	// passes.
	Score *int64 `json:"score,omitempty"`
	// PluginScores are each plugin's weighted score.
	PluginScores []PluginScore `json:"pluginScores,omitempty"`
}

// PluginScore is one plugin's score of a node, times its weight.
type PluginScore struct {
	Plugin string `json:"plugin"`
	Score  int64  `json:"score"`
}
