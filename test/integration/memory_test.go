package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/headroom-k8s/headroom/test/controlplane"
)

// TestMemory measures what the shipped memory requests and limits are sized
// from: the memory of the real headroom-scheduler and headroom-descheduler
// binaries, run with the shipped configuration and identities against a
// control plane holding HEADROOM_MEMORY_NODES nodes (default 5,000) and
// HEADROOM_MEMORY_PODS pods (default 10,000), the size of make perf's
// SchedulingBasic-5000Nodes. The nodes are plain API objects with the node
// agent's annotations (no kwok); the scheduler binds every pod, then its
// heap and resident memory are read from its /metrics and its peak resident
// memory (VmHWM) from /proc; the descheduler then runs once, as the CronJob
// does, and its peak is read the same way. It takes minutes, so it runs only
// with HEADROOM_MEASURE_MEMORY=1 (hack/memory.sh); docs/performance.md has
// the numbers.
func TestMemory(t *testing.T) {
	if os.Getenv("HEADROOM_MEASURE_MEMORY") != "1" {
		t.Skip("set HEADROOM_MEASURE_MEMORY=1 (hack/memory.sh) to measure")
	}
	nodes, pods := envInt(t, "HEADROOM_MEMORY_NODES", 5000), envInt(t, "HEADROOM_MEMORY_PODS", 10000)
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	cfg := rest.CopyConfig(cp.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	client := kubernetes.NewForConfigOrDie(cfg)

	start := time.Now()
	sampledAt := start.UTC().Format(time.RFC3339)
	parallel(t, nodes, func(i int) error {
		_, err := client.CoreV1().Nodes().Create(ctx, memoryNode(i, sampledAt), metav1.CreateOptions{})
		return err
	})
	t.Logf("%d nodes created in %s", nodes, time.Since(start).Round(time.Second))

	sched, err := cp.StartScheduler(ctx, repoFile(t, "manifests/scheduler/scheduler-config.yaml"), "--v=2")
	if err != nil {
		t.Fatal(err)
	}
	const ns = "memory"
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	parallel(t, pods, func(i int) error {
		_, err := client.CoreV1().Pods(ns).Create(ctx, memoryPod(ns, i), metav1.CreateOptions{})
		return err
	})
	t.Logf("%d pods created in %s", pods, time.Since(start).Round(time.Second))

	scheduled := regexp.MustCompile(`(?m)^scheduler_schedule_attempts_total\{profile="headroom-scheduler",result="scheduled"\} (\d+)$`)
	err = wait.PollUntilContextTimeout(ctx, 5*time.Second, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
		m := scheduled.FindStringSubmatch(scrapeScheduler(ctx, t, cp, sched))
		return m != nil && m[1] == strconv.Itoa(pods), nil
	})
	if err != nil {
		t.Fatalf("not every pod was scheduled: %v\n%s", err, sched.Log(4<<10))
	}
	t.Logf("%d pods scheduled %s after the first was created", pods, time.Since(start).Round(time.Second))
	// The informers' caches are full; let a GC cycle or two pass.
	time.Sleep(30 * time.Second)
	metrics := scrapeScheduler(ctx, t, cp, sched)
	t.Logf("MEMORY headroom-scheduler nodes=%d pods=%d heap_inuse=%s resident=%s peak_resident=%s",
		nodes, pods, mib(metricValue(t, metrics, "go_memstats_heap_inuse_bytes")),
		mib(metricValue(t, metrics, "process_resident_memory_bytes")), mib(peakRSS(t, sched.Pid())))

	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, repoFile(t, "manifests/descheduler/policy.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	desched, err := cp.StartProcess("headroom-descheduler",
		"--policy-config-file="+policy,
		"--kubeconfig="+shippedIdentity(ctx, t, cp, "headroom-descheduler"),
		"--descheduling-interval=0",
		"--secure-port=0",
		"--v=2",
	)
	if err != nil {
		t.Fatal(err)
	}
	// VmHWM only grows: its last reading before the process exits is its
	// peak, to within the polling interval.
	var peak float64
	for {
		if v, ok := readPeakRSS(desched.Pid()); ok {
			peak = v
		}
		if exited, _ := desched.Exited(); exited {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := desched.Wait(time.Second); err != nil {
		t.Fatalf("headroom-descheduler: %v\n%s", err, desched.Log(8<<10))
	}
	t.Logf("MEMORY headroom-descheduler nodes=%d pods=%d peak_resident=%s", nodes, pods, mib(peak))
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// parallel calls f for 0..n-1 on 32 workers and fails the test on the
// first error.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
}

// memoryNode is a node as the node agent annotates it, with the figures of
// make perf's nodes (test/perf/templates/node.yaml) and a pid-pods list.
func memoryNode(i int, sampledAt string) *corev1.Node {
	name := fmt.Sprintf("memory-node-%d", i)
	var top []string
	for j := range 10 {
		top = append(top, fmt.Sprintf("%08d-0000-4000-8000-%012d=%d", i, j, 2000-100*j))
	}
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("4"),
		corev1.ResourceMemory: resource.MustParse("32Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   name,
			Labels: map[string]string{corev1.LabelHostname: name, corev1.LabelOSStable: "linux"},
			Annotations: map[string]string{
				"headroom.dev/pid-capacity":   "4194304",
				"headroom.dev/pid-reserved":   "1000",
				"headroom.dev/pid-used":       "20000",
				"headroom.dev/pid-pods":       strings.Join(top, ","),
				"headroom.dev/pid-sampled-at": sampledAt,
				"headroom.dev/ip-capacity":    "253",
				"headroom.dev/ip-used":        "20",
				"headroom.dev/ip-sampled-at":  sampledAt,
			},
		},
		Status: corev1.NodeStatus{
			Capacity:    alloc,
			Allocatable: alloc,
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
}

// memoryPod is a pod of make perf's workloads (test/perf/templates/pod.yaml),
// for headroom-scheduler. Nobody lifts the not-ready taint admission puts on
// the nodes (no kube-controller-manager), so the pods tolerate it.
func memoryPod(ns string, i int) *corev1.Pod {
	pod := newPod(fmt.Sprintf("memory-pod-%d", i), "headroom-scheduler", map[string]string{"headroom.dev/pids": "200"},
		corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("500Mi")},
		corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")})
	pod.Namespace = ns
	pod.Labels = map[string]string{"app": fmt.Sprintf("memory-%d", i%100)}
	pod.Spec.Tolerations = []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	return pod
}

// metricValue is the value of an unlabelled metric in a Prometheus text
// exposition.
func metricValue(t *testing.T, metrics, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatalf("/metrics has no %s", name)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return v
}

// readPeakRSS is VmHWM of /proc/<pid>/status in bytes; false once the
// process is gone.
func readPeakRSS(pid int) (float64, bool) {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" && f[2] == "kB" {
			kb, err := strconv.ParseFloat(f[1], 64)
			return kb * 1024, err == nil
		}
	}
	return 0, false
}

func peakRSS(t *testing.T, pid int) float64 {
	t.Helper()
	v, ok := readPeakRSS(pid)
	if !ok {
		t.Fatalf("no VmHWM for pid %d", pid)
	}
	return v
}

func mib(bytes float64) string { return fmt.Sprintf("%.0fMiB", bytes/(1<<20)) }
