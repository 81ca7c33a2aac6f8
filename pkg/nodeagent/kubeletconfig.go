package nodeagent

import (
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// pidResource is the key of the PID reservation in systemReserved and
// kubeReserved (the kubelet's pidlimit.PIDs).
const pidResource = "pid"

// ReservedFromKubeletConfigFile reads a KubeletConfiguration file
// (kubelet.config.k8s.io/v1beta1, YAML or JSON) and returns
// systemReserved["pid"] + kubeReserved["pid"], the PIDs the kubelet
// subtracts from capacity to get allocatable.
func ReservedFromKubeletConfigFile(path string) (int64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("reading kubelet config: %w", err)
	}
	n, err := ReservedFromKubeletConfig(data)
	if err != nil {
		return 0, fmt.Errorf("kubelet config %s: %w", path, err)
	}
	return n, nil
}

// ReservedFromKubeletConfig is ReservedFromKubeletConfigFile on the file's
// contents. Unknown fields are ignored, as a newer kubelet's file must still
// be readable; a missing or different apiVersion/kind is an error.
func ReservedFromKubeletConfig(data []byte) (int64, error) {
	scheme := runtime.NewScheme()
	if err := kubeletconfigv1beta1.AddToScheme(scheme); err != nil {
		return 0, err
	}
	obj, gvk, err := serializer.NewCodecFactory(scheme).UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return 0, fmt.Errorf("decoding: %w", err)
	}
	cfg, ok := obj.(*kubeletconfigv1beta1.KubeletConfiguration)
	if !ok {
		return 0, fmt.Errorf("want kind KubeletConfiguration of %s, got %s", kubeletconfigv1beta1.SchemeGroupVersion, gvk)
	}
	var total int64
	for _, part := range []struct {
		field string
		list  map[string]string
	}{{"systemReserved", cfg.SystemReserved}, {"kubeReserved", cfg.KubeReserved}} {
		v, ok := part.list[pidResource]
		if !ok {
			continue
		}
		// The kubelet parses these as resource quantities, so "1k" is 1000.
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return 0, fmt.Errorf("%s.pid %q: %w", part.field, v, err)
		}
		n, ok := q.AsInt64()
		if !ok || n < 0 {
			return 0, fmt.Errorf("%s.pid %q is not a non-negative whole number of PIDs", part.field, v)
		}
		total = pidstats.SaturatingAdd(total, n)
	}
	return total, nil
}
