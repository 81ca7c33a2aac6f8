//go:build !k8s1.38

// Kubernetes 1.35 to 1.37: in-place resize behind its feature gate. k8s1.MINOR
// is the build tag of the Kubernetes minor being built (hack/k8s-minors.txt,
// docs/compatibility.md).

package memstats

import (
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/features"
)

// statusResourcesCounted reports whether the scheduler counts a resized
// pod's status resources: where InPlacePodVerticalScaling is on.
func statusResourcesCounted() bool {
	return utilfeature.DefaultFeatureGate.Enabled(features.InPlacePodVerticalScaling)
}
