//go:build !k8s1.35 && !k8s1.36

// k8s1.MINOR is the build tag of the Kubernetes minor being built
// (hack/k8s-minors.txt, docs/compatibility.md).

package perf

// What scheduler_perf does differently from 1.37.
const (
	// signatureBatchSize is the createPods ops' signatureBatchSize: the
	// harness gives every pod a "signature" label of its own unless this
	// many pods in a row share one. More than any op creates: they all
	// share one, as a ReplicaSet's pods share their labels.
	signatureBatchSize = 1 << 30
	// batchingCountable: the harness resets the metrics in a cleanup of the
	// workload, after Headroom's (batching_test.go).
	batchingCountable = true
)
