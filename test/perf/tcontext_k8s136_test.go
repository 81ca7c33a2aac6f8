//go:build !k8s1.37 && !k8s1.38

// k8s1.MINOR is the build tag of the Kubernetes minor being built
// (hack/k8s-minors.txt, docs/compatibility.md).

package perf

import "k8s.io/kubernetes/test/utils/ktesting"

// tContext is the harness's test context with its clients.
type tContext = ktesting.TContext
