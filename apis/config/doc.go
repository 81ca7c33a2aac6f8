// Package config holds the internal types of the arguments of Headroom's
// scheduler plugins, registered into the kube-scheduler's scheme so that
// KubeSchedulerConfiguration pluginConfig entries decode into them.
//
// +k8s:deepcopy-gen=package
package config
