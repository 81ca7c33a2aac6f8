package relievenodepressure

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/descheduler/pkg/api"
)

// +k8s:deepcopy-gen=true
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// RelieveNodePressureArgs configures the RelieveNodePressure plugin. When no
// trigger is given, the PID trigger is enabled with its defaults; the OOM,
// memory and ipStarved triggers run only when given.
type RelieveNodePressureArgs struct {
	metav1.TypeMeta `json:",inline"`

	// PIDs is the PID trigger; nil disables it (unless no trigger is given).
	PIDs *PIDsTrigger `json:"pids,omitempty"`
	// OOM is the worst-case memory-shortfall trigger; nil disables it.
	OOM *OOMTrigger `json:"oom,omitempty"`
	// Memory is the measured-memory trigger; nil disables it.
	Memory *MemoryTrigger `json:"memory,omitempty"`
	// IPStarved is the pod-IP starvation trigger; nil disables it.
	IPStarved *IPStarvedTrigger `json:"ipStarved,omitempty"`
	// IPSource is where the nodes' pod-IP figures (ipStarved's, and the
	// room for a replacement) come from, as NodeIPsArgs' ipSource:
	// "Annotations" (default), the node agent's headroom.dev/ip-*; or
	// "CalicoIPAM", Calico's IPAM objects, which the descheduler then
	// watches once for the cluster (rights: manifests/descheduler/calico-ipam).
	IPSource string `json:"ipSource,omitempty"`
	// DeletePriorityAnnotation is the pod annotation whose int32 value ranks
	// a pod before every ReplicaSet rule, higher first. Default
	// controller.alpha.kubernetes.io/delete-priority.
	DeletePriorityAnnotation string `json:"deletePriorityAnnotation,omitempty"`
	// Namespaces limits the victims to, or excludes them from, namespaces;
	// at most one of include and exclude.
	Namespaces *api.Namespaces `json:"namespaces,omitempty"`
	// LabelSelector limits the victims to pods it matches.
	LabelSelector *metav1.LabelSelector `json:"labelSelector,omitempty"`
	// SchedulerNames limits the victims to pods placed by these schedulers,
	// so that a replacement is placed by a scheduler that sees the pressure;
	// default [headroom-scheduler]. A pod's schedulerName is "default-scheduler"
	// when its spec leaves it empty.
	SchedulerNames []string `json:"schedulerNames,omitempty"`
	// LowerPriorityFirst ranks pods by spec.priority, lower first, before the
	// delete order, as the kubelet ranks pods for eviction; default true. The
	// delete order's annotations are set by whoever may edit a pod, so across
	// workloads they only decide among pods of equal priority: a tenant cannot
	// push evictions onto a more important neighbour with them.
	LowerPriorityFirst *bool `json:"lowerPriorityFirst,omitempty"`
	// MaxPodsToEvictPerNode bounds the plan for a node: a node is relieved
	// only if the first pods of the order, at most this many, bring it to
	// or below its threshold. Set it to the policy's
	// maxNoOfPodsToEvictPerNode (the plugin cannot read the evictor's limit);
	// unset means no limit of its own, and the evictor's limit, if any, may
	// then cut a plan short.
	MaxPodsToEvictPerNode *uint `json:"maxPodsToEvictPerNode,omitempty"`
	// PressureSamples is how many consecutive samples must show a trigger
	// above its threshold before the node is relieved (the OOM trigger's
	// figures need no sample: each run counts as one); in [1, 10], default
	// 2. A burst seen once (a build's fork storm, a rollout's surge) does
	// not evict; pressure that lasts from one run to the next does.
	PressureSamples *int32 `json:"pressureSamples,omitempty"`
	// StateConfigMap, "namespace/name", is where the plugin keeps what it
	// saw of each node across runs (pressure seen in earlier samples, the
	// last relief), so that the CronJob's one-shot runs keep the debounce
	// and never evict twice for one pressure; default
	// headroom-system/headroom-descheduler-state.
	StateConfigMap string `json:"stateConfigMap,omitempty"`
	// EvictionBudget bounds this plugin's evictions over a sliding window
	// of time, cluster-wide, per node and per namespace, counted in
	// stateConfigMap so that neither the descheduler's per-run reset of
	// its own limits (every run, every second in Deployment mode) nor a
	// restart or a change of leader resets it; nil: no budget of its own
	// (the policy's per-run limits only).
	EvictionBudget *EvictionBudget `json:"evictionBudget,omitempty"`
	// SchedulerConfigFile is the headroom-scheduler's
	// KubeSchedulerConfiguration, as the shipped manifests mount it: at
	// start the plugin checks that NodePIDs' floor in the profiles of
	// schedulerNames equals pids.minFreePIDs and pids.minFreePercent, and
	// refuses to start otherwise, naming both. A missing file is skipped
	// with a log line. Default /etc/headroom/scheduler/scheduler-config.yaml.
	SchedulerConfigFile string `json:"schedulerConfigFile,omitempty"`
}

