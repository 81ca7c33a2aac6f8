package cilium

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/cilium/api/v1/models"
	"github.com/cilium/cilium/api/v1/server"
	"github.com/cilium/cilium/api/v1/server/restapi"
	"github.com/cilium/cilium/api/v1/server/restapi/daemon"
	"github.com/cilium/cilium/pkg/ipam/service/ipallocator"
	ipamtypes "github.com/cilium/cilium/pkg/ipam/types"
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	"github.com/go-openapi/loads"
	"github.com/go-openapi/runtime/middleware"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/nodeagent"
	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// fakeAgent is a Cilium agent's API on its unix socket, served by Cilium's
// own generated API server (api/v1/server/restapi, its routes, parameters
// and JSON producer), whose GET /healthz answers with the IPAM section as
// the agent's status collector builds it (dumpIPAM) from an allocator of
// Cilium's (ipallocator, the agent's host-scope allocator in cluster-pool
// mode) over the node's pod CIDR.
type fakeAgent struct {
	socket string

	mu     sync.Mutex
	alloc  *ipallocator.Range
	owners map[string]string
	briefs []bool // the brief header of each request
}

func startFakeAgent(t *testing.T, podCIDR string) *fakeAgent {
	t.Helper()
	// A short path: a unix socket's path is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "cilium")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	a := &fakeAgent{socket: filepath.Join(dir, "cilium.sock"), alloc: ipallocator.NewCIDRRange(netip.MustParsePrefix(podCIDR)), owners: map[string]string{}}
	doc, err := loads.Analyzed(server.SwaggerJSON, "")
	if err != nil {
		t.Fatal(err)
	}
	api := restapi.NewCiliumAPIAPI(doc)
	api.DaemonGetHealthzHandler = daemon.GetHealthzHandlerFunc(func(params daemon.GetHealthzParams) middleware.Responder {
		a.mu.Lock()
		defer a.mu.Unlock()
		brief := params.Brief != nil && *params.Brief
		a.briefs = append(a.briefs, brief)
		sr := &models.StatusResponse{Cilium: &models.Status{State: models.StatusStateOk}}
		if !brief { // the agent's brief status has no ipam section
			sr.Ipam = a.ipamStatus()
		}
		return daemon.NewGetHealthzOK().WithPayload(sr)
	})
	l, err := net.Listen("unix", a.socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(api.Serve(nil))
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return a
}

// ipamStatus is dumpIPAM's IPAMStatus for the default pool: every address
// in ipv4, owners in allocations, the allocator's summary.
func (a *fakeAgent) ipamStatus() *models.IPAMStatus {
	st := &models.IPAMStatus{Allocations: models.AllocationMap{}, IPv4: []string{}}
	a.alloc.ForEach(func(ip netip.Addr) {
		st.IPv4 = append(st.IPv4, ip.String())
		st.Allocations[ip.String()] = a.owners[ip.String()]
	})
	st.Status = fmt.Sprintf("IPv4: %d/%d allocated from %s, ", len(st.IPv4), a.alloc.Free()+a.alloc.Used(), a.alloc.CIDR())
	return st
}

// allocate has the agent allocate the next address for owner, as for a
// pod's CNI ADD ("<namespace>/<pod>"), its router or its health endpoint.
func (a *fakeAgent) allocate(t *testing.T, owner string) netip.Addr {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	ip, err := a.alloc.AllocateNext()
	if err != nil {
		t.Fatalf("Cilium's allocator: %v", err)
	}
	a.owners[ip.String()] = owner
	return ip
}

func (a *fakeAgent) release(ip netip.Addr) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.alloc.Release(ip)
	delete(a.owners, ip.String())
}

func (a *fakeAgent) free() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int64(a.alloc.Free())
}

