package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics/testutil"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/headroom-k8s/headroom/pkg/cniipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/test/cniruntime"
)

// fakeRuntime is a container runtime's CRI service as far as the leak
// finder asks it: Version (the client's handshake), ListPodSandbox and
// PodSandboxStatus.
type fakeRuntime struct {
	criapi.UnimplementedRuntimeServiceServer

	mu        sync.Mutex
	sandboxes map[string]criapi.PodSandboxState
	ips       map[string][]string // what each sandbox reports, listed or not
	lists     int
	statuses  int
	// onList runs before a listing is answered, with the listing's number
	// (from 1); it may change sandboxes, as a runtime does meanwhile.
	onList func(n int)
}

func (f *fakeRuntime) Version(context.Context, *criapi.VersionRequest) (*criapi.VersionResponse, error) {
	return &criapi.VersionResponse{Version: "0.1.0", RuntimeName: "fake", RuntimeVersion: "0", RuntimeApiVersion: "v1"}, nil
}

func (f *fakeRuntime) ListPodSandbox(_ context.Context, r *criapi.ListPodSandboxRequest) (*criapi.ListPodSandboxResponse, error) {
	f.mu.Lock()
	f.lists++
	n, hook := f.lists, f.onList
	f.mu.Unlock()
	if hook != nil {
		hook(n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.GetFilter() != nil && (r.GetFilter().GetState() != nil || r.GetFilter().GetId() != "") {
		return nil, errors.New("the leak finder must list sandboxes in every state")
	}
	resp := &criapi.ListPodSandboxResponse{}
	for id, st := range f.sandboxes {
		resp.Items = append(resp.Items, &criapi.PodSandbox{Id: id, State: st,
			Metadata: &criapi.PodSandboxMetadata{Name: id, Uid: id, Namespace: "default"}})
	}
	return resp, nil
}

func (f *fakeRuntime) PodSandboxStatus(_ context.Context, r *criapi.PodSandboxStatusRequest) (*criapi.PodSandboxStatusResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses++
	st, ok := f.sandboxes[r.GetPodSandboxId()]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "sandbox %s not found", r.GetPodSandboxId())
	}
	net := &criapi.PodSandboxNetworkStatus{}
	for i, ip := range f.ips[r.GetPodSandboxId()] {
		if i == 0 {
			net.Ip = ip
		} else {
			net.AdditionalIps = append(net.AdditionalIps, &criapi.PodIP{Ip: ip})
		}
	}
	return &criapi.PodSandboxStatusResponse{Status: &criapi.PodSandboxStatus{Id: r.GetPodSandboxId(), State: st, Network: net, CreatedAt: 1,
		Metadata: &criapi.PodSandboxMetadata{Name: r.GetPodSandboxId(), Uid: r.GetPodSandboxId(), Namespace: "default"}}}, nil
}

func (f *fakeRuntime) set(id string, st criapi.PodSandboxState) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sandboxes[id] = st
}

func (f *fakeRuntime) remove(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sandboxes, id)
}

func (f *fakeRuntime) setHook(h func(n int)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onList, f.lists = h, 0
}

// agentPod is the agent's own pod in the fake runtime: its sandbox ID and
// pod UID (the fake gives a sandbox its ID as UID), host network.
const agentPod = "headroom-node-agent-pod"

// startFakeRuntime serves a fakeRuntime on a unix socket and returns it
// with its CRI endpoint. It runs the agent's own pod's sandbox.
func startFakeRuntime(t *testing.T) (*fakeRuntime, string) {
	t.Helper()
	f := &fakeRuntime{sandboxes: map[string]criapi.PodSandboxState{agentPod: ready}, ips: map[string][]string{}}
	sock := filepath.Join(t.TempDir(), "cri.sock")
	f.serve(t, sock)
	return f, "unix://" + sock
}