// +k8s:deepcopy-gen=true

// PIDsTrigger relieves a node whose PID use, as a percentage of its
// allocatable PIDs, is above ThresholdPercent, until it is projected at or
// below TargetPercent. Use is the node's reported use plus the PIDs of pods
// placed after the sample, exactly as the NodePIDs scheduler plugin counts it.
type PIDsTrigger struct {
	// ThresholdPercent, in [1, 100]; default 95.
	ThresholdPercent *int64 `json:"thresholdPercent,omitempty"`
	// TargetPercent, in [0, ThresholdPercent); default ThresholdPercent − 5.
	TargetPercent *int64 `json:"targetPercent,omitempty"`
	// DefaultPodPIDs is the PIDs counted for a pod without a valid
	// headroom.dev/pids annotation, both for pods placed after the sample
	// and as the PIDs an eviction frees; default 100 (NodePIDs' default).
	DefaultPodPIDs *int64 `json:"defaultPodPIDs,omitempty"`
	// MaxSampleAge is how old a node's PID sample may be before the node's
	// PID use counts as unknown and the trigger leaves it alone; default 10m
	// (NodePIDs' default); 0 means samples never go stale.
	MaxSampleAge *metav1.Duration `json:"maxSampleAge,omitempty"`
	// MinPodPIDsPercent: a pod that frees fewer PIDs than this percentage of
	// the node's allocatable PIDs is never evicted for PIDs; in [0, 100];
	// default 1.
	MinPodPIDsPercent *int64 `json:"minPodPIDsPercent,omitempty"`
	// MinFreePIDs and MinFreePercent are NodePIDs' floor: a pod is evicted
	// only when another node could take its PIDs and keep
	// max(minFreePIDs, allocatable × minFreePercent / 100) free. Defaults
	// 512 and 5, NodePIDs' defaults; set them as NodePIDsArgs sets them.
	MinFreePIDs    *int64 `json:"minFreePIDs,omitempty"`
	MinFreePercent *int64 `json:"minFreePercent,omitempty"`
}

// +k8s:deepcopy-gen=true

// OOMTrigger relieves a node whose worst-case memory shortfall (the sum of
// its containers' worst-case memory beyond its allocatable memory, as the
// OOMRisk scheduler plugin models it) is above ThresholdPercent of its
// allocatable memory, until it is projected at or below TargetPercent.
type OOMTrigger struct {
	// ThresholdPercent, at least 1; default 20.
	ThresholdPercent *int64 `json:"thresholdPercent,omitempty"`
	// TargetPercent, in [0, ThresholdPercent); default ThresholdPercent − 5.
	TargetPercent *int64 `json:"targetPercent,omitempty"`
	// NoLimitRequestPercent estimates the worst case of a container without
	// a memory limit as this percentage of its request (at least 100)...
	// default 200, as OOMRisk.
	NoLimitRequestPercent *int64 `json:"noLimitRequestPercent,omitempty"`
	// NoLimitAllocatablePermille ...or as this share, per mille, of the
	// node's allocatable memory, whichever is larger; in [0, 1000]; default
	// 100, as OOMRisk.
	NoLimitAllocatablePermille *int64 `json:"noLimitAllocatablePermille,omitempty"`
	// MaxSampleAge is how old a node's memory sample (headroom.dev/memory-*)
	// may be before the model does without it, as OOMRisk's maxSampleAge:
	// on a fresh sample the kill order is the kernel's, by what containers
	// hold, and a container's worst case is at least what it holds. "0s"
	// means never. Default 10m.
	MaxSampleAge *metav1.Duration `json:"maxSampleAge,omitempty"`
}

