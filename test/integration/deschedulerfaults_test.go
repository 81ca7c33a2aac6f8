package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/pflag"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	deschedulerOptions "sigs.k8s.io/descheduler/cmd/descheduler/app/options"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// shippedDeschedulerArgs returns the container args of the shipped
// descheduler Deployment (manifests/descheduler-deployment), pointed at a
// copy of the shipped policy and serving /metrics on 127.0.0.1:port.
func shippedDeschedulerArgs(t *testing.T, port int) []string {
	t.Helper()
	var deploy appsv1.Deployment
	if err := yaml.UnmarshalStrict(repoFile(t, "manifests/descheduler-deployment/deployment.yaml"), &deploy); err != nil {
		t.Fatal(err)
	}
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, repoFile(t, "manifests/descheduler/policy.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range deploy.Spec.Template.Spec.Containers[0].Args {
		switch {
		case strings.HasPrefix(a, "--policy-config-file="):
			a = "--policy-config-file=" + policy
		case strings.HasPrefix(a, "--bind-address="):
			a = "--bind-address=127.0.0.1"
		case strings.HasPrefix(a, "--secure-port="):
			a = fmt.Sprintf("--secure-port=%d", port)
		}
		args = append(args, a)
	}
	return args
}

// apiServerRequestTimeout is kube-apiserver's default --request-timeout:
// a request that has not completed by then is ended.
const apiServerRequestTimeout = time.Minute

// TestShippedDeschedulerLeaseOutlivesAnEviction reads the shipped
// Deployment's args with the descheduler's own flags: its replicas elect a
// leader on headroom-system/headroom-descheduler, and the lease (upstream's
// default, 137 s) outlasts any request of a leader that dies: an eviction
// it had in flight is done or ended by the API server before a standby may
// take over and plan, so the standby sees the pod terminating or still in
// place, never in between. The fail-over tests shorten the lease (they hold
// the eviction in flight for a second only); this test keeps the shipped
// values honest.
func TestShippedDeschedulerLeaseOutlivesAnEviction(t *testing.T) {
	rs, err := deschedulerOptions.NewDeschedulerServer()
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("headroom-descheduler", pflag.ContinueOnError)
	rs.AddFlags(fs)
	var args []string
	for _, a := range shippedDeschedulerArgs(t, 10258) {
		// Logging flags are added by the command, not the server options.
		if !strings.HasPrefix(a, "--v=") && !strings.HasPrefix(a, "--logging-format=") {
			args = append(args, a)
		}
	}
	if err := fs.Parse(args); err != nil {
		t.Fatalf("the shipped Deployment's args %q: %v", args, err)
	}
	le := rs.LeaderElection
	if !le.LeaderElect || le.ResourceLock != "leases" || le.ResourceNamespace != controlplane.Namespace || le.ResourceName != "headroom-descheduler" {
		t.Errorf("shipped leader election %+v, want leases headroom-system/headroom-descheduler", le)
	}
	if rs.DeschedulingInterval <= 0 {
		t.Errorf("descheduling interval %s: leader election needs a positive one", rs.DeschedulingInterval)
	}
	if le.LeaseDuration.Duration <= apiServerRequestTimeout {
		t.Errorf("lease duration %s, want longer than the API server's request timeout %s", le.LeaseDuration.Duration, apiServerRequestTimeout)
	}
	if le.RenewDeadline.Duration >= le.LeaseDuration.Duration || le.RetryPeriod.Duration >= le.RenewDeadline.Duration {
		t.Errorf("lease %s, renew deadline %s, retry %s: want retry < renew deadline < lease", le.LeaseDuration.Duration, le.RenewDeadline.Duration, le.RetryPeriod.Duration)
	}
	t.Logf("lease %s, renew deadline %s, retry %s, interval %s", le.LeaseDuration.Duration, le.RenewDeadline.Duration, le.RetryPeriod.Duration, rs.DeschedulingInterval)
}

// testLease is kube-scheduler's lease (15 s, renew deadline 10 s, retry
// 2 s) in place of the shipped 137/107/26 s, so that a fail-over takes
// seconds, not minutes: the durations only scale the waits. The test holds
// the leader's eviction in flight for a second, far within the lease, which
// the shipped lease guarantees against the API server's request timeout
// (TestShippedDeschedulerLeaseOutlivesAnEviction).
var testLease = []string{"--leader-elect-lease-duration=15s", "--leader-elect-renew-deadline=10s", "--leader-elect-retry-period=2s"}