// serve serves f on a new socket at sock until the test ends or the
// returned stop is called, which removes the socket as a runtime that
// exits does.
func (f *fakeRuntime) serve(t *testing.T, sock string) (stop func()) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	criapi.RegisterRuntimeServiceServer(srv, f)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return srv.Stop
}

// leakTest is a real host-local network, a fake runtime behind the real
// CRI client, and an IPProbe with leak finding.
type leakTest struct {
	t       *testing.T
	ctx     context.Context
	logger  klog.Logger
	net     *cniruntime.Network
	runtime *fakeRuntime
	probe   *IPProbe
	events  []string
	metrics *Metrics
}

func newLeakTest(t *testing.T, reclaim bool) *leakTest {
	lt := &leakTest{t: t, metrics: NewMetrics()}
	lt.logger = ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	lt.ctx = klog.NewContext(context.Background(), lt.logger)
	lt.net = cniruntime.HostLocalNetwork(t, "headroom-pods", `[[{"subnet": "10.88.0.0/28"}], [{"subnet": "fd00:88::/124"}]]`)
	var endpoint string
	lt.runtime, endpoint = startFakeRuntime(t)
	lt.probe = &IPProbe{
		ConfDir: lt.net.ConfDir, HysteresisPercent: DefaultIPHysteresisPercent, Metrics: lt.metrics,
		Leaks: &LeakFinder{Sandboxes: &CRISandboxLister{Endpoint: endpoint, Timeout: 5 * time.Second}, OwnPodUID: agentPod,
			Grace: time.Minute, Reclaim: reclaim, ReclaimAfter: 2 * time.Minute},
		Event: func(_ context.Context, eventType, reason, message string) {
			lt.events = append(lt.events, eventType+" "+reason+": "+message)
		},
	}
	return lt
}

// add runs the real host-local ADD for a sandbox, which the runtime then
// lists in state st (nil: not listed).
func (lt *leakTest) add(id string, st *criapi.PodSandboxState) {
	lt.t.Helper()
	res, err := lt.net.Add(lt.ctx, id)
	if err != nil {
		lt.t.Fatalf("ADD %s: %v", id, err)
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		lt.t.Fatal(err)
	}
	lt.runtime.mu.Lock()
	for _, ip := range r.IPs {
		lt.runtime.ips[id] = append(lt.runtime.ips[id], ip.Address.IP.String())
	}
	lt.runtime.mu.Unlock()
	if st != nil {
		lt.runtime.set(id, *st)
	}
}

// age makes every allocation so far older by d, as if made d earlier.
func (lt *leakTest) age(d time.Duration) {
	lt.t.Helper()
	entries, err := os.ReadDir(lt.net.StateDir)
	if err != nil {
		lt.t.Fatal(err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			lt.t.Fatal(err)
		}
		at := info.ModTime().Add(-d)
		if err := os.Chtimes(filepath.Join(lt.net.StateDir, e.Name()), at, at); err != nil {
			lt.t.Fatal(err)
		}
	}
}

func (lt *leakTest) sample(at time.Time) ipstats.NodeStats {
	lt.t.Helper()
	s, err := lt.probe.Sample(lt.ctx, at)
	if err != nil {
		lt.t.Fatalf("Sample: %v", err)
	}
	return s.(ipSample).stats
}

func (lt *leakTest) want(at time.Time, used, leaked int64) ipstats.NodeStats {
	lt.t.Helper()
	s := lt.sample(at)
	if s.Capacity != 13 || s.Used != used || !s.LeakedKnown || s.Leaked != leaked {
		lt.t.Fatalf("sample at +%s: %+v, want 13 capacity, %d used, %d leaked", at.Sub(time.Now()).Round(time.Second), s, used, leaked)
	}
	if a := s.Annotations(); a[ipstats.AnnotationLeaked] != fmt.Sprint(leaked) {
		lt.t.Fatalf("annotations %v", a)
	}
	if got := gaugeValue(lt.t, lt.metrics, "headroom_node_agent_pod_ips_leaked"); got != float64(leaked) {
		lt.t.Fatalf("leak gauge %v, want %d", got, leaked)
	}
	return s
}

