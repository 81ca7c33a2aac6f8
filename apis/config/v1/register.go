package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	schedconfigv1 "k8s.io/kube-scheduler/config/v1"
)

// SchemeGroupVersion is kubescheduler.config.k8s.io/v1, the version of
// KubeSchedulerConfiguration the args appear in.
var SchemeGroupVersion = schema.GroupVersion{Group: schedconfigv1.GroupName, Version: "v1"}

var (
	// As for the internal types, the v1 args extend the kube-scheduler's v1
	// scheme builder, which upstream's pluginConfig conversion is built from.
	// The generated conversion functions register through it in their init.
	localSchemeBuilder = &schedconfigv1.SchemeBuilder
	// AddToScheme adds the v1 types of the kube-scheduler config group,
	// Headroom's args included, to a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	localSchemeBuilder.Register(addKnownTypes, RegisterDefaults)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&NodePIDsArgs{},
		&NodeIPsArgs{},
		&OOMRiskArgs{},
	)
	return nil
}
