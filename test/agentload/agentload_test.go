//go:build agentload

// Package agentload measures what the node agent's writes cost a real
// kube-apiserver at cluster scale, beside what the kubelets' own Node
// status patches and Lease renewals cost the same API server for the same
// nodes. Run it with make bench-agent (hack/bench-agent.sh);
// docs/performance.md has the figures.
package agentload

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	nodeutil "k8s.io/component-helpers/node/util"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/pkg/nodeagent"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// The real node's PID figures (docs/real-node.md, docs/e2e-bench.md): a
// pid_max of 32,768 with 30,768 reserved leaves 2,000 allocatable PIDs, so
// the shipped 95 % threshold is at 1,900 used.
const (
	pidMax       = 32768
	reservedPIDs = 30768
	allocatable  = pidMax - reservedPIDs
)

// The kubelet's defaults (KubeletConfiguration v1beta1): a Lease renewal
// every 10 s (nodeLeaseDurationSeconds 40 / 4) and, with nothing changed,
// a Node status patch every nodeStatusReportFrequency.
const (
	leaseRenewInterval        = 10 * time.Second
	nodeStatusReportFrequency = 5 * time.Minute
)

// phase is a stretch of simulated time with one trace on every node.
type phase struct {
	name string
	// length is the simulated time the phase lasts.
	length time.Duration
	// used is the node's PIDs in use at `at` into the phase; offset spreads
	// the nodes so that they do not move in step.
	used func(at, offset time.Duration) int64
	// every: the trace runs on one node in every (the others rest).
	every int
}

// stormEvery: a leak or a storm hits one node in ten at once (a tenant's
// rollout, a noisy neighbour), the others rest; their writes per node are
// counted apart, so what one such node costs is stated too.
const stormEvery = 10

// atRest is the real node at rest: 1,000 of 2,000 used, a slow swing of ±40
// and a jitter of ±20 (pkg/nodeagent's TestWritesPerHourAtRestAndInAStorm
// replays the same), within the agent's hysteresis.
func atRest(at, offset time.Duration) int64 {
	s := int64((at + offset) / time.Second)
	swing := int64(40 * math.Sin(2*math.Pi*float64(s)/600))
	return 1000 + swing + (s*7919)%41 - 20
}

// phases are the traces replayed, in order, on one timeline: at rest, a
// slow leak (1 PID every 2 s from rest to 96 %: the creep the agent's
// threshold is for), and the real node's storm (docs/e2e-bench.md: two pods
// growing to 1,000 threads each over 60 s, 33 PIDs/s, to 99.5 %), held a
// minute and relieved.
var phases = []phase{
	{"rest", 20 * time.Minute, atRest, 1},
	{"slow leak", 20 * time.Minute, func(at, offset time.Duration) int64 {
		start := offset % (2 * time.Minute)
		if at < start {
			return atRest(at, offset)
		}
		return min(1920, 1000+int64((at-start)/(2*time.Second)))
	}, stormEvery},
	{"storm", 10 * time.Minute, func(at, offset time.Duration) int64 {
		start := time.Minute + offset%time.Minute
		climb := 30 * time.Second
		switch {
		case at < start || at >= start+climb+time.Minute:
			return atRest(at, offset)
		case at < start+climb:
			return min(1990, 1000+33*int64((at-start)/time.Second))
		default:
			return 1990
		}
	}, stormEvery},
}

// counter counts a client's requests and their bodies' bytes.
type counter struct{ requests, bytes atomic.Int64 }

