package integration

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/headroom-k8s/headroom/test/controlplane"
)

const shippedSchedulerConfig = "manifests/scheduler/scheduler-config.yaml"

// bindingLog follows every pod of a namespace from the moment it is
// created: when its spec.nodeName was first seen set, and every change of
// it afterwards (the API server refuses such changes; a second binding
// would show here or in the audit log).
type bindingLog struct {
	mu      sync.Mutex
	boundAt map[string]time.Time
	node    map[string]string
	changes []string
}

func watchBindings(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, ns string) *bindingLog {
	t.Helper()
	l := &bindingLog{boundAt: map[string]time.Time{}, node: map[string]string{}}
	seen := func(p *corev1.Pod) {
		if p.Spec.NodeName == "" {
			return
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		if prev, ok := l.node[p.Name]; !ok {
			l.node[p.Name], l.boundAt[p.Name] = p.Spec.NodeName, time.Now()
		} else if prev != p.Spec.NodeName {
			l.changes = append(l.changes, fmt.Sprintf("%s: %s → %s", p.Name, prev, p.Spec.NodeName))
		}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(cp.Client, 0, informers.WithNamespace(ns))
	inf := factory.Core().V1().Pods().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { seen(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { seen(obj.(*corev1.Pod)) },
	}); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	t.Cleanup(factory.Shutdown)
	return l
}

func (l *bindingLog) bound() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.node)
}

// boundBetween counts the pods first seen bound in [from, to).
func (l *bindingLog) boundBetween(from, to time.Time) (n int, first time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, at := range l.boundAt {
		if !at.Before(from) && at.Before(to) {
			n++
			if first.IsZero() || at.Before(first) {
				first = at
			}
		}
	}
	return n, first
}

// createBurst creates n pods for headroom-scheduler, named prefix-NNN, at
// about rate pods per second, and returns when all are created.
func createBurst(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, prefix string, n int, rate float64, created *atomic.Int64) {
	t.Helper()
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for i := range n {
		p := newPod(fmt.Sprintf("%s-%03d", prefix, i), "headroom-scheduler", nil, resources("10m", "16Mi", "0"), nil)
		delete(p.Spec.Containers[0].Resources.Requests, corev1.ResourcePods)
		// Creating pods goes through the API server, which a test may be
		// restarting: retry as a controller would.
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
			_, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return true, nil
			}
			return err == nil, nil
		})
		if err != nil {
			t.Errorf("creating %s: %v", p.Name, err)
			return
		}
		if created != nil {
			created.Add(1)
		}
		<-tick.C
	}
}

// checkBoundOnce checks that each of the n pods named prefix-NNN is bound,
// by exactly one successful binding (the API server's audit log), and that
// no pod's node ever changed. It returns the bindings per user.
func checkBoundOnce(t *testing.T, cp *controlplane.ControlPlane, l *bindingLog, prefix string, n int) map[string]int {
	t.Helper()
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	ok := map[string]int{}
	failed := map[string][]int32{}
	byUser := map[string]int{}
	for _, e := range events {
		if e.ObjectRef == nil || e.ObjectRef.Subresource != "binding" || !strings.HasPrefix(e.ObjectRef.Name, prefix+"-") {
			continue
		}
		code := int32(0)
		if e.ResponseStatus != nil {
			code = e.ResponseStatus.Code
		}
		if code == 201 {
			ok[e.ObjectRef.Name]++
			byUser[e.User.Username]++
		} else {
			failed[e.ObjectRef.Name] = append(failed[e.ObjectRef.Name], code)
		}
	}
	for i := range n {
		name := fmt.Sprintf("%s-%03d", prefix, i)
		if ok[name] != 1 {
			t.Errorf("%s: %d successful bindings (failed attempts: %v), want exactly 1", name, ok[name], failed[name])
		}
		l.mu.Lock()
		_, bound := l.node[name]
		l.mu.Unlock()
		if !bound {
			t.Errorf("%s never seen bound", name)
		}
	}
	for name, codes := range failed {
		t.Logf("%s: refused binding attempts %v", name, codes)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.changes {
		t.Errorf("node changed: %s", c)
	}
	return byUser
}

func waitBoundCount(ctx context.Context, t *testing.T, l *bindingLog, n int, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return l.bound() >= n, nil
	})
	if err != nil {
		t.Fatalf("%d of %d pods bound: %v", l.bound(), n, err)
	}
}

