// Package oomkill models who the kernel's OOM killer takes when the
// containers on a node together use more memory than the node gives its pods.
// Headroom's scheduler plugin OOMRisk scores nodes with it and its descheduler
// plugin RelieveNodePressure relieves nodes with it; both call the same code,
// so both see the same figures.
//
// # The model
//
// Containers. A pod contributes its regular containers and its restartable
// init containers (sidecars): what runs at steady state. Ordinary init
// containers have exited. A pod holds memory until its processes exit:
// pods in phase Succeeded or Failed, and terminating pods whose containers
// the kubelet reports all terminated (sample.Terminal), hold none; a
// terminating pod whose processes still run counts in full, as the kernel
// still sees (and may kill) it.
//
// Declarations. A pod's requests and limits are read as the scheduler
// reads them: component-helpers' PodRequests, PodLimits and their
// per-container aggregates with the scheduler's options
// (memstats.ResourceOptions: pod-level resources, and for a pod being
// resized in place the larger of its spec, what the kubelet allocated,
// status.containerStatuses[].allocatedResources, and what runs,
// status.containerStatuses[].resources). The kubelet computes adj on the
// allocated requests.
//
// oom_score_adj. Each container gets the adj the kubelet gives it, from the
// kubelet's own qos.GetContainerOOMScoreAdjust, called with the node's memory
// capacity (machine memory, as the kubelet passes it): −997 for Guaranteed
// and node-critical pods, 1000 for BestEffort, 1000 − 1000·request/capacity
// within [3, 999] for Burstable, a sidecar no higher than the pod's smallest
// regular container, pod-level requests shared out over the containers.
// Headroom only guards the inputs: a node without a positive memory capacity
// is an error (unknown state, never a guess); and a pod whose memory requests
// sum beyond MaxInt64/2000 bytes (about 4 PiB), where the kubelet's int64
// arithmetic (1000 × request) could overflow, is passed as a copy whose
// requests are clamped to the capacity, its pod-level request rewritten so
// that each container keeps its share of it (clamped likewise). Clamping
// leaves adj unchanged wherever the original computes exactly — every
// effective request at or beyond the capacity maps to the clamp value 3
// either way — which the parity tests check against the kubelet on thousands
// of random pods. Only on capacities of petabytes are capacity and requests
// also scaled down together.
//
// Worst case. A container's worst-case memory is its memory limit. Without
// one it is the Estimate: max(request × RequestMultiplierPercent / 100,
// allocatable × FractionOfAllocatablePermille / 1000), by default
// (DefaultEstimate) twice the request and at least 10 % of the node's
// allocatable memory. A pod-level memory limit (KEP-2837) caps the pod's
// cgroup, so it caps the sum of its containers' worst cases: where they add
// up to more, each is scaled down to its share of the pod's limit in
// proportion to its own worst case. The pod's limit is PodLimits', overhead
// included, as the kubelet's ResourceConfigForPod sets the pod cgroup's
// memory.max.
//
// Badness. The kernel's oom_badness is a task's resident memory plus
// oom_score_adj × totalpages / 1000; the task with the highest badness dies
// first. Headroom takes worst-case memory for resident memory, bytes for
// pages and the node's capacity for totalpages:
//
//	points = worst + adj × capacity / 1000
//
// (For an OOM inside the cgroup that enforces allocatable, the kernel's
// totalpages is that cgroup's limit, slightly below capacity; Headroom uses
// capacity throughout.)
//
// Kill order. Containers in descending points. Ties among existing containers
// go by namespace, pod name, container name. A pod under assessment is placed
// before existing containers of equal points: pessimistic for that pod.
//
// Shortfall. shortfall = max(0, Σ worst over all containers − allocatable).
// The killer walks the kill order and kills whole containers until the
// worst-case memory freed covers the shortfall; the containers it kills are
// at risk.
//
// An incoming pod. With the pod's containers merged in, the shortfall
// becomes shortfall'. For each of its containers c, uncovered_c =
// max(0, shortfall' − worst-case memory of every container ahead of c). The
// pod's risk, in parts per million of its own worst-case memory, is
// Σ min(worst_c, uncovered_c) / Σ worst_c: the share of the pod the killer
// needs. Its collateral is the worst-case memory of existing containers at
// risk with the pod minus those at risk without it.
//
// All byte arithmetic saturates at MaxInt64 and products go through 128
// bits, so no valid resource.Quantity overflows the model.
//
// # Measured memory
//
// NewNode with WithMemorySample builds the model on the node's memory sample
// (pkg/memstats). A container's Used is what its pod's cgroup held at the
// sample, shared out over the pod's containers by worst case, or, for a pod
// the sample did not measure, what the shared estimate counts for it
// (memstats.NodeStats.PodHeld; a pod without a memory request counts the
// Estimate of a container without a limit or request); Worst is raised to
// Used where that is more. The kill order is then the kernel's: by
//
//	points = used + adj × capacity / 1000
//
// and Assess walks the one order twice, once with every container at its
// worst case (as above) and once at what it holds now, the node's working
// set (memstats.Estimate) plus the incoming pod at its request (at most its
// worst case) against allocatable: Assessment.Now. TestWorkedExampleMeasured
// pins the example of plugins/oomrisk/README.md, "Worked example, measured".
//
// # Swap
//
// On a node with swap (memstats.NodeStats.SwapTotal > 0, the node agent's
// headroom.dev/swap-total), the kernel's oom_badness counts a task's swap
// entries with its resident pages, and its totalpages is RAM plus swap. A
// container's Swap is its pod's headroom.dev/swap-pods figure, shared out
// over its containers as Used is, and on a measured model
//
//	points = used + swap + adj × (capacity + swap total) / 1000
//
// An incoming pod has swapped nothing yet. The shortfalls, Used and the
// worst case stay in memory (swap relieves neither the node's working set
// nor its allocatable); adj stays the kubelet's, on memory capacity.
//
// # Use
//
// The scheduler prepares the pod once per cycle with NewIncoming, builds or
// reuses a Node per node (NewNode is O(n log n) in the node's containers and
// calls the kubelet's function once per container: worth caching per node
// generation), and calls Node.Assess: O(k·log n) for k incoming containers,
// by binary search over the precomputed kill order and its prefix sums, and
// free of allocation once the Incoming has seen a node of the same capacity,
// allocatable and estimate; Incoming.WorstOn is the pod's worst case there,
// and PPM relates byte counts without overflow. The descheduler reads
// Node.KillOrder, Node.AtRiskBytes and Node.ShortfallWithout. Node.Explain
// and Node.ExplainWith render the order for people.
//
// # Worked example
//
// A node with 16Gi capacity and 15Gi allocatable (17179869184 and
// 16106127360 bytes), DefaultEstimate:
//
//	pod    QoS         request  limit  adj   worst                points
//	web    Burstable   1Gi      8Gi    938   8589934592            24704651886
//	batch  BestEffort  -        -      1000  1610612736 (est.)     18790481920
//	db     Guaranteed  4Gi      4Gi    -997  4294967296           -12833362280
//
// web: adj = 1000 − ⌊1000·1/16⌋ = 938 and points = 8Gi + 938·16Gi/1000.
// batch has no limit: 10 % of 15Gi = 1.5Gi. The worst case totals
// 14495514624 bytes (13.5Gi), below allocatable: shortfall 0, nobody at risk.
//
// Incoming api, Burstable, 512Mi request, 6Gi limit: adj = 1000 −
// ⌊1000·0.5/16⌋ = 969, worst 6442450944, points 23089744183. It lands
// second, after web. The worst case grows to 19.5Gi: shortfall' = 4.5Gi
// (4831838208 bytes). The killer takes web first, whose 8Gi cover it, so:
//
//	ShortfallBefore 0, ShortfallAfter 4831838208, RiskPPM 0,
//	CollateralBytes 8589934592, Rank 1
//
// api itself is safe, but placing it there puts web's 8Gi at risk. The
// figures are pinned by TestWorkedExample.
package oomkill