func (c *counter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		c.requests.Add(1)
		c.bytes.Add(max(req.ContentLength, 0))
		return rt.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// client is a clientset without client-side rate limit whose requests c
// counts; contentType "" keeps JSON.
func client(t testing.TB, cfg *rest.Config, contentType string, c *counter) kubernetes.Interface {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	if contentType != "" {
		cfg.ContentType = contentType
	}
	cfg.WrapTransport = c.wrap
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// cpuTicks is the user and system CPU time of process pid, in clock ticks
// (USER_HZ, 100 a second on Linux), from /proc/<pid>/stat.
func cpuTicks(t testing.TB, pid int) int64 {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return utime + stime
}

const userHZ = 100

// meter reads the API server's and etcd's CPU and a client's requests
// over a stretch of work.
type meter struct {
	t                      testing.TB
	apiServer, etcd        int
	c                      []*counter
	cpu0, etcd0, req0, by0 int64
	wall0                  time.Time
	// idle is the API server's and etcd's CPU per second with no client,
	// taken off every stretch in proportion to its wall time.
	idleAPIServer, idleEtcd float64
}

func (m *meter) counts() (requests, bytes int64) {
	for _, c := range m.c {
		requests += c.requests.Load()
		bytes += c.bytes.Load()
	}
	return requests, bytes
}

// measureIdle sets the idle rates from d with no requests.
func (m *meter) measureIdle(d time.Duration) result {
	m.idleAPIServer, m.idleEtcd = 0, 0
	m.start()
	time.Sleep(d)
	r := m.stop()
	m.idleAPIServer, m.idleEtcd = r.apiServerCPU/r.wall.Seconds(), r.etcdCPU/r.wall.Seconds()
	return r
}

func (m *meter) start() {
	m.cpu0, m.etcd0 = cpuTicks(m.t, m.apiServer), cpuTicks(m.t, m.etcd)
	m.req0, m.by0 = m.counts()
	m.wall0 = time.Now()
}

// result is one stretch's cost: requests, body bytes, CPU seconds.
type result struct {
	requests, bytes       int64
	apiServerCPU, etcdCPU float64
	wall                  time.Duration
}

func (m *meter) stop() result {
	wall := time.Since(m.wall0)
	req, by := m.counts()
	return result{
		requests: req - m.req0, bytes: by - m.by0,
		apiServerCPU: max(0, float64(cpuTicks(m.t, m.apiServer)-m.cpu0)/userHZ-m.idleAPIServer*wall.Seconds()),
		etcdCPU:      max(0, float64(cpuTicks(m.t, m.etcd)-m.etcd0)/userHZ-m.idleEtcd*wall.Seconds()),
		wall:         wall,
	}
}

// parallel runs f(i) for i in [0, n) on workers goroutines.
func parallel(n, workers int, f func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < n; i = int(next.Add(1) - 1) {
				f(i)
			}
		})
	}
	wg.Wait()
}

// TestAgentWriteLoad replays the traces on every node's agent, the real
// nodeagent.Agent with the shipped flags (--interval=1s
// --pids-threshold-percent=95 --pressure-samples=2, a 5 min max interval
// with its jitter) and its PID probe reading the trace instead of /proc,
// on a fake clock stepped one interval at a time: every agent's Tick runs
// once per simulated second and writes through the real client to a real
// kube-apiserver. Then one round of the kubelets' Node status patches
// (upstream's PatchNodeStatus, as the kubelet calls it, heartbeat times
// moved) and one round of their Lease renewals (an Update, protobuf, as the
// kubelet's lease controller sends it) run against the same API server for
// the same nodes, and their hour is those rounds times 12 and times 360.
// It takes many minutes, so it is built only with the agentload tag (make
// bench-agent).
func TestAgentWriteLoad(t *testing.T) {
	sizes, _ := countsFromEnv(t, "HEADROOM_AGENT_LOAD_NODES", 5000, 15000)
	for _, n := range sizes {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) { measure(t, n) })
	}
}

