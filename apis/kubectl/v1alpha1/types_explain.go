package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeEvictionPlan is what kubectl headroom evictions prints: what
// RelieveNodePressure would do on the node now, as the first node of a
// descheduler cycle. Its name is the node's.
type NodeEvictionPlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Policy names the DeschedulerPolicy the plan was made with (a
	// ConfigMap of the cluster, a file, or the built-in default).
	Policy string `json:"policy"`
	// Profile is the name of the policy's profile that enables
	// RelieveNodePressure.
	Profile string `json:"profile"`
	// Decision is what the next run does on the node.
	Decision EvictionDecision `json:"decision"`
	// Notes are what else decides the run: a record of earlier runs that
	// could not be read, too few ready nodes for a cycle.
	Notes []string `json:"notes,omitempty"`
	// Unknown tells, for each enabled trigger whose figures are unknown on
	// the node ("PIDs", "memory", "OOM"), why: that trigger leaves the
	// node alone.
	Unknown map[string]string `json:"unknown,omitempty"`
	// Now are the node's figures, Thresholds the thresholds and targets of
	// the triggers that fired, After the figures as projected after the
	// plan's evictions; as the plugin logs them.
	Now        []Figure `json:"now,omitempty"`
	Thresholds []Figure `json:"thresholds,omitempty"`
	After      []Figure `json:"after,omitempty"`
	// PressureSeen is, while Decision is Waiting, in how many of the
	// consecutive samples pressureSamples asks for the pressure was seen
	// ("1 of 2 consecutive samples").
	PressureSeen string `json:"pressureSeen,omitempty"`
	// Budget is, while Decision is BudgetSpent, which eviction budget
	// (evictionBudget) keeps the plan from relieving the node and how.
	Budget string `json:"budget,omitempty"`
	// Relieves: the plan brings the node to or below its thresholds, so
	// its evictions are requested (while Waiting: once the pressure lasts).
	Relieves bool `json:"relieves"`
	// Evictions is how many of Pods the plan evicts; while Waiting, how
	// many it would evict once the pressure lasts.
	Evictions int `json:"evictions"`
	// Pods are the node's pods in the order the plan walks them; while
	// Waiting, the plan that runs if the pressure lasts.
	Pods []PodEviction `json:"pods,omitempty"`
}

// EvictionDecision is what RelieveNodePressure does on a node in its next
// run.
type EvictionDecision string

const (
	// DecisionNotDescheduled: the node is not Ready or not selected by the
	// policy's nodeSelector; the descheduler leaves it alone.
	DecisionNotDescheduled EvictionDecision = "NotDescheduled"
	// DecisionWithinThresholds: no trigger fired; nothing is evicted.
	DecisionWithinThresholds EvictionDecision = "WithinThresholds"
	// DecisionWaiting: a trigger fired in fewer consecutive samples than
	// pressureSamples; nothing is evicted yet.
	DecisionWaiting EvictionDecision = "Waiting"
	// DecisionEvict: the plan relieves the node; its evictions are
	// requested.
	DecisionEvict EvictionDecision = "Evict"
	// DecisionUnrelievable: no eviction within the limits brings the node
	// to its threshold; nothing is evicted and a NodePressureUnrelievable
	// Warning Event is recorded on the Node.
	DecisionUnrelievable EvictionDecision = "Unrelievable"
	// DecisionBudgetSpent: the node is above a threshold, but an eviction
	// budget over its window (evictionBudget) allows too few evictions
	// for the plan: nothing is evicted until the window slides past
	// enough earlier evictions, and no Event is recorded.
	DecisionBudgetSpent EvictionDecision = "BudgetSpent"
)

