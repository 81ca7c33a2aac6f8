package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
)

// GroupName is the group of kubectl-headroom's output kinds.
const GroupName = "kubectl.headroom.dev"

// SchemeGroupVersion is kubectl.headroom.dev/v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

var (
	// SchemeBuilder adds the output kinds to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds the output kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
	// Scheme holds the output kinds; Codecs decode what kubectl-headroom
	// printed with -o json or -o yaml.
	Scheme = runtime.NewScheme()
	Codecs = serializer.NewCodecFactory(Scheme, serializer.EnableStrict)
)

func init() {
	if err := AddToScheme(Scheme); err != nil {
		panic(err)
	}
}

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &NodeHeadroom{}, &NodeHeadroomList{}, &NodeEvictionPlan{}, &OOMKillOrder{}, &NodeExplanation{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
