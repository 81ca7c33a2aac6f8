package integration

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// shippedPodSpec decodes a shipped workload manifest and returns its pod
// template.
func shippedPodSpec(t *testing.T, rel string) corev1.PodTemplateSpec {
	t.Helper()
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(repoFile(t, rel), nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	switch o := obj.(type) {
	case *appsv1.DaemonSet:
		return o.Spec.Template
	case *appsv1.Deployment:
		return o.Spec.Template
	case *batchv1.CronJob:
		return o.Spec.JobTemplate.Spec.Template
	}
	t.Fatalf("%s: no pod template in a %T", rel, obj)
	return corev1.PodTemplateSpec{}
}

// agentPod creates the shipped DaemonSet's pod for node.
func agentPod(ctx context.Context, t *testing.T, c kubernetes.Interface, node string) *corev1.Pod {
	t.Helper()
	tmpl := shippedPodSpec(t, "manifests/node-agent/daemonset.yaml")
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Name, pod.Namespace, pod.Spec.NodeName = "headroom-node-agent-"+node, "headroom-system", node
	pod, err := c.CoreV1().Pods("headroom-system").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating the node agent's pod: %v", err)
	}
	return pod
}

// agentInterval is how often startNodeAgent's agent samples and writes.
const agentInterval = time.Second

// startNodeAgent runs headroom-node-agent for node as the shipped
// DaemonSet's pod does (its pod, a token bound to it), on an empty pod
// cgroup tree, writing every agentInterval whatever changed (no
// hysteresis, a forced write every 2 s). args are added to its flags.
func startNodeAgent(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, node string, args ...string) *controlplane.Process {
	t.Helper()
	pod := agentPod(ctx, t, cp.Client, node)
	cgroupRoot := t.TempDir()
	if err := os.MkdirAll(filepath.Join(cgroupRoot, "pids", "kubepods"), 0o755); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"--node-name=" + node,
		"--kubeconfig=" + serviceAccountKubeconfig(ctx, t, cp, controlplane.Namespace, "headroom-node-agent", pod),
		"--cgroup-root=" + cgroupRoot, "--interval=" + agentInterval.String(), "--max-interval=2s",
		"--hysteresis-pids=0", "--hysteresis-percent=0"}, args...)
	proc, err := cp.StartProcessAs("node-agent-"+strings.TrimPrefix(node, "node-"), "headroom-node-agent", args...)
	if err != nil {
		t.Fatal(err)
	}
	return proc
}