// Figure is one of the plugin's figures of a node, as it logs them.
type Figure struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// PodEviction is the plan's decision on one pod.
type PodEviction struct {
	// Namespace and Name are the pod's.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Priority  int32  `json:"priority"`
	// Evict: the plan evicts the pod; EvictionOrder is its place among the
	// evictions, from 1.
	Evict         bool `json:"evict"`
	EvictionOrder int  `json:"evictionOrder,omitempty"`
	// FreesPIDs and FreesMemoryBytes are what evicting it frees by the PID
	// and memory triggers' counts; memory is unset where that trigger is
	// off or the node's memory unknown.
	FreesPIDs        int64  `json:"freesPIDs"`
	FreesMemoryBytes *int64 `json:"freesMemoryBytes,omitempty"`
	// Reason is the eviction's reason, as the evictor records it on the
	// pod's Event, or why the pod stays.
	Reason string `json:"reason"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// OOMKillOrder is what kubectl headroom explain-oom prints: the order in
// which the kernel's OOM killer would take the node's containers, as
// OOMRisk models it, and, given a pod, the same with the pod placed there.
// Its name is the node's.
type OOMKillOrder struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// MemorySample says why the node's memory sample is not used, when it
	// has one that is stale or invalid: the model uses declared figures.
	MemorySample string `json:"memorySample,omitempty"`
	// Order is the node's kill order as its pods are now.
	Order KillOrder `json:"order"`
	// Placement is the order and OOMRisk's assessment with the pod of
	// --pod-file placed on the node.
	Placement *OOMPlacement `json:"placement,omitempty"`
}

// KillOrder is a node's kill order with its totals, in bytes.
type KillOrder struct {
	CapacityBytes    int64 `json:"capacityBytes"`
	AllocatableBytes int64 `json:"allocatableBytes"`
	// WorstCaseBytes is the sum of the containers' worst cases;
	// ShortfallBytes how far it exceeds allocatable; AtRiskBytes the
	// worst case of the containers the killer takes to cover it.
	WorstCaseBytes int64 `json:"worstCaseBytes"`
	ShortfallBytes int64 `json:"shortfallBytes"`
	AtRiskBytes    int64 `json:"atRiskBytes"`
	// Measured is the working-set view of a model built on the node's
	// memory sample; unset without one.
	Measured *MeasuredMemory `json:"measured,omitempty"`
	// Containers are in kill order, first to die first.
	Containers []OOMVictim `json:"containers"`
}

// MeasuredMemory is a kill order's figures by what the containers hold now.
type MeasuredMemory struct {
	UsedBytes      int64 `json:"usedBytes"`
	ShortfallBytes int64 `json:"shortfallBytes"`
	AtRiskBytes    int64 `json:"atRiskBytes"`
}

// OOMVictim is one container in a kill order.
type OOMVictim struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
	// Sidecar marks a restartable init container; Incoming a container of
	// the pod being placed.
	Sidecar  bool   `json:"sidecar,omitempty"`
	Incoming bool   `json:"incoming,omitempty"`
	QOS      string `json:"qos"`
	// OOMScoreAdj is the oom_score_adj the kubelet gives the container.
	OOMScoreAdj int `json:"oomScoreAdj"`
	// WorstBytes is its limit, or the estimate without one (Estimated).
	WorstBytes int64 `json:"worstBytes"`
	Estimated  bool  `json:"estimated,omitempty"`
	// UsedBytes is what it holds now, in a measured model; Declared: its
	// pod was not measured and what it declares stands in.
	UsedBytes *int64 `json:"usedBytes,omitempty"`
	Declared  bool   `json:"declared,omitempty"`
	// PointsBytes is the kernel's badness in bytes.
	PointsBytes int64 `json:"pointsBytes"`
	// AtRisk: the killer takes it to cover the shortfall; AtRiskNow: to
	// cover the shortfall now (measured models).
	AtRisk    bool  `json:"atRisk"`
	AtRiskNow *bool `json:"atRiskNow,omitempty"`
}

// OOMPlacement is the kill order with a pod placed on the node, the pod's
// assessment and the score OOMRisk gives the node.
type OOMPlacement struct {
	// Pod is namespace/name; QOS its QoS class.
	Pod   string    `json:"pod"`
	QOS   string    `json:"qos"`
	Order KillOrder `json:"order"`
	// ShortfallBeforeBytes and ShortfallAfterBytes are the node's
	// shortfall without and with the pod; Rank is the pod's place in the
	// kill order; OwnRiskPPM the share of its worst case (PodWorstBytes)
	// the killer would take; CollateralBytes what of the others' it would
	// take because of the pod.
	ShortfallBeforeBytes int64 `json:"shortfallBeforeBytes"`
	ShortfallAfterBytes  int64 `json:"shortfallAfterBytes"`
	Rank                 int   `json:"rank"`
	OwnRiskPPM           int64 `json:"ownRiskPPM"`
	PodWorstBytes        int64 `json:"podWorstBytes"`
	CollateralBytes      int64 `json:"collateralBytes"`
	// Now is the same by what the containers hold now, on a measured node.
	Now *OOMAssessmentNow `json:"now,omitempty"`
	// Score is OOMRisk's score of the node (0 to 100), unset when it gives
	// none; ScoreReason says how it was reached or why there is none.
	Score       *int64 `json:"score,omitempty"`
	ScoreReason string `json:"scoreReason"`
}

// OOMAssessmentNow is a pod's assessment by what the containers hold now.
type OOMAssessmentNow struct {
	ShortfallBeforeBytes int64 `json:"shortfallBeforeBytes"`
	ShortfallAfterBytes  int64 `json:"shortfallAfterBytes"`
	OwnRiskPPM           int64 `json:"ownRiskPPM"`
	PodNowBytes          int64 `json:"podNowBytes"`
	CollateralBytes      int64 `json:"collateralBytes"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeExplanation is what kubectl headroom explain node prints: the
// figures each of Headroom's scheduler plugins reads for the node and,
// given a pod, their decision. Its name is the node's.
type NodeExplanation struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// SchedulerConfiguration and Profile are as in NodeHeadroomList.
	SchedulerConfiguration string `json:"schedulerConfiguration"`
	Profile                string `json:"profile"`
	// PIDs are NodePIDs' figures, PodIPs NodeIPs'.
	PIDs   PIDHeadroom `json:"pids"`
	PodIPs IPHeadroom  `json:"podIPs"`
	// Memory is OOMRisk's kill order of the node; unset, with
	// MemoryMessage, where the node's memory is unknown.
	Memory        *KillOrder `json:"memory,omitempty"`
	MemoryMessage string     `json:"memoryMessage,omitempty"`
	// Pod is the decision for the pod of --pod-file or --pod.
	Pod *PodDecision `json:"pod,omitempty"`
}