// +k8s:deepcopy-gen=true

// MemoryTrigger relieves a node whose memory working set, as measured by
// headroom-node-agent (headroom.dev/memory-*) and estimated as OOMRisk
// estimates it, is above ThresholdPercent of its allocatable memory
// (status.allocatable.memory), until it is projected at or below
// TargetPercent. Allocatable memory is the capacity less kube-reserved,
// system-reserved and the kubelet's hard eviction threshold, and the
// kubelet's memory.available is the capacity less the same working set: a
// node at 100 % of allocatable is exactly at the kubelet's hard eviction
// threshold, so any threshold up to 100 acts before the kubelet would.
type MemoryTrigger struct {
	// ThresholdPercent, in [1, 100]; default 90.
	ThresholdPercent *int64 `json:"thresholdPercent,omitempty"`
	// TargetPercent, in [0, ThresholdPercent); default ThresholdPercent − 5.
	TargetPercent *int64 `json:"targetPercent,omitempty"`
	// MaxSampleAge is how old a node's memory sample may be before the
	// node's working set counts as unknown and the trigger leaves it alone;
	// default 10m (OOMRisk's default); 0 means samples never go stale.
	MaxSampleAge *metav1.Duration `json:"maxSampleAge,omitempty"`
	// MinPodBytesPercent: a pod that frees less memory than this percentage
	// of the node's allocatable memory is never evicted for memory; in
	// [0, 100]; default 1.
	MinPodBytesPercent *int64 `json:"minPodBytesPercent,omitempty"`
}

// +k8s:deepcopy-gen=true

// IPStarvedTrigger evicts a pod whose sandbox the kubelet cannot create for
// want of a pod IP (pkg/ipstarved: its FailedCreatePodSandBox Events carry
// the IPAM's "no address left" error, and its PodReadyToStartContainers
// condition is not True), from a node with no free pod IP by the
// headroom.dev/ip-* estimate that NodeIPs uses, when another node has one
// for it: the replacement is placed by headroom-scheduler, whose NodeIPs
// plugin sees pod IPs. A pod pulling an image or waiting for anything else
// is never evicted.
type IPStarvedTrigger struct {
	// Grace is how long a pod must have been starved, counted from when
	// the API server recorded the kubelet's first report of the failure
	// (its Event's creationTimestamp; not the pod's creation), before it is
	// evicted; in [10s, 24h]; default 2m. See
	// DefaultIPStarvedGrace.
	Grace *metav1.Duration `json:"grace,omitempty"`
	// MaxSampleAge is how old a node's pod-IP sample may be before the
	// node's figure counts as unknown and the trigger leaves it alone;
	// default 10m (NodeIPs' default); 0 means samples never go stale.
	MaxSampleAge *metav1.Duration `json:"maxSampleAge,omitempty"`
	// MaxEventsPerNode bounds the Events the trigger reads per node and
	// run from its cache, shared between the waiting pods' namespaces in
	// turn; in [1, 1000]; default 100.
	MaxEventsPerNode *int64 `json:"maxEventsPerNode,omitempty"`
}

// +k8s:deepcopy-gen=true

// EvictionBudget is how many pods the plugin may evict within any Window:
// each eviction is counted, before it is requested, against the total, its
// node's and its namespace's budget; one that would exceed any of them is
// not requested until the window has slid past enough earlier evictions.
type EvictionBudget struct {
	// Window is the length of the sliding window, in [1s, 24h]; default
	// 5m. Evictions are counted in Window/30 buckets: an eviction leaves
	// the window up to one bucket later than Window after it was made,
	// never earlier.
	Window *metav1.Duration `json:"window,omitempty"`
	// Total is the most evictions within a window across the cluster, in
	// [1, 500]; required: it also bounds what the record stores.
	Total *int32 `json:"total,omitempty"`
	// PerNode is the most evictions from one node within a window, in
	// [1, total]; unset: no per-node budget.
	PerNode *int32 `json:"perNode,omitempty"`
	// PerNamespace is the most evictions from one namespace within a
	// window, in [1, total]; unset: no per-namespace budget.
	PerNamespace *int32 `json:"perNamespace,omitempty"`
}
