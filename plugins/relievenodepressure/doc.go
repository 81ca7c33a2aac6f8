// Package relievenodepressure is Headroom's descheduler plugin
// RelieveNodePressure. On each node whose PID use (pkg/pidstats), measured
// memory working set (pkg/memstats) or worst-case memory shortfall
// (pkg/oomkill) is above a threshold, it evicts pods through the
// descheduler's evictor until the node is projected at or below a target,
// taking, across workloads, the pods the kubelet's eviction manager ranks
// first for the signal that fired and, within a workload, the pods the
// ReplicaSet controller deletes first on scale-down, with a delete-priority
// annotation ranked first (pkg/deleteorder). See README.md; its "Reading
// the code" lists the files in the order of one node's relief.
package relievenodepressure