// PodDecision is the profile's Headroom plugins' decision for a pod on the
// node, from a scheduling cycle over every node.
type PodDecision struct {
	// Name is namespace/name; PIDs what it is expected to use, and
	// PIDsMessage why its annotation was not used.
	Name        string `json:"name"`
	PIDs        int64  `json:"pids"`
	PIDsMessage string `json:"pidsMessage,omitempty"`
	// Verdict is Filter's verdict on the node and its scores.
	Verdict Verdict `json:"verdict"`
	// Feasible and Nodes: how many nodes pass Filter, of how many.
	Feasible int `json:"feasible"`
	Nodes    int `json:"nodes"`
	// Rank is the node's place among those that pass, by score (from 1),
	// and Best the node that ranks first; unset when the node fails or no
	// score was given. BestScore is Best's.
	Rank      int    `json:"rank,omitempty"`
	Best      string `json:"best,omitempty"`
	BestScore *int64 `json:"bestScore,omitempty"`
	// ScoreMessage says why no score was given (PreScore's status).
	ScoreMessage string `json:"scoreMessage,omitempty"`
	// NotScored are the plugins whose PreScore skipped scoring: every node
	// would score the same.
	NotScored []string `json:"notScored,omitempty"`
	// OOM is OOMRisk's assessment with the pod placed on the node.
	OOM *OOMPlacement `json:"oom,omitempty"`
}