// deschedulerAcquired is what a replica logs when it becomes the leader.
const deschedulerAcquired = `"Successfully acquired lease" lock="` + controlplane.Namespace + `/headroom-descheduler"`

// startDeploymentDescheduler starts headroom-descheduler as a replica of the
// shipped Deployment (its args, the shipped ServiceAccount with the RBAC of
// manifests/descheduler-deployment), with testLease and policy in place of
// the shipped one.
func startDeploymentDescheduler(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, name string, policy []byte) *controlplane.Process {
	t.Helper()
	if err := cp.ApplyShippedIdentitiesOf(ctx, "manifests/descheduler-deployment"); err != nil {
		t.Fatal(err)
	}
	_, port, err := net.SplitHostPort(freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(port)
	policyFile := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policyFile, policy, 0o644); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range shippedDeschedulerArgs(t, p) {
		if strings.HasPrefix(a, "--policy-config-file=") {
			a = "--policy-config-file=" + policyFile
		}
		args = append(args, a)
	}
	args = append(args, testLease...)
	args = append(args, "--kubeconfig", shippedIdentity(ctx, t, cp, "headroom-descheduler"))
	proc, err := cp.StartProcessAs(name, "headroom-descheduler", args...)
	if err != nil {
		t.Fatal(err)
	}
	return proc
}

// faultsPolicy is the shipped policy with room in the eviction budget's
// per-node and per-namespace counts (5 shipped) for one eviction more than
// the five-pod plan of setUpPressure. The budget counts an eviction before
// it is requested and keeps counting one whose outcome its process never
// learned (the leader killed, the API server gone), the safe side: when
// the held eviction is dropped, the shipped 5 leave the standby three
// evictions where the rest of the plan is four, and it relieves the node
// to its threshold only, the rest after the window. These tests are about
// the plan being carried out once across the fault, not the budget
// (TestRelieveNodePressureBudgetDeployment is).
func faultsPolicy(t *testing.T) []byte {
	t.Helper()
	policy := repoFile(t, "manifests/descheduler/policy.yaml")
	shipped := []byte("        perNode: 5\n        perNamespace: 5\n")
	if bytes.Count(policy, shipped) != 1 {
		t.Fatalf("the shipped policy's eviction budget is not 5 per node and per namespace")
	}
	return bytes.Replace(policy, shipped, []byte("        perNode: 6\n        perNamespace: 6\n"), 1)
}

// evictionGate is a validating admission webhook on pods/eviction, served
// by the test. It lets every eviction through, but holds the hold-th
// (counting from 1, gateProbe's aside) until open is called, so that a test
// can fail something while the descheduler waits for the answer to an
// eviction in the middle of its plan.
type evictionGate struct {
	hold     int
	held     chan string // the held eviction's pod, when it arrives
	release  chan struct{}
	openOnce sync.Once

	mu     sync.Mutex
	seen   []string // pods, in the order their evictions arrived
	probed bool     // gateProbe's eviction came through: the API server calls the gate
	// abandoned: the API server gave the held request up before it was let
	// through (its client went away).
	abandoned bool
}

// gateProbe is a pod that does not exist: the API server admits its
// eviction (calls the gate) before it looks the pod up and answers 404.
const gateProbe = "gate-probe"

// startEvictionGate serves the gate and registers it with the API server;
// it returns once the API server calls it, which an eviction of gateProbe
// shows.
func startEvictionGate(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, hold int) *evictionGate {
	t.Helper()
	g := &evictionGate{hold: hold, held: make(chan string, 1), release: make(chan struct{})}
	srv := httptest.NewTLSServer(http.HandlerFunc(g.serve))
	t.Cleanup(func() { g.open(); srv.Close() })
	fail, none := admissionregistrationv1.Fail, admissionregistrationv1.SideEffectClassNone
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "eviction-gate"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name: "eviction-gate.headroom.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{
				URL:      ptr.To(srv.URL + "/evictions"),
				CABundle: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}),
			},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/eviction"}},
			}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To[int32](30),
		}},
	}
	if _, err := cp.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: gateProbe, Namespace: metav1.NamespaceDefault}}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_ = cp.Client.PolicyV1().Evictions(metav1.NamespaceDefault).Evict(ctx, ev)
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.probed, nil
	})
	if err != nil {
		t.Fatalf("the API server never called the eviction gate: %v", err)
	}
	return g
}