func measure(t *testing.T, nodes int) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	apiServer, etcd := controlPlanePIDs(t, cp)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	start := time.Now().Truncate(time.Second)
	var setupC counter
	admin := client(t, cp.Config, "", &setupC)
	workers := 32

	t0 := time.Now()
	nodeObjs := make([]*corev1.Node, nodes)
	leases := make([]*coordinationv1.Lease, nodes)
	var errs atomic.Int64
	parallel(nodes, workers, func(i int) {
		n, err := admin.CoreV1().Nodes().Create(ctx, kubeletNode(fmt.Sprintf("node-%05d", i), start), metav1.CreateOptions{})
		if err != nil {
			t.Error(err)
			errs.Add(1)
			return
		}
		nodeObjs[i] = n
		l, err := admin.CoordinationV1().Leases(corev1.NamespaceNodeLease).Create(ctx, nodeLease(n, start), metav1.CreateOptions{})
		if err != nil {
			t.Error(err)
			errs.Add(1)
			return
		}
		leases[i] = l
	})
	if errs.Load() > 0 {
		t.FailNow()
	}
	if len(nodeObjs[0].Status.Conditions) == 0 {
		t.Fatal("the API server dropped the Node's status on create")
	}
	t.Logf("%d Nodes and Leases created in %s", nodes, time.Since(t0).Round(time.Second))

	// The agents: the nodes a leak or storm hits write through a client of
	// their own, to be counted apart.
	var agentC, hitC counter
	agentClient := client(t, cp.Config, "", &agentC)
	hitClient := client(t, cp.Config, "", &hitC)
	hit := func(i int) bool { return i%stormEvery == 0 }
	clk := clocktesting.NewFakeClock(start)
	cfg := nodeagent.DefaultConfig()
	cfg.Interval = time.Second
	cfg.PIDThresholdPercent = 95
	cfg.PressureSamples = 2
	cfg.ReservedPIDs = reservedPIDs
	metrics := nodeagent.NewMetrics()
	agents := make([]*nodeagent.Agent, nodes)
	used := make([]atomic.Int64, nodes)
	for i := range agents {
		c := cfg
		c.NodeName = nodeObjs[i].Name
		read := func(string) (nodeagent.ProcSample, error) {
			return nodeagent.ProcSample{PIDMax: pidMax, ThreadsMax: 1 << 20, Capacity: pidMax, Used: used[i].Load()}, nil
		}
		probe := &nodeagent.PIDProbe{ProcRoot: c.ProcRoot, Reserved: c.ReservedPIDs, Hysteresis: c.Hysteresis,
			ThresholdPercent: c.PIDThresholdPercent, MaxAge: c.MaxInterval, Read: read}
		cs := agentClient
		if hit(i) {
			cs = hitClient
		}
		a, err := nodeagent.New(cs, c, nodeagent.WithClock(clk), nodeagent.WithProbes(probe), nodeagent.WithMetrics(metrics))
		if err != nil {
			t.Fatal(err)
		}
		agents[i] = a
	}
	// Each node's place in its traces: a spread over ten minutes.
	offset := func(i int) time.Duration { return time.Duration(i*7919%600) * time.Second }
	tick := func(at time.Duration, p phase) {
		parallel(nodes, workers, func(i int) {
			if i%p.every == 0 {
				used[i].Store(p.used(at, offset(i)))
			} else {
				used[i].Store(atRest(at, offset(i)))
			}
			if err := agents[i].Tick(ctx); err != nil {
				t.Errorf("node %d: %v", i, err)
			}
		})
	}

	m := &meter{t: t, apiServer: apiServer, etcd: etcd, c: []*counter{&agentC, &hitC}}
	// The API server's own CPU with no client (its controllers, etcd's
	// compaction and lease checks), to be taken off.
	m.measureIdle(20 * time.Second)
	t.Logf("idle: kube-apiserver %.3f, etcd %.3f CPU cores", m.idleAPIServer, m.idleEtcd)
	// The first tick writes every node (a DaemonSet rolled out on nodes
	// without annotations); counted apart.
	m.start()
	tick(0, phases[0])
	rollout := m.stop()
	report(t, nodes, "agent: first write of every node", 0, rollout)
	var agentResults []result
	for _, p := range phases {
		hit0 := hitC.requests.Load()
		m.start()
		for at := time.Duration(0); at < p.length; at += cfg.Interval {
			clk.Step(cfg.Interval)
			tick(at, p)
		}
		r := m.stop()
		agentResults = append(agentResults, r)
		report(t, nodes, "agent: "+p.name, p.length, r)
		if p.every > 1 {
			hitNodes := (nodes + p.every - 1) / p.every
			t.Logf("agent: %s: %.2f writes per node it hit (%d nodes) in %s", p.name, float64(hitC.requests.Load()-hit0)/float64(hitNodes), hitNodes, p.length)
			fmt.Printf("%d nodes, %s: %.2f writes per node it hit in %s\n", nodes, p.name, float64(hitC.requests.Load()-hit0)/float64(hitNodes), p.length)
		}
	}

	// The kubelets: one round of Node status patches, as every kubelet
	// makes one per nodeStatusReportFrequency when nothing changed (each
	// condition's heartbeat moves), and one round of Lease renewals.
	var statusC, leaseC counter
	statusClient := client(t, cp.Config, "", &statusC)
	leaseClient := client(t, cp.Config, "application/vnd.kubernetes.protobuf", &leaseC)
	m.c = []*counter{&statusC}
	status := kubeletStatusRound(t, m, statusClient, nodeObjs, clk.Now(), workers)
	statusPerHour := float64(time.Hour / nodeStatusReportFrequency)
	report(t, nodes, "kubelet: one round of Node status patches", 0, status)
	m.c = []*counter{&leaseC}
	m.start()
	parallel(nodes, workers, func(i int) {
		l := leases[i].DeepCopy()
		l.Spec.RenewTime = &metav1.MicroTime{Time: clk.Now()}
		if _, err := leaseClient.CoordinationV1().Leases(l.Namespace).Update(ctx, l, metav1.UpdateOptions{}); err != nil {
			t.Errorf("lease %s: %v", l.Name, err)
		}
	})
	lease := m.stop()
	leasePerHour := float64(time.Hour / leaseRenewInterval)
	report(t, nodes, "kubelet: one round of Lease renewals", 0, lease)

	// The table: per hour of the cluster's time, and per second.
	perHour := func(r result, length time.Duration) result {
		f := float64(time.Hour) / float64(length)
		return result{requests: int64(float64(r.requests) * f), bytes: int64(float64(r.bytes) * f),
			apiServerCPU: r.apiServerCPU * f, etcdCPU: r.etcdCPU * f}
	}
	scale := func(r result, f float64) result {
		return result{requests: int64(float64(r.requests) * f), bytes: int64(float64(r.bytes) * f),
			apiServerCPU: r.apiServerCPU * f, etcdCPU: r.etcdCPU * f}
	}
	kubeletStatus := scale(status, statusPerHour)
	kubeletLease := scale(lease, leasePerHour)
	fmt.Printf("\nagent write load, %d nodes (simulated time compressed: %s of it in %s of wall time)\n", nodes,
		totalLength(), sumWall(agentResults).Round(time.Second))
	fmt.Printf("| %-40s | %12s | %12s | %14s | %18s | %14s |\n", "writer, per hour of cluster time", "writes/s", "writes/node/h", "body bytes/s", "apiserver CPU cores", "etcd CPU cores")
	row := func(name string, h result) {
		fmt.Printf("| %-40s | %12.1f | %12.2f | %14.0f | %18.3f | %14.3f |\n", name, float64(h.requests)/3600,
			float64(h.requests)/float64(nodes), float64(h.bytes)/3600, h.apiServerCPU/3600, h.etcdCPU/3600)
	}
	for i, p := range phases {
		row("agent, "+p.name, perHour(agentResults[i], p.length))
	}
	row("kubelet Node status (5 min)", kubeletStatus)
	row("kubelet Lease (10 s)", kubeletLease)
	row("kubelet, both", result{requests: kubeletStatus.requests + kubeletLease.requests, bytes: kubeletStatus.bytes + kubeletLease.bytes,
		apiServerCPU: kubeletStatus.apiServerCPU + kubeletLease.apiServerCPU, etcdCPU: kubeletStatus.etcdCPU + kubeletLease.etcdCPU})
	fmt.Println()

	// What the write policy promises: at rest, a write per node at most
	// every MaxInterval·(1 − jitter), plus the interval it is sampled on.
	restPerNodeHour := float64(perHour(agentResults[0], phases[0].length).requests) / float64(nodes)
	if bound := float64(time.Hour) / float64(time.Duration(float64(cfg.MaxInterval)*(1-cfg.MaxIntervalJitter))); restPerNodeHour > bound {
		t.Errorf("at rest the agents wrote %.2f times per node and hour, more than the max interval's %.2f", restPerNodeHour, bound)
	}
}