// leaseHolder returns the holder of the scheduler's Lease, "" if none.
func leaseHolder(ctx context.Context, cp *controlplane.ControlPlane) string {
	lease, err := cp.Client.CoordinationV1().Leases(controlplane.Namespace).Get(ctx, "headroom-scheduler", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// acquiredLease is what a replica logs when it becomes the leader.
const acquiredLease = `"Successfully acquired lease" lock="headroom-system/headroom-scheduler"`

// leaderOf returns the replica whose log says it acquired the lease.
func leaderOf(replicas ...*controlplane.Process) *controlplane.Process {
	for _, p := range replicas {
		if strings.Contains(p.Log(1<<20), acquiredLease) {
			return p
		}
	}
	return nil
}

// TestShippedSchedulerConfigElectsOnItsOwnLease decodes the shipped
// KubeSchedulerConfiguration as the scheduler does: replicas elect a leader
// on headroom-system/headroom-scheduler, never on the default scheduler's
// lease (the v1 default, kube-system/kube-scheduler).
func TestShippedSchedulerConfigElectsOnItsOwnLease(t *testing.T) {
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(repoFile(t, shippedSchedulerConfig), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	le := obj.(*schedconfig.KubeSchedulerConfiguration).LeaderElection
	if !le.LeaderElect || le.ResourceLock != "leases" || le.ResourceNamespace != controlplane.Namespace || le.ResourceName != "headroom-scheduler" {
		t.Errorf("shipped leader election %+v, want leases headroom-system/headroom-scheduler", le)
	}
	t.Logf("lease %s, renew deadline %s, retry %s", le.LeaseDuration.Duration, le.RenewDeadline.Duration, le.RetryPeriod.Duration)
}

// TestSchedulerLeaderFailover runs two headroom-scheduler replicas with the
// shipped config, leader election included (its 15 s lease unchanged), under
// the shipped identity. In the middle of a burst of pods the leader is
// killed with SIGKILL; the standby takes the lease over and binds the rest,
// and every pod is bound exactly once.
func TestSchedulerLeaderFailover(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		if _, err := cp.CreateNode(ctx, name, resources("32", "128Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}
	config := repoFile(t, shippedSchedulerConfig)
	var replicas []*controlplane.Process
	for _, name := range []string{"headroom-scheduler-a", "headroom-scheduler-b"} {
		p, err := cp.StartSchedulerWith(ctx, controlplane.SchedulerOptions{Name: name, LeaderElection: true}, config, "--v=2")
		if err != nil {
			t.Fatal(err)
		}
		replicas = append(replicas, p)
	}
	var leader *controlplane.Process
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		leader = leaderOf(replicas...)
		return leader != nil && leaseHolder(ctx, cp) != "", nil
	}); err != nil {
		t.Fatalf("no replica became leader: %v\n%s", err, grepLines(replicas[0].Log(1<<20), "lease"))
	}
	standby := replicas[0]
	if standby == leader {
		standby = replicas[1]
	}
	firstHolder := leaseHolder(ctx, cp)
	if _, err := cp.Client.CoordinationV1().Leases("kube-system").Get(ctx, "kube-scheduler", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the default scheduler's lease kube-system/kube-scheduler exists or cannot be read: %v", err)
	}

	const n = 240
	bindings := watchBindings(ctx, t, cp, metav1.NamespaceDefault)
	done := make(chan struct{})
	go func() {
		defer close(done)
		createBurst(ctx, t, cp, "burst", n, 40, nil)
	}()
	waitBoundCount(ctx, t, bindings, n/4, time.Minute)
	killed := time.Now()
	if err := syscall.Kill(leader.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-done
	waitBoundCount(ctx, t, bindings, n, 2*time.Minute)

	before, _ := bindings.boundBetween(time.Time{}, killed)
	after, firstAfter := bindings.boundBetween(killed, time.Now().Add(time.Hour))
	newHolder := leaseHolder(ctx, cp)
	t.Logf("leader %s killed after %d pods were bound; standby %s bound the other %d, the first %.1fs after the kill; lease %q → %q",
		leader.Name, before, standby.Name, after, firstAfter.Sub(killed).Seconds(), firstHolder, newHolder)
	if !strings.Contains(standby.Log(1<<20), acquiredLease) {
		t.Errorf("standby did not acquire headroom-system/headroom-scheduler:\n%s", standby.Log(4<<10))
	}
	if newHolder == firstHolder || newHolder == "" {
		t.Errorf("lease holder %q after the kill, was %q", newHolder, firstHolder)
	}
	if before == 0 || after == 0 {
		t.Errorf("%d pods bound before the kill and %d after: the kill was not in the middle of the burst", before, after)
	}
	// A standby judges the dead leader's lease from when it last saw it
	// renewed, at most one retry after the kill; it takes the lease at its
	// first retry after leaseDuration has passed since. A retry comes
	// retryPeriod to retryPeriod·(1+JitterFactor) after the one before
	// (client-go's leader election), so the lease changes hands at most
	// leaseDuration plus two such retries after the kill; then a cycle.
	const leaseDuration, retryPeriod, firstCycle = 15 * time.Second, 2 * time.Second, 3 * time.Second
	longestRetry := time.Duration(float64(retryPeriod) * (1 + leaderelection.JitterFactor))
	if d, bound := firstAfter.Sub(killed), leaseDuration+2*longestRetry+firstCycle; d > bound {
		t.Errorf("first binding %s after the kill, want within %s: the %s lease, two retries and a cycle", d, bound, leaseDuration)
	}
	byUser := checkBoundOnce(t, cp, bindings, "burst", n)
	for user := range byUser {
		if user != "system:serviceaccount:headroom-system:headroom-scheduler" {
			t.Errorf("pods bound by %s, want only the shipped headroom-scheduler ServiceAccount (%v)", user, byUser)
		}
	}
}

// TestAPIServerRestart stops kube-apiserver (etcd keeps running) in the
// middle of a burst of pods and starts it again with the same flags after
// longer than the scheduler's renew deadline. headroom-scheduler runs with
// the shipped config and identity, restarted the way a kubelet restarts a
// container when it exits on losing its lease; headroom-node-agent runs
// with its pod-bound token and writes every second. After recovery every
// pod is bound exactly once, and the agent's first write after the API
// server is back comes within its backoff bound (DefaultBackoff: the delay
// pending at recovery is at most 1.5 × (outage + 10 s), plus one interval).
func TestAPIServerRestart(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	for _, name := range []string{"node-a", "node-b", "node-c"} {
		if _, err := cp.CreateNode(ctx, name, resources("32", "128Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}

	// The node agent on node-a, with the shipped DaemonSet's pod and a
	// token bound to it.
	if err := cp.ApplyShippedIdentities(ctx); err != nil {
		t.Fatal(err)
	}
	metricsAddr := freeAddr(t)
	// /metrics open to anonymous scrapes (the upstream flag that skips
	// authorization for a path), so that it stays readable while the API
	// server, which would authenticate and authorize a scraper, is down.
	agentProc := startNodeAgent(ctx, t, cp, "node-a", "--metrics-bind-address="+metricsAddr, "--v=2",
		"--authorization-always-allow-paths=/healthz,/metrics")
	writes := func() int {
		_, body := scrapeAgent(t, metricsAddr, "/metrics", "")
		m := regexp.MustCompile(`(?m)^headroom_node_agent_writes_total (\d+)$`).FindStringSubmatch(body)
		if m == nil {
			return -1
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return writes() >= 2, nil
	}); err != nil {
		t.Fatalf("the node agent never wrote twice: %v\n%s", err, agentProc.Log(4<<10))
	}

	sched, err := cp.StartSchedulerWith(ctx, controlplane.SchedulerOptions{LeaderElection: true}, repoFile(t, shippedSchedulerConfig), "--v=2")
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet's restart back-off starts at 10 s.
	kubelet := cp.Supervise(sched, 10*time.Second)
	defer kubelet.Stop()
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return strings.Contains(sched.Log(1<<20), acquiredLease), nil
	}); err != nil {
		t.Fatalf("the scheduler never became leader: %v", err)
	}

	const n = 200
	bindings := watchBindings(ctx, t, cp, metav1.NamespaceDefault)
	var created atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		createBurst(ctx, t, cp, "burst", n, 20, &created)
	}()
	waitBoundCount(ctx, t, bindings, n/4, time.Minute)

	// Writes are counted from the agent's own /metrics, which stays up.
	var writesDown int
	stopped := time.Now()
	cp.StopAPIServer()
	down := time.Now()
	writesDown = writes()
	time.Sleep(12 * time.Second) // past the renew deadline of 10 s
	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatalf("restarting kube-apiserver: %v", err)
	}
	up := time.Now()
	outage := up.Sub(stopped)
	var resumed time.Time
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		if writes() > writesDown {
			resumed = time.Now()
			return true, nil
		}
		return false, nil
	}); err != nil {
		t.Fatalf("the node agent never wrote again: %v\n%s", err, agentProc.Log(8<<10))
	}
	<-done
	waitBoundCount(ctx, t, bindings, n, 3*time.Minute)

	boundDuring, _ := bindings.boundBetween(down, up)
	after, firstAfter := bindings.boundBetween(up, time.Now().Add(time.Hour))
	t.Logf("kube-apiserver took %.1fs to stop (SIGTERM, SIGKILL after 10 s), down %.1fs in all; of %d pods, %d were seen bound during the outage, %d after it, the first %.1fs after recovery",
		down.Sub(stopped).Seconds(), outage.Seconds(), created.Load(), boundDuring, after, firstAfter.Sub(up).Seconds())
	restarts := kubelet.Restarts()
	t.Logf("headroom-scheduler restarted %d times (at %v after recovery)", len(restarts), func() []string {
		var s []string
		for _, r := range restarts {
			s = append(s, fmt.Sprintf("%+.1fs", r.Sub(up).Seconds()))
		}
		return s
	}())
	if len(restarts) == 0 {
		t.Errorf("the scheduler did not exit on losing its lease during an outage of %s (its renew deadline is 10 s):\n%s", outage, sched.Log(4<<10))
	}
	checkBoundOnce(t, cp, bindings, "burst", n)

	agentDelay := resumed.Sub(up)
	bound := time.Duration(1.5*float64(outage+10*time.Second)) + agentInterval
	t.Logf("node agent: first write %.1fs after kube-apiserver was back (bound %.1fs for an outage of %.1fs)", agentDelay.Seconds(), bound.Seconds(), outage.Seconds())
	if agentDelay > bound+time.Second {
		t.Errorf("node agent resumed writing %s after recovery, beyond its backoff bound %s", agentDelay, bound)
	}
	if exited, err := agentProc.Exited(); exited {
		t.Errorf("node agent exited: %v", err)
	}
}
