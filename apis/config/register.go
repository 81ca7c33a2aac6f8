package config

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
)

// SchemeGroupVersion is the kube-scheduler's config group, internal version:
// plugin args live in the same group as KubeSchedulerConfiguration.
var SchemeGroupVersion = schema.GroupVersion{Group: schedconfig.GroupName, Version: runtime.APIVersionInternal}

var (
	// The args extend the kube-scheduler's own scheme builder: upstream builds
	// the scheme that converts pluginConfig args from that builder, so types
	// registered anywhere else are unknown to it.
	localSchemeBuilder = &schedconfig.SchemeBuilder
	// AddToScheme adds the internal types of the kube-scheduler config group,
	// Headroom's args included, to a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	localSchemeBuilder.Register(addKnownTypes)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&NodePIDsArgs{},
		&NodeIPsArgs{},
		&OOMRiskArgs{},
	)
	return nil
}