func (g *evictionGate) serve(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "want an AdmissionReview", http.StatusBadRequest)
		return
	}
	req := review.Request
	g.mu.Lock()
	if req.Name == gateProbe {
		g.probed = true
		g.mu.Unlock()
	} else {
		g.seen = append(g.seen, req.Namespace+"/"+req.Name)
		n := len(g.seen)
		g.mu.Unlock()
		if n == g.hold {
			g.held <- req.Namespace + "/" + req.Name
			select {
			case <-g.release:
			case <-r.Context().Done():
				g.mu.Lock()
				g.abandoned = true
				g.mu.Unlock()
				return
			}
		}
	}
	review.Response = &admissionv1.AdmissionResponse{UID: req.UID, Allowed: true}
	review.Request = nil
	_ = json.NewEncoder(w).Encode(review)
}

// open lets the held eviction, and every later one, through.
func (g *evictionGate) open() { g.openOnce.Do(func() { close(g.release) }) }

// waitHeld waits until the hold-th eviction arrives and returns its pod.
func (g *evictionGate) waitHeld(ctx context.Context, t *testing.T, timeout time.Duration, logs func() string) string {
	t.Helper()
	select {
	case pod := <-g.held:
		return pod
	case <-time.After(timeout):
	case <-ctx.Done():
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	t.Fatalf("eviction %d never came (evictions so far: %v)\n%s", g.hold, g.seen, logs())
	return ""
}

const pressureReplicas = 7

// setUpPressure makes rnpNode short of PIDs with pressureReplicas pods of
// the Deployment web, placed there as headroom-scheduler would (the test
// binds them) and running for hours, with descending delete priorities so
// that their order does not depend on which of them are gone. The node
// agent's sample lists each at 200 PIDs, 9990 of 10000 used: above the
// shipped policy's 95 %, and still above it after one or two evictions. A
// spare node has room. No scheduler runs, so the ReplicaSet's replacements
// stay Pending, off the node. It returns the plan of one uninterrupted run,
// from `kubectl headroom evictions` (the plugin's Plan): five pods, in
// order, down to 8990 ≤ 9000.
func setUpPressure(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane) (plan []string) {
	t.Helper()
	c := cp.Client
	ns := metav1.NamespaceDefault
	if err := cp.ApplyShippedIdentities(ctx); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{rnpNode, "spare"} {
		if _, err := cp.CreateNode(ctx, name, resources("8", "32Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}
	web := rnpWorkload("web", pressureReplicas, "", relievenodepressure.DefaultSchedulerName, nil)
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods := rnpWaitPods(ctx, t, c, pressureReplicas)
	measured := map[types.UID]int64{}
	for i := range pods {
		binding := &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: pods[i].Name, Namespace: ns},
			Target: corev1.ObjectReference{Kind: "Node", Name: rnpNode}}
		if err := c.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		rnpApplyRole(ctx, t, c, &pods[i], rnpRole{name: pods[i].Name, phase: corev1.PodRunning, ready: true, readyFor: 2 * time.Hour,
			annotations: map[string]string{rnpDeletePriority: strconv.Itoa(pressureReplicas - i)}})
		measured[pods[i].UID] = 200
	}
	rnpSample(ctx, t, c, rnpNode, 9990, measured)
	// A CronJob run saw the pressure in an earlier sample: the next cycle
	// acts on it.
	rnpFirstSample(ctx, t, cp, rnpNode)

	out := kubectlHeadroom(ctx, t, cp, "evictions", rnpNode)
	for _, r := range parsePlan(t, out) {
		if r.evict {
			plan = append(plan, r.pod)
		}
	}
	var want []string
	for _, p := range pods[:5] {
		want = append(want, ns+"/"+p.Name)
	}
	if !slices.Equal(plan, want) {
		t.Fatalf("kubectl headroom evictions plans %v, want %v\n%s", plan, want, out)
	}
	return plan
}

// evictionAudit is what the API server's audit log says of the evictions.
type evictionAudit struct {
	done    map[string]int     // successful evictions (201) by "ns/pod"
	refused map[string][]int32 // the codes of the others
	users   map[string]int     // successful evictions by user
	order   []string           // the successful ones, in order
}

func auditEvictions(t *testing.T, cp *controlplane.ControlPlane) evictionAudit {
	t.Helper()
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	a := evictionAudit{done: map[string]int{}, refused: map[string][]int32{}, users: map[string]int{}}
	for _, e := range events {
		if e.ObjectRef == nil || e.ObjectRef.Subresource != "eviction" {
			continue
		}
		pod := e.ObjectRef.Namespace + "/" + e.ObjectRef.Name
		code := int32(0)
		if e.ResponseStatus != nil {
			code = e.ResponseStatus.Code
		}
		switch {
		case code == http.StatusCreated:
			a.done[pod]++
			a.users[e.User.Username]++
			a.order = append(a.order, pod)
		default:
			a.refused[pod] = append(a.refused[pod], code)
		}
	}
	return a
}

// checkPlanDoneOnce checks that the pods evicted are the plan's, each
// evicted exactly once, by the shipped identity only.
func checkPlanDoneOnce(t *testing.T, a evictionAudit, plan []string) {
	t.Helper()
	for pod, n := range a.done {
		if n > 1 {
			t.Errorf("%s evicted %d times", pod, n)
		}
		if !slices.Contains(plan, pod) {
			t.Errorf("%s evicted; it is not in the plan %v", pod, plan)
		}
	}
	for _, pod := range plan {
		if a.done[pod] == 0 {
			t.Errorf("%s of the plan not evicted (refused: %v)", pod, a.refused[pod])
		}
	}
	for user := range a.users {
		if user != "system:serviceaccount:headroom-system:headroom-descheduler" {
			t.Errorf("evictions by %s, want only the shipped headroom-descheduler ServiceAccount (%v)", user, a.users)
		}
	}
	t.Logf("evicted, in order: %v (refused attempts: %v)", a.order, a.refused)
}

// abovePIDs matches the figure a cycle plans a node's relief from.
var abovePIDs = regexp.MustCompile(`"Node above threshold, planning its relief" .*?PIDsUsed="(\d+)/10000`)

// waitRelieved waits until a descheduler's log says a node was relieved.
func waitRelieved(ctx context.Context, t *testing.T, log func() string, timeout time.Duration) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return strings.Contains(log(), `"Node relieved"`), nil
	}); err != nil {
		t.Fatalf("no node relieved: %v\n%s", err, rnpPluginLines(log()))
	}
}

