package nodepids

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

// The node agent's per-pod figures let Filter count the PIDs of a pod that
// has left its node as free before the next sample. A terminating pod's
// processes still run until the kubelet has stopped them: its PIDs are not
// free yet.
func TestFilterSubtractsListedPodsThatLeft(t *testing.T) {
	const bigUID = "3f9c1a7e-1111-4c1e-9a53-3b1c0d1e2f01"
	sampled := now.Add(-time.Minute)
	node := pidNode("n", 32768, 0, 30000, sampled)
	node.Annotations[pidstats.AnnotationPIDPods] = bigUID + "=8000"
	big := plugintest.BoundAt(pod("big", ""), "n", sampled.Add(-time.Hour))
	big.UID = bigUID
	terminating := big.DeepCopy()
	terminating.DeletionTimestamp = &metav1.Time{Time: now}
	malformed := node.DeepCopy()
	malformed.Annotations[pidstats.AnnotationPIDPods] = bigUID + "=8000,"

	// 32768 − 30000 = 2768 free, 1638 of them the floor: a 2000-PID pod
	// does not fit while the big pod holds its 8000.
	incoming := pod("incoming", "2000")
	tests := []struct {
		name string
		node *corev1.Node
		pods []*corev1.Pod
		want bool
	}{
		{"big pod still there", node, []*corev1.Pod{big}, false},
		{"big pod left", node, nil, true},
		{"big pod terminating", node, []*corev1.Pod{terminating}, false},
		{"malformed list: reported use alone", malformed, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tp := newPlugin(t, defaultArgs(), []*corev1.Node{tc.node}, tc.pods)
			if got := tp.RunFilter(t, incoming, plugintest.NodeInfo(tc.node, tc.pods...)).IsSuccess(); got != tc.want {
				t.Errorf("Filter admits the pod: %v, want %v", got, tc.want)
			}
		})
	}
}
