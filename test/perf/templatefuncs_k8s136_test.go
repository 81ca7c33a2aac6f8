//go:build !k8s1.35

// k8s1.MINOR is the build tag of the Kubernetes minor being built
// (hack/k8s-minors.txt, docs/compatibility.md).

package perf

// templateMod is the modulo function of the harness's object templates:
// scheduler_perf v1.36 renamed it "Mod".
const templateMod = "Mod"