// TestDeschedulerLeaderFailover runs two headroom-descheduler replicas as
// the shipped Deployment does (its args, leader election on
// headroom-system/headroom-descheduler, the shipped identity; testLease) on
// a node whose relief takes five evictions. The leader's second eviction is
// held at the API server's admission webhook, the leader is killed with
// SIGKILL, and the held request is then let through: the API server either
// drops it (its client is gone) or carries it out. The standby takes the
// Lease over and, in a cycle that starts at once, plans from the shared
// estimate: the listed PIDs of the pods evicted so far (terminating or gone)
// count as freed, so it evicts exactly the rest of the plan. The killed
// replica, restarted as its kubelet would, comes back as a standby. Every
// pod of the plan is evicted once, and no other.
func TestDeschedulerLeaderFailover(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{ControllerManager: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	plan := setUpPressure(ctx, t, cp)
	gate := startEvictionGate(ctx, t, cp, 2)

	replicas := []*controlplane.Process{
		startDeploymentDescheduler(ctx, t, cp, "headroom-descheduler-a", faultsPolicy(t)),
		startDeploymentDescheduler(ctx, t, cp, "headroom-descheduler-b", faultsPolicy(t)),
	}
	logs := func() string { return replicas[0].Log(8<<10) + replicas[1].Log(8<<10) }
	heldPod := gate.waitHeld(ctx, t, 2*time.Minute, logs)
	leader, standby := replicas[0], replicas[1]
	if !strings.Contains(leader.Log(1<<20), deschedulerAcquired) {
		leader, standby = standby, leader
	}
	if !strings.Contains(leader.Log(1<<20), deschedulerAcquired) || strings.Contains(standby.Log(1<<20), deschedulerAcquired) {
		t.Fatalf("want exactly one leader while it evicts\n%s", logs())
	}
	firstHolder := deschedulerLeaseHolder(ctx, t, cp)
	killed := time.Now()
	if err := syscall.Kill(leader.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = leader.Wait(10 * time.Second)
	// Its kubelet restarts it (back-off 10 s): it comes back as a standby.
	kubelet := cp.Supervise(leader, 10*time.Second)
	defer kubelet.Stop()
	time.Sleep(time.Second)
	gate.open()

	waitRelieved(ctx, t, func() string { return standby.Log(1 << 20) }, 2*time.Minute)
	audit := auditEvictions(t, cp)
	checkPlanDoneOnce(t, audit, plan)

	leaderEvicted := rnpEvicted(leader.Log(1 << 20))
	standbyLog := standby.Log(1 << 20)
	standbyEvicted := rnpEvicted(standbyLog)
	gate.mu.Lock()
	abandoned := gate.abandoned
	gate.mu.Unlock()
	before := len(audit.order) - len(standbyEvicted)
	t.Logf("leader %s evicted %v and was killed while %s was held (the API server %s); standby %s took over %.1fs after the kill and evicted %v",
		leader.Name, leaderEvicted, heldPod, map[bool]string{true: "gave it up", false: "let it through or dropped"}[abandoned],
		standby.Name, firstEvictionAfter(standbyLog, killed).Seconds(), standbyEvicted)
	t.Logf("leader:\n%s\nstandby:\n%s", faultLines(leader.Log(1<<20)), faultLines(standbyLog))
	if len(leaderEvicted) != 1 || leaderEvicted[0] != plan[0] {
		t.Errorf("the leader, killed and restarted, logged evictions %v, want %v before the kill and none after", leaderEvicted, plan[:1])
	}
	if n := strings.Count(leader.Log(1<<20), `"Started leading"`); n != 1 || len(kubelet.Restarts()) != 1 {
		t.Errorf("the killed leader led %d times and was restarted %d times, want once and once (as a standby)", n, len(kubelet.Restarts()))
	}
	if before < 1 || before > 2 {
		t.Errorf("%d evictions before the takeover, want the leader's first and perhaps the held one", before)
	}
	if !slices.Equal(standbyEvicted, plan[before:]) {
		t.Errorf("the standby evicted %v, want the rest of the plan %v", standbyEvicted, plan[before:])
	}
	// The proof that the standby counted the leader's evictions: the figure
	// it planned from is the sample less their listed PIDs.
	m := abovePIDs.FindStringSubmatch(standbyLog)
	if want := 9990 - 200*before; m == nil || m[1] != strconv.Itoa(want) {
		t.Errorf("the standby planned from %v PIDs used, want %d (9990 less the %d evicted pods' listed 200)\n%s", m, want, before, rnpPluginLines(standbyLog))
	}
	if holder := deschedulerLeaseHolder(ctx, t, cp); holder == firstHolder {
		t.Errorf("Lease still held by %q after the kill", holder)
	}
}

// TestDeschedulerAPIServerRestart runs one headroom-descheduler replica as
// the shipped Deployment does (testLease), restarted whenever it exits, as
// the kubelet restarts a container, on a node whose relief takes five
// evictions. Its second eviction is held at the admission webhook while
// kube-apiserver is stopped (etcd keeps running); the held request is let
// through during the API server's graceful shutdown, and the next one finds
// no API server: its outcome unknown, the plugin leaves the node for the
// next cycle instead of trying the pods after it. The API server stays
// down past the renew deadline; the descheduler loses its Lease and exits,
// is restarted, takes the Lease again and evicts the rest of the plan. Every
// pod of the plan is evicted once, and no other.
func TestDeschedulerAPIServerRestart(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{ControllerManager: true, Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	plan := setUpPressure(ctx, t, cp)
	gate := startEvictionGate(ctx, t, cp, 2)

	proc := startDeploymentDescheduler(ctx, t, cp, "headroom-descheduler", faultsPolicy(t))
	// The kubelet's restart back-off starts at 10 s.
	kubelet := cp.Supervise(proc, 10*time.Second)
	defer kubelet.Stop()
	log := func() string { return kubelet.Current().Log(1 << 20) }
	heldPod := gate.waitHeld(ctx, t, 2*time.Minute, log)

	stopped := time.Now()
	down := make(chan struct{})
	go func() {
		defer close(down)
		cp.StopAPIServer()
	}()
	time.Sleep(time.Second)
	gate.open()
	<-down
	downFor := time.Since(stopped)
	time.Sleep(12*time.Second - downFor) // past the renew deadline of 10 s
	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	up := time.Now()

	waitRelieved(ctx, t, log, 3*time.Minute)
	audit := auditEvictions(t, cp)
	checkPlanDoneOnce(t, audit, plan)

	text := log()
	restarts := kubelet.Restarts()
	t.Logf("held %s; kube-apiserver took %.1fs to stop, was back %.1fs after the stop; headroom-descheduler restarted %d times (%v after recovery); first eviction after recovery %.1fs after it",
		heldPod, downFor.Seconds(), up.Sub(stopped).Seconds(), len(restarts), sinceEach(restarts, up), firstEvictionAfter(text, up).Seconds())
	t.Logf("headroom-descheduler's lease, plans, evictions and failures:\n%s", faultLines(text))
	if len(restarts) == 0 {
		t.Errorf("headroom-descheduler did not exit on losing its Lease during an outage of %s\n%s", up.Sub(stopped), rnpPluginLines(text))
	}
	// The restarted process's cycle counted the evictions before the
	// outage: it planned from the sample less their listed PIDs and evicted
	// the rest of the plan.
	last := text[strings.LastIndex(text, `"Started leading"`):]
	resumed := rnpEvicted(last)
	before := len(audit.order) - len(resumed)
	if !slices.Equal(resumed, plan[before:]) {
		t.Errorf("after the restart %v were evicted, want the rest of the plan %v", resumed, plan[before:])
	}
	m := abovePIDs.FindStringSubmatch(last)
	if want := 9990 - 200*before; m == nil || m[1] != strconv.Itoa(want) {
		t.Errorf("after the restart the plan started from %v PIDs used, want %d (9990 less the %d evicted pods' listed 200)", m, want, before)
	}
	// An eviction without an answer is not a refusal: the plugin must not
	// walk on to the pods after it.
	if !strings.Contains(text, `"Warning: eviction outcome unknown`) {
		t.Errorf("no eviction went unanswered during the outage\n%s", rnpPluginLines(text))
	}
	if strings.Contains(text, `"Eviction refused; planning again without the pod"`) {
		t.Errorf("an unanswered eviction was taken for a refusal\n%s", rnpPluginLines(text))
	}
}

// faultLines picks a descheduler's lines about its Lease, its plans, its
// evictions and their failures out of its log.
func faultLines(log string) string {
	re := regexp.MustCompile(`lease|Leader|leading|"Relief planned"|"Evicted pod to relieve node"|"Node relieved"|outcome unknown|Eviction refused|Error evicting|"Node above threshold`)
	var out []string
	for _, line := range strings.Split(log, "\n") {
		if re.MatchString(line) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// deschedulerLeaseHolder returns the holder of the descheduler's Lease.
func deschedulerLeaseHolder(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	lease, err := cp.Client.CoordinationV1().Leases(controlplane.Namespace).Get(ctx, "headroom-descheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("Lease %s/headroom-descheduler: %v", controlplane.Namespace, err)
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// klogTime matches the header of a klog line: its time of day.
var klogTime = regexp.MustCompile(`(?m)^[IWEF]\d{4} (\d{2}:\d{2}:\d{2}\.\d{6})\s.*"Evicted pod to relieve node"`)

// firstEvictionAfter returns how long after from the log's first "Evicted
// pod to relieve node" line after from came, or -1s.
func firstEvictionAfter(log string, from time.Time) time.Duration {
	for _, m := range klogTime.FindAllStringSubmatch(log, -1) {
		clock, err := time.ParseInLocation("15:04:05.000000", m[1], time.Local)
		if err != nil {
			continue
		}
		at := time.Date(from.Year(), from.Month(), from.Day(), clock.Hour(), clock.Minute(), clock.Second(), clock.Nanosecond(), time.Local)
		if at.After(from) {
			return at.Sub(from)
		}
	}
	return -time.Second
}

func sinceEach(times []time.Time, from time.Time) []string {
	var s []string
	for _, at := range times {
		s = append(s, fmt.Sprintf("%+.1fs", at.Sub(from).Seconds()))
	}
	return s
}