// TestNodeAgent runs the real headroom-node-agent against a real API server
// with the shipped manifests: its pod-bound token writes its own node's PID
// totals (checked against this machine's /proc) and per-pod figures (from
// a cgroup tree named by the UIDs of pods the API server made), serves
// /healthz and /metrics, and the admission policy refuses every other write.
func TestNodeAgent(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	applyManifests(ctx, t, cp, "namespace", "node-agent")
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := cp.CreateNode(ctx, n, resources("4", "16Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}

	// Two workload pods on node A, and cgroups for them.
	cgroupRoot := t.TempDir()
	var uids []types.UID
	for i, pids := range []int{37, 412} {
		p := newPod(fmt.Sprintf("work-%d", i), "", nil, nil, nil)
		p.Spec.NodeName = "node-a"
		p, err := cp.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids = append(uids, p.UID)
		dir := filepath.Join(cgroupRoot, "pids", "kubepods", "burstable", "pod"+string(p.UID))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "pids.current"), []byte(strconv.Itoa(pids)+"\n"), 0o444); err != nil {
			t.Fatal(err)
		}
	}
	wantPods := string(uids[1]) + "=412," + string(uids[0]) + "=37"

	// The agent's pod on node A, from the shipped DaemonSet (admitted by the
	// namespace's Pod Security level), and a token bound to it.
	pod := agentPod(ctx, t, cp.Client, "node-a")
	kubeconfig := serviceAccountKubeconfig(ctx, t, cp, "headroom-system", "headroom-node-agent", pod)
	waitPolicyActive(ctx, t, kubernetes.NewForConfigOrDie(restConfig(t, kubeconfig)), "node-b")

	t.Run("once writes its own node", func(t *testing.T) {
		const reserved = 1234
		start := time.Now()
		threads := watchThreads(t)
		p, err := cp.StartProcessAs("node-agent-once-a", "headroom-node-agent", "--once", "--node-name=node-a",
			"--kubeconfig="+kubeconfig, "--reserved-pids="+strconv.Itoa(reserved), "--cgroup-root="+cgroupRoot)
		if err != nil {
			t.Fatal(err)
		}
		runErr := p.Wait(time.Minute)
		lo, hi := threads()
		end := time.Now()
		if runErr != nil {
			t.Fatalf("headroom-node-agent --once: %v\n%s", runErr, p.Log(4<<10))
		}
		node, err := cp.Client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := pidstats.ParseNode(node.Annotations, time.Now(), 0)
		if err != nil {
			t.Fatalf("annotations written do not parse: %v (%v)", err, node.Annotations)
		}
		if want := min(readProcInt(t, "/proc/sys/kernel/pid_max"), readProcInt(t, "/proc/sys/kernel/threads-max")); s.Capacity != want {
			t.Errorf("capacity %d, want min(pid_max, threads-max) = %d", s.Capacity, want)
		}
		if s.Reserved != reserved {
			t.Errorf("reserved %d, want %d", s.Reserved, reserved)
		}
		// The agent read /proc/loadavg once while it ran; the watcher read
		// it every millisecond or so over a longer span. Threads come and
		// go on a busy machine between two reads, hence the small slack.
		slack := 32 + hi/50
		if s.Used < lo-slack || s.Used > hi+slack {
			t.Errorf("used %d outside the %d..%d tasks /proc/loadavg showed during the run (slack %d)", s.Used, lo, hi, slack)
		}
		if s.SampledAt.Before(start.Truncate(time.Second)) || s.SampledAt.After(end) {
			t.Errorf("sampled-at %s outside the run %s..%s", s.SampledAt, start, end)
		}
		if got := node.Annotations[pidstats.AnnotationPIDPods]; got != wantPods || s.Pods.Err() != nil {
			t.Errorf("pid-pods %q (%v), want %q", got, s.Pods.Err(), wantPods)
		}
		t.Logf("agent wrote %v; /proc/loadavg showed %d..%d tasks", node.Annotations, lo, hi)
	})

	t.Run("once for another node is refused", func(t *testing.T) {
		p, err := cp.StartProcessAs("node-agent-once-b", "headroom-node-agent", "--once", "--node-name=node-b",
			"--kubeconfig="+kubeconfig, "--cgroup-root="+cgroupRoot)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Wait(time.Minute); err == nil {
			t.Fatalf("headroom-node-agent --once --node-name=node-b succeeded with node-a's token\n%s", p.Log(4<<10))
		}
		if log := p.Log(8 << 10); !strings.Contains(log, "may only write the Node its token is bound to (node-a), not node-b") {
			t.Errorf("log does not show the policy's reason:\n%s", log)
		}
		node, err := cp.Client.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for k := range node.Annotations {
			if strings.HasPrefix(k, "headroom.dev/") {
				t.Errorf("node-b carries %s", k)
			}
		}
	})

	t.Run("admission policy", func(t *testing.T) {
		agent := kubernetes.NewForConfigOrDie(restConfig(t, kubeconfig))
		unbound := kubernetes.NewForConfigOrDie(restConfig(t, serviceAccountKubeconfig(ctx, t, cp, "headroom-system", "headroom-node-agent", nil)))
		tests := []struct {
			name    string
			client  kubernetes.Interface
			node    string
			patch   string
			wantErr string // "" = allowed
		}{
			{"own headroom annotation", agent, "node-a", `{"metadata":{"annotations":{"headroom.dev/pid-used":"7"}}}`, ""},
			{"another node", agent, "node-b", `{"metadata":{"annotations":{"headroom.dev/pid-used":"7"}}}`,
				"may only write the Node its token is bound to (node-a), not node-b"},
			{"own labels", agent, "node-a", `{"metadata":{"labels":{"headroom.dev/x":"y"}}}`, "may not change a Node's labels"},
			{"own label removed", agent, "node-a", `{"metadata":{"labels":{"type":null}}}`, "may not change a Node's labels"},
			{"own other annotation", agent, "node-a", `{"metadata":{"annotations":{"example.com/x":"y"}}}`,
				"may only change headroom.dev/ annotations"},
			{"own other annotation removed", agent, "node-a", `{"metadata":{"annotations":{"kwok.x-k8s.io/node":null}}}`,
				"may only change headroom.dev/ annotations"},
			{"own finalizer", agent, "node-a", `{"metadata":{"finalizers":["example.com/block-deletion"]}}`,
				"may not change a Node's finalizers"},
			{"own ownerReference", agent, "node-a",
				`{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"Namespace","name":"default","uid":"0a1b2c3d-0000-4000-8000-00000000000a"}]}}`,
				"may not change a Node's ownerReferences"},
			{"own taints", agent, "node-a", `{"spec":{"taints":[{"key":"k","effect":"NoSchedule"}]}}`, "may not change a Node's spec"},
			{"unbound token", unbound, "node-a", `{"metadata":{"annotations":{"headroom.dev/pid-used":"7"}}}`, "bound to no node"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				_, err := tc.client.CoreV1().Nodes().Patch(ctx, tc.node, types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{})
				if tc.wantErr == "" {
					if err != nil {
						t.Fatalf("refused: %v", err)
					}
					return
				}
				if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want a refusal saying %q", err, tc.wantErr)
				}
			})
		}
		// The admin, whom the policy does not match, still may.
		if _, err := cp.Client.CoreV1().Nodes().Patch(ctx, "node-b", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"example.com/x":"y"}}}`), metav1.PatchOptions{}); err != nil {
			t.Errorf("admin patch refused: %v", err)
		}
	})

	t.Run("serves metrics while running", func(t *testing.T) {
		// Scrapers: one whose ServiceAccount may GET /metrics, as a
		// Prometheus' ClusterRole grants it, and one that may not.
		reader, nobody := metricsReaderToken(ctx, t, cp, true), metricsReaderToken(ctx, t, cp, false)
		addr := freeAddr(t)
		p, err := cp.StartProcessAs("node-agent-a", "headroom-node-agent", "--node-name=node-a", "--kubeconfig="+kubeconfig,
			"--cgroup-root="+cgroupRoot, "--interval=1s", "--metrics-bind-address="+addr, "--logging-format=json")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop(10 * time.Second)
		var body string
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			if exited, err := p.Exited(); exited {
				return false, fmt.Errorf("agent exited: %v", err)
			}
			// /healthz answers the kubelet's probe, which has no token.
			if _, b := scrapeAgent(t, addr, "/healthz", ""); b != "ok" {
				return false, nil
			}
			_, body = scrapeAgent(t, addr, "/metrics", reader)
			return strings.Contains(body, `headroom_node_agent_samples_total{probe="pid-pods"} 3`), nil
		})
		if err != nil {
			t.Fatalf("%v\nmetrics:\n%s\nlog:\n%s", err, body, p.Log(4<<10))
		}
		// Anonymous and unauthorized scrapes are refused.
		for who, token := range map[string]string{"anonymous": "", "a ServiceAccount without the right": nobody, "a bad token": "not-a-token"} {
			code, b := scrapeAgent(t, addr, "/metrics", token)
			if code != http.StatusForbidden && code != http.StatusUnauthorized {
				t.Errorf("GET /metrics as %s: %d, want 401 or 403:\n%.300s", who, code, b)
			}
			if strings.Contains(b, "headroom_node_agent_") {
				t.Errorf("GET /metrics as %s served metrics", who)
			}
		}
		// --logging-format=json: every line of the log is a JSON object with
		// a message, the start line with its fields.
		var started bool
		for _, line := range strings.Split(strings.TrimSpace(p.Log(1<<20)), "\n") {
			var entry map[string]any
			if err := json.Unmarshal([]byte(line), &entry); err != nil {
				t.Errorf("--logging-format=json wrote a line that is not JSON: %v\n%s", err, line)
				continue
			}
			if _, ok := entry["msg"]; !ok {
				t.Errorf("log entry without msg: %s", line)
			}
			started = started || entry["msg"] == "Starting" && entry["node"] == "node-a"
		}
		if !started {
			t.Errorf("no JSON log entry {\"msg\":\"Starting\",\"node\":\"node-a\"}:\n%s", p.Log(4<<10))
		}
		// The figures of its node, without labels: the /proc sample's
		// capacity, and no pod-IP figures (no pod network here).
		if m := regexp.MustCompile(`(?m)^headroom_node_agent_pids_capacity (\d+)$`).FindStringSubmatch(body); m == nil || m[1] == "0" {
			t.Errorf("/metrics: headroom_node_agent_pids_capacity %v:\n%s", m, body)
		}
		// Three samples, the first written; the host's own thread count
		// (other processes come and go) may move enough for one or two
		// more writes, never more than the samples.
		if m := regexp.MustCompile(`(?m)^headroom_node_agent_writes_total (\d+)$`).FindStringSubmatch(body); m == nil || m[1] < "1" || m[1] > "3" || len(m[1]) != 1 {
			t.Errorf("/metrics: headroom_node_agent_writes_total %v, want 1 to 3:\n%s", m, body)
		}
		for _, want := range []string{
			`headroom_node_agent_samples_total{probe="pids"}`,
			"headroom_node_agent_write_failures_total 0",
			"headroom_node_agent_last_written_sample_age_seconds",
			"headroom_node_agent_pids_used ",
			"\ngo_goroutines ",
			"\nprocess_resident_memory_bytes ",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q:\n%s", want, body)
			}
		}
		if strings.Contains(body, "headroom_node_agent_probe_errors_total{") {
			t.Errorf("probe errors reported:\n%s", body)
		}
		// The agent's memory, for the DaemonSet's request.
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.Pid()))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(line, "VmRSS:") || strings.HasPrefix(line, "VmHWM:") {
				t.Logf("headroom-node-agent %s", strings.Join(strings.Fields(line), " "))
			}
		}
	})
}

// TestPodSecurityLevels creates the shipped workloads' pods in the shipped
// namespace, whose Pod Security labels the API server enforces on pod
// creation: the node agent (read-only hostPath) is admitted there, and the
// scheduler and descheduler meet "restricted" (no warning there, and
// admitted in a namespace that enforces it, which refuses the agent).
func TestPodSecurityLevels(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	applyManifests(ctx, t, cp, "namespace")
	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: "restricted", Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	warnings := &warningRecorder{}
	cfg := rest.CopyConfig(cp.Config)
	cfg.WarningHandler = warnings
	c := kubernetes.NewForConfigOrDie(cfg)

	create := func(ns, rel string) error {
		tmpl := shippedPodSpec(t, rel)
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: strings.TrimSuffix(filepath.Base(rel), ".yaml"), Labels: tmpl.Labels}, Spec: tmpl.Spec}
		warnings.list = nil
		_, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	}
	for _, rel := range []string{"manifests/scheduler/deployment.yaml", "manifests/descheduler/cronjob.yaml"} {
		if err := create("headroom-system", rel); err != nil || len(warnings.list) > 0 {
			t.Errorf("%s in headroom-system: %v, warnings %q", rel, err, warnings.list)
		}
		if err := create("restricted", rel); err != nil {
			t.Errorf("%s refused where restricted is enforced: %v", rel, err)
		}
	}
	const agent = "manifests/node-agent/daemonset.yaml"
	if err := create("headroom-system", agent); err != nil {
		t.Errorf("the node agent is refused in headroom-system: %v", err)
	}
	if w := strings.Join(warnings.list, "\n"); !strings.Contains(w, "restricted") || !strings.Contains(w, "hostPath") {
		t.Errorf("want a restricted warning about hostPath for the agent, got %q", w)
	}
	if err := create("restricted", agent); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "hostPath") {
		t.Errorf("the node agent in a restricted namespace: %v, want forbidden for hostPath", err)
	}
}

// waitPolicyActive waits until the API server enforces the admission
// policy, which it loads some time after the object is created: it sends
// a patch that changes nothing (removing an absent annotation) to a node
// the token is not bound to, until the policy refuses it.
func waitPolicyActive(ctx context.Context, t *testing.T, c kubernetes.Interface, otherNode string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Nodes().Patch(ctx, otherNode, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"headroom.dev/policy-probe":null}}}`), metav1.PatchOptions{})
		return err != nil && strings.Contains(err.Error(), "ValidatingAdmissionPolicy 'headroom-node-agent'"), nil
	})
	if err != nil {
		t.Fatalf("the admission policy was never enforced: %v", err)
	}
}

type warningRecorder struct{ list []string }

func (w *warningRecorder) HandleWarningHeader(_ int, _ string, text string) {
	w.list = append(w.list, text)
}

func restConfig(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// metricsReaderToken returns the token of a new ServiceAccount in the
// default namespace that, with allowed, may GET /metrics (a ClusterRole
// rule on the nonResourceURL, as Prometheus' ClusterRoles have it), and
// without, has no right at all.
func metricsReaderToken(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, allowed bool) string {
	t.Helper()
	name := "metrics-nobody"
	if allowed {
		name = "metrics-reader"
	}
	if _, err := cp.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if allowed {
		if _, err := cp.Client.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Rules:      []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cp.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: metav1.NamespaceDefault}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tr, err := cp.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// scrapeAgent GETs path of the node agent's HTTPS endpoint at addr (its
// certificate is self-signed), with a bearer token unless token is empty,
// and returns the status and body, or 0 when nothing answers yet.
func scrapeAgent(t *testing.T, addr, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Do(req)
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return 0, ""
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// get returns the body of a GET, or "" when the server does not answer yet.
func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
