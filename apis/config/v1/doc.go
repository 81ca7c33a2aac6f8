// Package v1 holds the versioned (kubescheduler.config.k8s.io/v1) arguments
// of Headroom's scheduler plugins, with their defaults.
//
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/headroom-k8s/headroom/apis/config
// +k8s:defaulter-gen=TypeMeta
// +k8s:defaulter-gen-input=github.com/headroom-k8s/headroom/apis/config/v1
package v1
