package integration

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/test/controlplane"
	"github.com/headroom-k8s/headroom/test/realnode"
)

// TestRealNodeMemoryFiguresAgree runs the shipped node agent as the shipped
// DaemonSet's pod on a real node beside a headroom-stress pod holding
// 64 MiB (--memory 64Mi), and compares what the agent publishes with the
// kubelet's Summary API: the pod's memory-pods figure with the pod's
// memory.workingSetBytes, and memory-used with the node's.
//
// Both read the same cgroups with the same rule (usage − inactive file;
// TestWorkingSetMatchesCAdvisor holds the readers equal), so what differs
// is only when each read. The kubelet's figures are cAdvisor's last
// housekeeping (every 10-15 s), the agent's its last sample (every 2 s
// here), so the test compares only pairs taken within 2 s of each other
// (the Summary's memory.time against memory-sampled-at, which has whole
// seconds), and allows for what moves in 2 s:
//
//   - the pod: once its 64 MiB are touched it holds them, and its process
//     allocates nothing more; what moves is the few pages of its runtime
//     and of the pause container. 2 MiB + 2 % (3.3 MiB at 64 MiB).
//   - the node: every process of the machine, with other work beside the
//     test (builds, other test binaries) that can take and free hundreds of
//     MiB in 2 s. 5 % + 128 MiB.
func TestRealNodeMemoryFiguresAgree(t *testing.T) {
	cp, node := realnode.StartForTest(t, controlplane.Options{}, realnode.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	deployShippedNodeAgent(ctx, t, node, append(everySampleArgs(node),
		"--memory-hysteresis-bytes=0", "--memory-hysteresis-percent=0")...)

	const held = 64 << 20
	p := stressPod(t, "memory", node.Name, "", "--memory", "64Mi")
	created, err := cp.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := waitPodsRunning(ctx, t, cp, created)[0]

	var lastErr error
	var agreed bool
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		agreed, lastErr = checkMemoryFiguresAgree(ctx, t, cp, node, pod, held)
		return agreed, nil
	})
	if err != nil {
		t.Fatalf("memory figures never agreed: %v", lastErr)
	}
}

// checkMemoryFiguresAgree compares one pair of samples; false with a
// reason while there is none to compare yet, or they were not taken
// within 2 s of each other.
func checkMemoryFiguresAgree(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, node *realnode.Node, pod *corev1.Pod, held int64) (bool, error) {
	status, err := node.StressStatus(ctx, pod.Namespace, pod.Name)
	if err != nil {
		return false, err
	}
	if want := "memory=" + strconv.FormatInt(held, 10); !slices.Contains(strings.Fields(status), want) {
		return false, fmt.Errorf("stress pod not yet holding its memory: %q", status)
	}
	summary, err := node.Summary(ctx)
	if err != nil {
		return false, err
	}
	n, err := cp.Client.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		return false, err
	}
	s, err := memstats.ParseNode(n.Annotations, time.Now(), 0)
	if err != nil {
		return false, fmt.Errorf("memory annotations %v: %w", n.Annotations, err)
	}
	nm := summary.Node.Memory
	if nm == nil || nm.WorkingSetBytes == nil {
		return false, fmt.Errorf("the Summary API has no node memory yet")
	}
	var podWS *uint64
	var podTime time.Time
	for _, ps := range summary.Pods {
		if ps.PodRef.UID == string(pod.UID) && ps.Memory != nil && ps.Memory.WorkingSetBytes != nil {
			podWS, podTime = ps.Memory.WorkingSetBytes, ps.Memory.Time.Time
		}
	}
	if podWS == nil {
		return false, fmt.Errorf("the Summary API has no memory of pod %s yet", pod.Name)
	}
	got, listed := s.Pods.Lookup(pod.UID)
	if !listed {
		return false, fmt.Errorf("pod %s not in memory-pods %q", pod.Name, n.Annotations[memstats.AnnotationPods])
	}
	// Only samples taken close together are compared.
	if d := nm.Time.Sub(s.SampledAt).Abs(); d > 2*time.Second {
		return false, fmt.Errorf("the kubelet's node sample (%s) and the agent's (%s) are %s apart", nm.Time.UTC().Format(time.RFC3339Nano), s.SampledAt.Format(time.RFC3339), d)
	}
	if d := podTime.Sub(s.SampledAt).Abs(); d > 2*time.Second {
		return false, fmt.Errorf("the kubelet's pod sample (%s) and the agent's (%s) are %s apart", podTime.UTC().Format(time.RFC3339Nano), s.SampledAt.Format(time.RFC3339), d)
	}

	kubeletPod, kubeletNode := int64(*podWS), int64(*nm.WorkingSetBytes)
	// The status line says the memory is held, but either sample may be
	// older than that: compare only samples that both saw it.
	if got < held || kubeletPod < held {
		return false, fmt.Errorf("pod %s: memory-pods %d, the kubelet's workingSetBytes %d: not both sampled since it holds %d", pod.Name, got, kubeletPod, held)
	}
	if d, tol := abs(got-kubeletPod), int64(2<<20)+kubeletPod/50; d > tol {
		t.Errorf("pod %s: memory-pods %d, the kubelet's workingSetBytes %d: %d apart, more than %d", pod.Name, got, kubeletPod, d, tol)
	}
	if d, tol := abs(s.Used-kubeletNode), int64(128<<20)+kubeletNode/20; d > tol {
		t.Errorf("node: memory-used %d, the kubelet's workingSetBytes %d: %d apart, more than %d", s.Used, kubeletNode, d, tol)
	}
	t.Logf("pod %s (holding %d): memory-pods %d, the kubelet's workingSetBytes %d (%+d); node: memory-used %d, the kubelet's workingSetBytes %d (%+d); samples at %s (agent), %s (kubelet, node), %s (kubelet, pod); memory-pods %q",
		pod.Name, held, got, kubeletPod, got-kubeletPod, s.Used, kubeletNode, s.Used-kubeletNode,
		s.SampledAt.Format(time.RFC3339), nm.Time.UTC().Format(time.RFC3339Nano), podTime.UTC().Format(time.RFC3339Nano), n.Annotations[memstats.AnnotationPods])
	return true, nil
}
