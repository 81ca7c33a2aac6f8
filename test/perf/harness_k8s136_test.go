//go:build k8s1.35 || k8s1.36

// k8s1.MINOR is the build tag of the Kubernetes minor being built
// (hack/k8s-minors.txt, docs/compatibility.md).

package perf

// What scheduler_perf before 1.37 does differently.
const (
	// signatureBatchSize is the createPods ops' signatureBatchSize: the
	// harness labels no pod apart and has no such field.
	signatureBatchSize = 0
	// batchingCountable: the harness resets the metrics as soon as a
	// workload ends, before any hook of Headroom's runs, so the batching
	// counters of a workload cannot be read.
	batchingCountable = false
)