// controlPlanePIDs are the process IDs of cp's kube-apiserver and etcd.
func controlPlanePIDs(t testing.TB, cp *controlplane.ControlPlane) (apiServer, etcd int) {
	for _, p := range cp.Processes() {
		switch p.Name {
		case "kube-apiserver":
			apiServer = p.Pid()
		case "etcd":
			etcd = p.Pid()
		}
	}
	if apiServer == 0 || etcd == 0 {
		t.Fatal("no kube-apiserver or etcd process")
	}
	return apiServer, etcd
}

// kubeletStatusRound measures one round of the kubelets' Node status
// patches for nodes, as every kubelet makes one per
// nodeStatusReportFrequency when nothing changed (each condition's
// heartbeat moved to now), through client, whose requests m counts.
// countsFromEnv reads the environment variable name as comma-separated
// positive counts, or gives def when it is unset; set says which.
func countsFromEnv(t testing.TB, name string, def ...int) (counts []int, set bool) {
	s := os.Getenv(name)
	if s == "" {
		return def, false
	}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: want comma-separated positive counts", name, s)
		}
		counts = append(counts, n)
	}
	return counts, true
}

func kubeletStatusRound(t testing.TB, m *meter, client kubernetes.Interface, nodes []*corev1.Node, now time.Time, workers int) result {
	heartbeat := metav1.NewTime(now)
	m.start()
	parallel(len(nodes), workers, func(i int) {
		old := nodes[i]
		n := old.DeepCopy()
		for j := range n.Status.Conditions {
			n.Status.Conditions[j].LastHeartbeatTime = heartbeat
		}
		if _, _, err := nodeutil.PatchNodeStatus(client.CoreV1(), types.NodeName(n.Name), old, n); err != nil {
			t.Errorf("node %s: status patch: %v", n.Name, err)
		}
	})
	return m.stop()
}