func gaugeValue(t *testing.T, m *Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			if len(mf.Metric) != 1 {
				t.Fatalf("%s has %d series", name, len(mf.Metric))
			}
			if g := mf.Metric[0].GetGauge(); g != nil {
				return g.GetValue()
			}
			return mf.Metric[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

var (
	ready    = criapi.PodSandboxState_SANDBOX_READY
	notReady = criapi.PodSandboxState_SANDBOX_NOTREADY
)

// TestIPProbeLeaks counts the leaked allocations of the real host-local
// against the sandboxes a runtime lists: a NOTREADY sandbox still owns its
// addresses, an allocation younger than the grace is never leaked (the
// runtime lists a sandbox only after its CNI ADD), and one released
// normally while the finder looks is not either.
func TestIPProbeLeaks(t *testing.T) {
	lt := newLeakTest(t, false)
	lt.add("sandbox-ready", &ready)
	lt.add("sandbox-notready", &notReady)
	lt.add("sandbox-deleted-normally", &ready)
	lt.add("sandbox-gone", nil) // its sandbox vanished without a DEL
	now := time.Now()

	// Within the grace every allocation is presumed in the making.
	lt.want(now, 4, 0)
	if len(lt.events) != 0 {
		t.Fatalf("events with no leak: %v", lt.events)
	}
	// Past it, the allocation of no sandbox is leaked; so would be the one
	// whose sandbox the runtime removes while the finder looks, but its DEL
	// released it meanwhile: not counted.
	lt.runtime.setHook(func(n int) {
		if n == 1 {
			if err := lt.net.Del(lt.ctx, "sandbox-deleted-normally"); err != nil {
				t.Errorf("DEL: %v", err)
			}
			lt.runtime.remove("sandbox-deleted-normally")
		}
	})
	later := now.Add(time.Minute + time.Second)
	lt.want(later, 4, 1) // used was listed before the DEL
	lt.runtime.setHook(nil)
	lt.want(later, 3, 1)
	if len(lt.events) != 1 || !strings.HasPrefix(lt.events[0], "Warning LeakedPodIPs: 1 pod IPs of network headroom-pods") ||
		!strings.Contains(lt.events[0], "leaked addresses: 10.88.0.5 (allocated ") {
		t.Fatalf("events: %q, want one Warning naming the leaked address", lt.events)
	}
	// A new allocation without a sandbox yet is not leaked within the grace,
	// and one more event comes with the new count.
	lt.age(2 * time.Minute)
	lt.add("sandbox-starting", nil)
	lt.want(time.Now(), 4, 1)
	lt.want(time.Now().Add(time.Minute+time.Second), 4, 2)
	if len(lt.events) != 2 || !strings.HasPrefix(lt.events[1], "Warning LeakedPodIPs: 2 pod IPs") {
		t.Fatalf("events: %q", lt.events)
	}
	// The runtime lists it after all: no longer leaked.
	lt.runtime.set("sandbox-starting", ready)
	lt.want(time.Now().Add(time.Minute+time.Second), 4, 1)
	// Leak detection never releases anything without --reclaim-leaked-ips.
	lt.want(time.Now().Add(time.Hour), 4, 1)
	if _, err := os.Stat(filepath.Join(lt.net.StateDir, "10.88.0.5")); err != nil {
		t.Fatalf("the leaked allocation is gone without reclaiming: %v", err)
	}
	// Each sandbox's addresses were asked once, not on every sample.
	lt.runtime.mu.Lock()
	defer lt.runtime.mu.Unlock()
	if lt.runtime.statuses != 5 {
		t.Fatalf("%d PodSandboxStatus calls for 5 sandboxes (the agent's own among them) listed over 7 samples", lt.runtime.statuses)
	}
}

// TestIPProbeReclaim releases an allocation only after it has been leaked
// for ReclaimAfter, and only when the runtime, asked again right before,
// still lists no sandbox for it; the release is host-local's DEL: both
// families' addresses of the container go, and host-local hands them out
// again.
func TestIPProbeReclaim(t *testing.T) {
	lt := newLeakTest(t, true)
	lt.add("sandbox-a", &ready)
	lt.add("sandbox-gone", nil)
	lt.add("sandbox-b", &ready)
	leakedFile := filepath.Join(lt.net.StateDir, "10.88.0.3")
	leakedFile6 := filepath.Join(lt.net.StateDir, "fd00:88::3")
	t1 := time.Now().Add(time.Minute + time.Second)
	lt.want(t1, 3, 1)                                // leaked from t1 on
	lt.want(t1.Add(2*time.Minute-time.Second), 3, 1) // not long enough
	// Due, but the runtime lists the sandbox when asked right before the
	// release (a listing that raced its creation): nothing is released.
	lt.runtime.setHook(func(n int) {
		if n == 2 {
			lt.runtime.set("sandbox-gone", notReady)
		}
	})
	lt.want(t1.Add(2*time.Minute), 3, 1)
	if _, err := os.Stat(leakedFile); err != nil {
		t.Fatalf("released although the runtime listed the sandbox again: %v", err)
	}
	lt.runtime.setHook(nil)
	lt.runtime.remove("sandbox-gone")
	// Seen leaked again from now: the clock restarted when it was listed.
	t2 := t1.Add(3 * time.Minute)
	lt.want(t2, 3, 1)
	lt.want(t2.Add(2*time.Minute), 2, 0)
	for _, f := range []string{leakedFile, leakedFile6} {
		if _, err := os.Stat(f); !os.IsNotExist(err) {
			t.Fatalf("%s after the release: %v", f, err)
		}
	}
	if got := gaugeValue(t, lt.metrics, "headroom_node_agent_leaked_pod_ip_releases_total"); got != 1 {
		t.Fatalf("releases counted: %v, want 1", got)
	}
	log := lt.logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if !strings.Contains(log, "Released leaked pod IPs") || !strings.Contains(log, `containerID="sandbox-gone"`) {
		t.Fatalf("the release is not logged:\n%s", log)
	}
	if len(lt.events) != 3 || !strings.HasPrefix(lt.events[1], "Normal ReleasedLeakedPodIPs: Released pod IPs 10.88.0.3, fd00:88::3 of network headroom-pods") ||
		!strings.Contains(lt.events[1], "to container sandbox-gone") || !strings.HasPrefix(lt.events[2], "Normal LeakedPodIPsGone") {
		t.Fatalf("events: %q, want the leak, one release naming both addresses and the container, the leak gone", lt.events)
	}
	// The real DEL the runtime never ran is harmless now, and host-local
	// hands the address out again: the /28's 13 addresses all fit.
	if err := lt.net.Del(lt.ctx, "sandbox-gone"); err != nil {
		t.Fatalf("DEL after the release: %v", err)
	}
	for i := 1; i <= 11; i++ {
		lt.add(fmt.Sprintf("sandbox-new-%d", i), &ready)
	}
	if id, _, err := mustLoad(t, lt.net.ConfDir).Owner(net.ParseIP("10.88.0.3")); err != nil || !strings.HasPrefix(id, "sandbox-new-") {
		t.Fatalf("10.88.0.3 after the release and a full range of ADDs: %q, %v", id, err)
	}
	if _, err := lt.net.Add(lt.ctx, "one-too-many"); err == nil {
		t.Fatal("a 14th ADD on a /28 succeeded")
	}
	lt.want(time.Now(), 13, 0)
}

// TestIPProbeReclaimKeepsReallocatedAddress reproduces the race of a
// release with the runtime: while the finder asks the runtime whether a
// leaked allocation's sandbox is gone, the late CNI DEL of that sandbox
// runs, and a new pod's ADD takes the same address, before the runtime
// lists the new pod's sandbox. The address is live again: the finder must
// keep it. The network's one usable address (a /30 less network,
// broadcast and gateway) makes host-local hand the same address out again.
func TestIPProbeReclaimKeepsReallocatedAddress(t *testing.T) {
	for _, when := range []int{1, 2} {
		t.Run(fmt.Sprintf("during listing %d", when), func(t *testing.T) {
			lt := newLeakTest(t, true)
			lt.net = cniruntime.HostLocalNetwork(t, "headroom-one", `[[{"subnet": "10.89.0.0/30"}]]`)
			lt.probe.ConfDir = lt.net.ConfDir
			lt.add("sandbox-gone", nil)
			file := filepath.Join(lt.net.StateDir, "10.89.0.2")
			t1 := time.Now().Add(time.Minute + time.Second)
			if s := lt.sample(t1); s.Used != 1 || s.Leaked != 1 {
				t.Fatalf("%+v, want the one address leaked", s)
			}
			// Due now. The first listing of the next sample finds the leak,
			// the second confirms it before the release: the DEL and the
			// new ADD run before either answers.
			lt.runtime.setHook(func(n int) {
				if n != when {
					return
				}
				if err := lt.net.Del(lt.ctx, "sandbox-gone"); err != nil {
					t.Errorf("DEL: %v", err)
				}
				if _, err := lt.net.Add(lt.ctx, "sandbox-new"); err != nil {
					t.Errorf("ADD: %v", err)
				}
			})
			s := lt.sample(t1.Add(2 * time.Minute))
			lt.runtime.setHook(nil)
			id, _, err := mustLoad(t, lt.net.ConfDir).Owner(net.ParseIP("10.89.0.2"))
			if err != nil || id != "sandbox-new" {
				t.Fatalf("10.89.0.2 after the race: owner %q (%v), want the new pod's allocation kept", id, err)
			}
			if _, err := os.Stat(file); err != nil {
				t.Fatal(err)
			}
			if s.Used != 1 || s.Leaked != 0 {
				t.Fatalf("%+v, want the new allocation counted used, not leaked", s)
			}
			if got := gaugeValue(t, lt.metrics, "headroom_node_agent_leaked_pod_ip_releases_total"); got != 0 {
				t.Fatalf("releases counted: %v, want 0", got)
			}
			for _, e := range lt.events {
				if strings.Contains(e, "ReleasedLeakedPodIPs") {
					t.Fatalf("a release was recorded: %q", lt.events)
				}
			}
		})
	}
}

// TestIPProbeUntrustedRuntime: a runtime that answers but does not list the
// agent's own pod (an idle containerd on a CRI-O node, a socket of another
// runtime) is not the node's: every allocation would look leaked. The
// count is unknown and nothing is released, however long it lasts; an
// agent that does not know its own pod trusts no runtime at all.
func TestIPProbeUntrustedRuntime(t *testing.T) {
	for name, mutate := range map[string]func(lt *leakTest){
		"runtime lists nothing": func(lt *leakTest) { lt.runtime.remove(agentPod) },
		"own pod not ready":     func(lt *leakTest) { lt.runtime.set(agentPod, notReady) },
		"own pod unknown":       func(lt *leakTest) { lt.probe.Leaks.OwnPodUID = "" },
	} {
		t.Run(name, func(t *testing.T) {
			lt := newLeakTest(t, true)
			lt.add("sandbox-a", nil)
			lt.add("sandbox-b", nil)
			mutate(lt)
			for i := range 20 {
				s, err := lt.probe.Sample(lt.ctx, time.Now().Add(time.Duration(i)*time.Hour))
				if err != nil {
					t.Fatal(err)
				}
				if st := s.(ipSample).stats; st.Used != 2 || st.LeakedKnown {
					t.Fatalf("%+v, want 2 used and no leak count", st)
				}
			}
			if u, err := mustLoad(t, lt.net.ConfDir).Usage(); err != nil || u.Used != 2 {
				t.Fatalf("host-local state after 20 hours: %+v, %v; want both allocations kept", u, err)
			}
			if len(lt.events) != 0 {
				t.Fatalf("events: %q", lt.events)
			}
			log := lt.logger.GetSink().(ktesting.Underlier).GetBuffer().String()
			if !strings.Contains(log, "Leaked pod IPs cannot be told") || !strings.Contains(log, "own pod") {
				t.Fatalf("the reason is not logged:\n%s", log)
			}
		})
	}
}

// Without a runtime to ask, the figures are published without ip-leaked,
// an earlier count is withdrawn, and the reason is logged once.
func TestIPProbeLeaksUnknown(t *testing.T) {
	lt := newLeakTest(t, false)
	lt.add("sandbox-gone", nil)
	lt.want(time.Now().Add(2*time.Minute), 1, 1)
	lt.probe.Leaks.Sandboxes = &CRISandboxLister{Endpoint: "unix://" + filepath.Join(t.TempDir(), "missing.sock"), Timeout: time.Second}
	for range 3 {
		s, err := lt.probe.Sample(lt.ctx, time.Now().Add(2*time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		st := s.(ipSample).stats
		if st.Used != 1 || st.LeakedKnown {
			t.Fatalf("%+v, want used 1 and no leak count", st)
		}
		if _, ok := s.Annotations()[ipstats.AnnotationLeaked]; ok {
			t.Fatalf("annotations %v carry a leak count", s.Annotations())
		}
		if w := s.(Withdrawer).Withdrawn(); len(w) != 1 || w[0] != ipstats.AnnotationLeaked {
			t.Fatalf("withdrawn %v, want the earlier leak count", w)
		}
	}
	log := lt.logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if n := strings.Count(log, "Leaked pod IPs cannot be told"); n != 1 {
		t.Fatalf("logged %d times, want once:\n%s", n, log)
	}
	if got := gaugeValue(t, lt.metrics, "headroom_node_agent_pod_ips_leaked"); got == got {
		t.Fatalf("leak gauge %v, want NaN when unknown", got)
	}
}

// The agent writes ip-leaked next to ip-used and records the Warning
// Event on the Node once per change of the count.
func TestTickWritesLeakedAndEvent(t *testing.T) {
	n := cniruntime.HostLocalNetwork(t, "headroom-pods", `[[{"subnet": "10.88.0.0/28"}]]`)
	rt, endpoint := startFakeRuntime(t)
	cfg := testConfig()
	cfg.CNIConfDir = n.ConfDir
	cfg.ContainerRuntimeEndpoint = endpoint
	cfg.PodUID = agentPod
	cfg.IPLeakGrace = time.Minute
	h := newHarness(t, cfg, nil)
	h.clock.SetTime(time.Now())
	for _, id := range []string{"live", "gone"} {
		res, err := n.Add(h.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := types100.NewResultFromResult(res)
		rt.ips[id] = []string{r.IPs[0].Address.IP.String()}
	}
	rt.set("live", ready)
	if err := h.r.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	if a := h.node().Annotations; a[ipstats.AnnotationUsed] != "2" || a[ipstats.AnnotationLeaked] != "0" {
		t.Fatalf("annotations %v, want 2 used, 0 leaked within the grace", a)
	}
	for range 3 {
		if err := h.tick(21 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if a := h.node().Annotations; a[ipstats.AnnotationUsed] != "2" || a[ipstats.AnnotationLeaked] != "1" {
		t.Fatalf("annotations %v, want 2 used, 1 leaked", a)
	}
	events, err := h.client.CoreV1().Events(EventNamespace).List(h.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) != 1 {
		t.Fatalf("%d events, want one", len(events.Items))
	}
	ev := events.Items[0]
	if ev.Type != corev1.EventTypeWarning || ev.Reason != "LeakedPodIPs" || ev.InvolvedObject.Kind != "Node" ||
		ev.InvolvedObject.Name != cfg.NodeName || !strings.Contains(ev.Message, "10.88.0.3") {
		t.Fatalf("event %+v", ev)
	}
	if err := testutil.GatherAndCompare(h.r.Metrics().registry, strings.NewReader(`
# HELP headroom_node_agent_pod_ips_leaked [ALPHA] Pod IPs of the node's host-local IPAM allocated to no pod sandbox at the last sample (headroom.dev/ip-leaked); NaN when that cannot be told.
# TYPE headroom_node_agent_pod_ips_leaked gauge
headroom_node_agent_pod_ips_leaked 1
`), "headroom_node_agent_pod_ips_leaked"); err != nil {
		t.Fatal(err)
	}
}

func mustLoad(t *testing.T, confDir string) *cniipam.Network {
	t.Helper()
	n, err := cniipam.Load(confDir)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// A node without a socket at the endpoint makes no connection at all; a
// socket that does not answer the CRI costs nothing per attempt: the one
// connection is tried again, no new one is left behind.
func TestCRISandboxListerFailures(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	missing := &CRISandboxLister{Endpoint: "unix://" + filepath.Join(t.TempDir(), "none.sock"), Timeout: time.Second}
	if _, err := missing.ListSandboxes(ctx); err == nil || !strings.Contains(err.Error(), "no container runtime socket at") || missing.conn != nil {
		t.Fatalf("missing socket: %v, connection %v", err, missing.conn)
	}
	sock := filepath.Join(t.TempDir(), "mute.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close() // no gRPC here
		}
	}()
	mute := &CRISandboxLister{Endpoint: "unix://" + sock, Timeout: 200 * time.Millisecond}
	t.Cleanup(func() { mute.Close() })
	if _, err := mute.ListSandboxes(ctx); err == nil {
		t.Fatal("a socket without gRPC answered")
	}
	conn := mute.conn
	fds, goroutines := openFDs(t), runtime.NumGoroutine()
	for range 20 {
		if _, err := mute.ListSandboxes(ctx); err == nil {
			t.Fatal("a socket without gRPC answered")
		}
	}
	if mute.conn != conn {
		t.Fatal("a failed call made a new connection")
	}
	if f, g := openFDs(t), runtime.NumGoroutine(); f > fds+2 || g > goroutines+5 {
		t.Fatalf("after 20 failed calls: %d open files (from %d), %d goroutines (from %d)", f, fds, g, goroutines)
	}
}

func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}

// TestCRISandboxListerRecovers: a runtime that restarts (its socket
// removed, then made anew at the same path) is listed again at the first
// call after it is back, on the same connection.
func TestCRISandboxListerRecovers(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	f := &fakeRuntime{sandboxes: map[string]criapi.PodSandboxState{agentPod: ready}, ips: map[string][]string{}}
	sock := filepath.Join(t.TempDir(), "cri.sock")
	stop := f.serve(t, sock)
	l := &CRISandboxLister{Endpoint: "unix://" + sock, Timeout: time.Second}
	t.Cleanup(func() { l.Close() })
	if sbs, err := l.ListSandboxes(ctx); err != nil || len(sbs) != 1 || sbs[0].PodUID != agentPod || !sbs[0].Ready {
		t.Fatalf("%+v, %v", sbs, err)
	}
	conn := l.conn
	for i := range 5 {
		stop()
		if _, err := l.ListSandboxes(ctx); err == nil {
			t.Fatalf("restart %d: listed while the runtime is down", i)
		}
		stop = f.serve(t, sock)
		if sbs, err := l.ListSandboxes(ctx); err != nil || len(sbs) != 1 {
			t.Fatalf("restart %d: the first call after the runtime is back: %+v, %v", i, sbs, err)
		}
	}
	if l.conn != conn {
		t.Fatal("a restart made a new connection")
	}
}
