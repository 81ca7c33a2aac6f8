//go:build k8s1.35

// k8s1.MINOR is the build tag of the Kubernetes minor being built
// (hack/k8s-minors.txt, docs/compatibility.md).

package oomrisk

import "k8s.io/kubernetes/pkg/scheduler/framework"

// waitForShutdown waits for fh's background goroutines after its context
// is cancelled. The v1.35 framework offers no wait (WaitForShutdown is
// v1.36's): its metrics recorder stops with the context, unawaited.
func waitForShutdown(framework.Framework) {}
