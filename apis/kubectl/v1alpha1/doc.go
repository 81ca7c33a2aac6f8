// Package v1alpha1 holds the objects kubectl-headroom prints with -o json,
// -o yaml, -o jsonpath or -o go-template: typed and versioned
// (kubectl.headroom.dev/v1alpha1), so that what a script reads has a
// schema and a version and decodes back through Scheme. No API server
// serves these kinds: they are kubectl-headroom's output only.
//
// +k8s:deepcopy-gen=package
// +groupName=kubectl.headroom.dev
package v1alpha1
