package v1

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	schedconfigv1 "k8s.io/kubernetes/pkg/scheduler/apis/config/v1"
)

// SchemeGroupVersion is kubescheduler.config.k8s.io/v1, the version of
// KubeSchedulerConfiguration the args appear in.
var SchemeGroupVersion = schema.GroupVersion{Group: schedconfigv1.GroupName, Version: "v1"}

var (
	// SchemeBuilder registers the v1 args types, conversions and defaults.
	SchemeBuilder      = runtime.NewSchemeBuilder(addKnownTypes)
	localSchemeBuilder = &SchemeBuilder
	// AddToScheme adds the v1 args types to a scheme.
	AddToScheme = localSchemeBuilder.AddToScheme
)

func init() {
	// The generated conversion and defaulting functions register themselves
	// through localSchemeBuilder in their init.
	localSchemeBuilder.Register(RegisterDefaults)
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion,
		&NodePIDsArgs{},
		&OOMRiskArgs{},
	)
	return nil
}