// TestNodeIPsWithCiliumClusterPool: two nodes in Cilium's default mode,
// cluster-pool: the operator gives each a /28 pod CIDR (spec.ipam.podCIDRs),
// and the agent allocates from it, listing its allocations only in its own
// status. node-a's agent has used up its 14 addresses (router, health and
// 12 pods); node-b's holds 4. The node agent, asking each Cilium agent on
// its socket, publishes Cilium's own allocator's figures; headroom-scheduler
// keeps pods that prefer node-a off it, fills node-b to its 14, and the next
// pod fits nowhere. node-a's agent releases two pods' addresses; the agent
// reports it and the pending pod goes to node-a. Then node-b's Cilium agent
// still lists 2 pods while the API server shows 10 running there with
// addresses: the cross-check reports it (a PodIPFiguresDisagree Event, the
// difference metric) and publishes the pods' count.
func TestNodeIPsWithCiliumClusterPool(t *testing.T) {
	e := startWith(t, controlplane.Options{Kwok: true})
	agents := map[string]*fakeAgent{}
	pods := map[string][]netip.Addr{}
	for node, cidr := range map[string]string{"node-a": "10.0.1.0/28", "node-b": "10.0.2.0/28"} {
		cn := &ciliumv2.CiliumNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
		cn.Spec.IPAM.PodCIDRs = prefixes(cidr)
		e.ciliumNode(cn)
		agents[node] = startFakeAgent(t, cidr)
		agents[node].allocate(t, "router")
		agents[node].allocate(t, "health")
		if _, err := e.cp.CreateNode(e.ctx, node, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 12 {
		pods["node-a"] = append(pods["node-a"], agents["node-a"].allocate(t, fmt.Sprintf("default/a-%d", i)))
	}
	for i := range 2 {
		pods["node-b"] = append(pods["node-b"], agents["node-b"].allocate(t, fmt.Sprintf("default/b-%d", i)))
	}
	newAgent := func(node string) *nodeagent.Agent {
		t.Helper()
		cfg := nodeagent.DefaultConfig()
		cfg.NodeName, cfg.CNIConfDir, cfg.ContainerRuntimeEndpoint = node, e.confDir, ""
		cfg.CgroupRoot = t.TempDir()
		cfg.CiliumAgentSocket = agents[node].socket
		cfg.RequestTimeout = 20 * time.Second
		if err := os.MkdirAll(filepath.Join(cfg.CgroupRoot, "kubepods"), 0o755); err != nil {
			t.Fatal(err)
		}
		a, err := nodeagent.New(e.cp.Client, cfg, nodeagent.WithDynamicClient(e.dynamic))
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	report := func(node string) ipstats.NodeStats {
		t.Helper()
		if err := newAgent(node).Once(e.ctx); err != nil {
			t.Fatalf("node agent --once on %s: %v", node, err)
		}
		s, err := ipstats.ParseNode(e.annotations(node), time.Now(), 0)
		if err != nil {
			t.Fatalf("%s's pod-IP annotations: %v", node, err)
		}
		// Cilium's own allocator: 14 addresses of a /28, its Free() the rest.
		if want := 14 - agents[node].free(); s.Capacity != 14 || s.Used != want {
			t.Fatalf("%s: published capacity %d, used %d; Cilium's allocator: 14 and %d", node, s.Capacity, s.Used, want)
		}
		return s
	}
	report("node-a")
	report("node-b")
	for _, b := range agents["node-a"].briefs {
		if b {
			t.Fatal("the agent's status was asked for brief: it has no ipam section then")
		}
	}

	if _, err := e.cp.StartScheduler(e.ctx, repoFileBytes(t, "manifests/scheduler/scheduler-config.yaml")); err != nil {
		t.Fatal(err)
	}
	podsAPI := e.cp.Client.CoreV1().Pods(metav1.NamespaceDefault)
	create := func(name string) {
		t.Helper()
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: metav1.NamespaceDefault},
			Spec: corev1.PodSpec{SchedulerName: "headroom-scheduler", Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}},
				Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
					Weight: 100, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
						Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-a"}}}}}}}}}}
		if _, err := podsAPI.Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// node-b's 10 free addresses take 10 pods; none goes to node-a.
	for i := range 10 {
		name := fmt.Sprintf("p%02d", i)
		create(name)
		if node := e.waitScheduled(name); node != "node-b" {
			t.Fatalf("%s bound to %s, whose Cilium agent has no free address; want node-b", name, node)
		}
	}
	create("stuck")
	e.waitEventText("stuck", "FailedScheduling", "2 "+nodeips.ErrReasonNoFreeIPs)

	// Two pods of node-a go; its Cilium agent releases their addresses.
	agents["node-a"].release(pods["node-a"][3])
	agents["node-a"].release(pods["node-a"][8])
	if s := report("node-a"); s.Used != 12 {
		t.Fatalf("node-a after two releases: used %d, want 12", s.Used)
	}
	if node := e.waitScheduled("stuck"); node != "node-a" {
		t.Fatalf("stuck bound to %s, want node-a", node)
	}

	// node-b's Cilium agent lists 2 pods (and its router and health
	// addresses); the API server shows the 10 placed there running with
	// addresses (kwok's). The cross-check reports it after its samples.
	b := newAgent("node-b")
	var ev corev1.Event
	err := wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		if err := b.Tick(ctx); err != nil {
			t.Logf("tick: %v", err)
		}
		evs, err := e.cp.Client.CoreV1().Events(nodeagent.EventNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=node-b,reason=PodIPFiguresDisagree"})
		if err != nil || len(evs.Items) == 0 {
			return false, err
		}
		ev = evs.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("no PodIPFiguresDisagree Event on node-b: %v", err)
	}
	if ev.Type != corev1.EventTypeWarning || !strings.Contains(ev.Message, "cilium-agent counts 2") || !strings.Contains(ev.Message, "10 pods") {
		t.Fatalf("Event %s %q", ev.Type, ev.Message)
	}
	rec := httptest.NewRecorder()
	b.Metrics().Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	if want := `pod_ip_cross_check_difference{source="cilium-agent"} -8`; !strings.Contains(string(body), want) {
		t.Fatalf("metrics lack %q:\n%s", want, grepLines(string(body), "cross_check"))
	}
	// Not trusted blindly: the published use is the agent's 4 plus the 8
	// pods it does not count.
	err = wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_ = b.Tick(ctx)
		s, err := ipstats.ParseNode(e.annotations("node-b"), time.Now(), 0)
		return err == nil && s.Used == 12, nil
	})
	if err != nil {
		t.Fatalf("node-b's published use not raised to the pods' count: %v", e.annotations("node-b"))
	}
	t.Logf("cross-check: %s", ev.Message)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// repoFileBytes reads a file of the repository.
func repoFileBytes(t *testing.T, rel string) []byte {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// waitScheduled waits until the pod is bound and returns its node.
func (e *env) waitScheduled(name string) string {
	e.t.Helper()
	var node string
	err := wait.PollUntilContextTimeout(e.ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := e.cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		node = p.Spec.NodeName
		return node != "", nil
	})
	if err != nil {
		e.t.Fatalf("pod %s not bound: %v", name, err)
	}
	return node
}

// waitEventText waits for an Event of the pod with that reason whose
// message contains text.
func (e *env) waitEventText(pod, reason, text string) {
	e.t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(e.ctx, 250*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		evs, err := e.cp.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
		if err != nil {
			return false, err
		}
		seen = seen[:0]
		for _, ev := range evs.Items {
			seen = append(seen, ev.Reason+": "+ev.Message)
			if ev.Reason == reason && strings.Contains(ev.Message, text) {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		e.t.Fatalf("no %s Event containing %q on pod %s; events: %q", reason, text, pod, seen)
	}
}

// TestCiliumNodeCountCrossChecked: a CiliumNode in pool mode whose
// status.ipam.used lists the router's address and 3 pods' while the API
// server shows 9 pods running on the node with addresses: the node agent's
// cross-check reports it (a PodIPFiguresDisagree Event naming the source
// "cilium") and publishes the pods' count, not the CiliumNode's.
func TestCiliumNodeCountCrossChecked(t *testing.T) {
	e := startWith(t, controlplane.Options{Kwok: true})
	const node = "pool-node"
	pool := ipamtypes.AllocationMap{}
	for i := 4; i < 34; i++ {
		pool[fmt.Sprintf("10.10.1.%d", i)] = ipamtypes.AllocationIP{Resource: "eni-0"}
	}
	cn := &ciliumv2.CiliumNode{ObjectMeta: metav1.ObjectMeta{Name: node}}
	cn.Spec.IPAM.Pool = pool
	cn.Status.IPAM.Used = owners("default", "10.10.1.4", "10.10.1.5", "10.10.1.6", "10.10.1.7")
	e.ciliumNode(cn)
	if _, err := e.cp.CreateNode(e.ctx, node, corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("16"), corev1.ResourceMemory: resource.MustParse("64Gi"), corev1.ResourcePods: resource.MustParse("110")}, nil); err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Namespace: metav1.NamespaceDefault},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}}}
		if _, err := e.cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(e.ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := nodeagent.DefaultConfig()
	cfg.NodeName, cfg.CNIConfDir, cfg.ContainerRuntimeEndpoint = node, e.confDir, ""
	cfg.CgroupRoot = t.TempDir()
	if err := os.MkdirAll(filepath.Join(cfg.CgroupRoot, "kubepods"), 0o755); err != nil {
		t.Fatal(err)
	}
	agent, err := nodeagent.New(e.cp.Client, cfg, nodeagent.WithDynamicClient(e.dynamic))
	if err != nil {
		t.Fatal(err)
	}
	var ev corev1.Event
	err = wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_ = agent.Tick(ctx)
		evs, err := e.cp.Client.CoreV1().Events(nodeagent.EventNamespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + node + ",reason=PodIPFiguresDisagree"})
		if err != nil || len(evs.Items) == 0 {
			return false, err
		}
		ev = evs.Items[0]
		return true, nil
	})
	if err != nil {
		t.Fatalf("no PodIPFiguresDisagree Event: %v", err)
	}
	if !strings.Contains(ev.Message, "source cilium counts 3") || !strings.Contains(ev.Message, "9 pods") {
		t.Fatalf("Event %q", ev.Message)
	}
	err = wait.PollUntilContextTimeout(e.ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_ = agent.Tick(ctx)
		s, err := ipstats.ParseNode(e.annotations(node), time.Now(), 0)
		return err == nil && s.Capacity == 30 && s.Used == 4+6, nil
	})
	if err != nil {
		t.Fatalf("published use not raised to the pods' count: %v", e.annotations(node))
	}
	t.Logf("cross-check: %s", ev.Message)
}
