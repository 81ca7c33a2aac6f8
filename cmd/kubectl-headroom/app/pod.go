package app

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	corev1defaults "k8s.io/kubernetes/pkg/apis/core/v1"
)

// podFlags name the pod a command schedules: a spec in a file, or a pod of
// the cluster (a pending one, or one to see placed afresh).
type podFlags struct {
	file, name string
}

func (f *podFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&f.file, "pod-file", "", "YAML or JSON of a Pod to schedule")
	fs.StringVar(&f.name, "pod", "", "a Pod of the namespace (-n) to schedule as if it were not bound")
}

func (f *podFlags) given() bool { return f.file != "" || f.name != "" }

// get returns the pod, nil when none is given. A pod file's pod gets
// namespace when it names none.
func (f *podFlags) get(ctx context.Context, client kubernetes.Interface, namespace string) (*corev1.Pod, error) {
	switch {
	case f.file != "" && f.name != "":
		return nil, fmt.Errorf("--pod-file and --pod: give one")
	case f.file != "":
		return readPod(f.file, namespace)
	case f.name != "":
		return client.CoreV1().Pods(namespace).Get(ctx, f.name, metav1.GetOptions{})
	}
	return nil, nil
}

// readPod reads a Pod from a YAML or JSON file, with the API server's
// defaults applied (requests default to limits, which decides the QoS class)
// and namespace as its namespace when it names none.
func readPod(path, namespace string) (*corev1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("%s: want a Pod, got %T", path, obj)
	}
	corev1defaults.SetObjectDefaults_Pod(pod)
	if pod.Namespace == "" {
		pod.Namespace = namespace
	}
	return pod, nil
}
