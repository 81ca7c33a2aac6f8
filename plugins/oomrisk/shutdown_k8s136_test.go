//go:build !k8s1.35

// k8s1.MINOR is the build tag of the Kubernetes minor being built
// (hack/k8s-minors.txt, docs/compatibility.md).

package oomrisk

import (
	"k8s.io/kubernetes/pkg/scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/framework/runtime"
)

// waitForShutdown waits for fh's background goroutines after its context
// is cancelled.
func waitForShutdown(fh framework.Framework) { runtime.WaitForShutdown(fh) }