func totalLength() time.Duration {
	var d time.Duration
	for _, p := range phases {
		d += p.length
	}
	return d
}

func sumWall(rs []result) time.Duration {
	var d time.Duration
	for _, r := range rs {
		d += r.wall
	}
	return d
}

func report(t *testing.T, nodes int, name string, length time.Duration, r result) {
	t.Logf("%s: %d requests (%.2f per node), %d body bytes (%.0f per request), kube-apiserver %.2f s CPU, etcd %.2f s CPU, %s wall%s",
		name, r.requests, float64(r.requests)/float64(nodes), r.bytes, float64(r.bytes)/float64(max(r.requests, 1)),
		r.apiServerCPU, r.etcdCPU, r.wall.Round(time.Millisecond),
		map[bool]string{true: fmt.Sprintf(", %s simulated (%.0f× compressed)", length, float64(length)/float64(max(r.wall, 1))), false: ""}[length > 0])
}

// kubeletNode is a Node as kubelet v1.36.3 registers and reports the real
// node (docs/real-node.md: 2 cores, containerd 2.4.2, the node agent's and
// the test workload's images), with the node agent's annotations of an
// earlier write: the object every write here reads, changes and stores.
func kubeletNode(name string, now time.Time) *corev1.Node {
	ts := metav1.NewTime(now)
	q := resource.MustParse
	res := corev1.ResourceList{corev1.ResourceCPU: q("2"), corev1.ResourceEphemeralStorage: q("101430960Ki"),
		"hugepages-1Gi": q("0"), "hugepages-2Mi": q("0"), corev1.ResourceMemory: q("24554280Ki"), corev1.ResourcePods: q("110")}
	cond := func(typ corev1.NodeConditionType, status corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: typ, Status: status, LastHeartbeatTime: ts, LastTransitionTime: ts, Reason: reason, Message: msg}
	}
	image := func(size int64, names ...string) corev1.ContainerImage {
		return corev1.ContainerImage{Names: names, SizeBytes: size}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/os": "linux",
				"kubernetes.io/arch": "amd64", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
			Annotations: map[string]string{
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
				"headroom.dev/pid-capacity":                              strconv.Itoa(pidMax),
				"headroom.dev/pid-reserved":                              strconv.Itoa(reservedPIDs),
				"headroom.dev/pid-used":                                  "1000",
				"headroom.dev/pid-sampled-at":                            now.UTC().Format(time.RFC3339),
			},
		},
		Spec: corev1.NodeSpec{PodCIDR: "10.88.0.0/24", PodCIDRs: []string{"10.88.0.0/24"}},
		Status: corev1.NodeStatus{
			Capacity: res, Allocatable: res,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses:       []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.2.15"}, {Type: corev1.NodeHostName, Address: name}},
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID: "6b1c3f0e8d2a4f7c9e5b1a3d7f9c2e4b", SystemUUID: "6b1c3f0e-8d2a-4f7c-9e5b-1a3d7f9c2e4b",
				BootID: "0f4e2d6c-8b1a-4c3e-9d7f-5a2b4c6e8f01", KernelVersion: "6.18.44-fc-v1045",
				OSImage: "Debian GNU/Linux 13 (trixie)", ContainerRuntimeVersion: "containerd://2.4.2",
				KubeletVersion: "v1.36.3", OperatingSystem: "linux", Architecture: "amd64",
			},
			Images: []corev1.ContainerImage{
				image(31652145, "ghcr.io/headroom-k8s/headroom-node-agent@sha256:3f1d5c0a9b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a392817065f4e", "ghcr.io/headroom-k8s/headroom-node-agent:v1.36.3-headroom.0.1.0"),
				image(2315821, "ghcr.io/headroom-k8s/headroom-stress@sha256:9a8b7c6d5e4f30211f0e9d8c7b6a5f4e3d2c1b0a99887766554433221100ffee", "ghcr.io/headroom-k8s/headroom-stress:v1.36.3-headroom.0.1.0"),
				image(320368, "registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a", "registry.k8s.io/pause:3.10.1"),
			},
			RuntimeHandlers: []corev1.NodeRuntimeHandler{
				{Name: "runc", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr.To(true), UserNamespaces: ptr.To(true)}},
				{Name: "", Features: &corev1.NodeRuntimeHandlerFeatures{RecursiveReadOnlyMounts: ptr.To(true), UserNamespaces: ptr.To(true)}},
			},
			Features: &corev1.NodeFeatures{SupplementalGroupsPolicy: ptr.To(true)},
		},
	}
}

// nodeLease is the kubelet's Lease of node n (kube-node-lease, owned by the
// Node, 40 s).
func nodeLease(n *corev1.Node, now time.Time) *coordinationv1.Lease {
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Namespace: corev1.NamespaceNodeLease,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(n.Name), LeaseDurationSeconds: ptr.To[int32](40),
			RenewTime: &metav1.MicroTime{Time: now}},
	}
}
