package realnode

import (
	"archive/tar"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// ImageTag is the tag of the images a real node imports: the one
// <bin dir>/images/headroom-node-agent.tar carries (make images tags every
// image with manifests/kustomization.yaml's; hack/build.sh images for
// another minor, with that minor's, as manifests/minors/<minor> does).
func ImageTag() (string, error) {
	path := filepath.Join(controlplane.DefaultBinDir(), "images", "headroom-node-agent.tar")
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", fmt.Errorf("%s: no manifest.json", path)
		} else if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if h.Name != "manifest.json" {
			continue
		}
		var manifest []struct{ RepoTags []string }
		if err := json.NewDecoder(tr).Decode(&manifest); err != nil {
			return "", fmt.Errorf("%s: manifest.json: %w", path, err)
		}
		for _, m := range manifest {
			for _, ref := range m.RepoTags {
				if i := strings.LastIndex(ref, ":"); i > 0 && strings.HasPrefix(ref, "ghcr.io/headroom-k8s/headroom-node-agent:") {
					return ref[i+1:], nil
				}
			}
		}
		return "", fmt.Errorf("%s: no tag of ghcr.io/headroom-k8s/headroom-node-agent in manifest.json", path)
	}
}

// StressPod is a pod of the headroom-stress workload with args, bound to
// node unless node is empty (then the scheduler named places it). It never
// pulls: the real node imported the image.
func StressPod(name, node, schedulerName string, args ...string) (*corev1.Pod, error) {
	tag, err := ImageTag()
	if err != nil {
		return nil, err
	}
	grace := int64(5)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			SchedulerName:                 schedulerName,
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:            "stress",
				Image:           "ghcr.io/headroom-k8s/headroom-stress:" + tag,
				ImagePullPolicy: corev1.PullNever,
				Args:            args,
			}},
		},
	}, nil
}

// StressDeployment is a Deployment of replicas headroom-stress pods with
// args, labelled app=name, placed by schedulerName; each pod declares
// declaredPIDs in headroom.dev/pids.
func StressDeployment(name, schedulerName string, replicas int32, declaredPIDs int64, args ...string) (*appsv1.Deployment, error) {
	pod, err := StressPod("", "", schedulerName, args...)
	if err != nil {
		return nil, err
	}
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: map[string]string{pidstats.AnnotationPodPIDs: strconv.FormatInt(declaredPIDs, 10)}},
				Spec:       pod.Spec,
			},
		},
	}, nil
}

// StressStatus is the last status line a headroom-stress container printed
// ("procs=… threads=… failed=… memory=…"), or an error.
func (n *Node) StressStatus(ctx context.Context, namespace, pod string) (string, error) {
	data, err := n.cp.Client.CoreV1().Pods(namespace).GetLogs(pod, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return lines[len(lines)-1], nil
}
