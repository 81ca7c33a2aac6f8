//go:build k8s1.38

// Kubernetes 1.38 removed the InPlacePodVerticalScaling gate (GA, locked on).

package memstats

// statusResourcesCounted reports whether the scheduler counts a resized
// pod's status resources: always, as 1.38's scheduler does.
func statusResourcesCounted() bool { return true }
