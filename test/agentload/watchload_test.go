//go:build agentload

package agentload

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/headroom-k8s/headroom/pkg/calicoipam"
	"github.com/headroom-k8s/headroom/pkg/calicoipam/calicotest"
	"github.com/headroom-k8s/headroom/pkg/ipstarved"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// The churn the watches are measured under, at 5,000 nodes of 30 pods
// (150,000 pods): blockWritesPerSecond IPAMBlock writes a second, one per
// pod start or stop (Calico's IPAM writes the node's block on each), that is
// 10 pods started and 10 stopped a second, each pod living some 4 hours.
// podsPerBlock pods hold addresses of each node's /26 block.
const (
	blockWritesPerSecond = 20
	podsPerBlock         = 30
)

// The Events the descheduler's ipStarved informer is measured under:
// otherEventsPerSecond Events of other reasons (a pod start is some five:
// Scheduled, Pulling, Pulled, Created, Started), and starvedEventWrites a
// second of the kubelets' FailedCreatePodSandBox Events (500 pods starved
// of a pod IP, one node in ten, each Event written, created or patched with
// its count, every 10 s). storedEvents are in etcd when the informer lists
// (Events live an hour: --event-ttl).
const (
	otherEventsPerSecond = 50
	starvedEventWrites   = 50
	storedEvents         = 20000
)

// countingTransport counts a client's requests and the bytes of their
// answers (the bodies the API server sends).
type countingTransport struct {
	requests, bytes atomic.Int64
}

func (c *countingTransport) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		c.requests.Add(1)
		resp, err := rt.RoundTrip(req)
		if err == nil {
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.bytes}
		}
		return resp, err
	})
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// TestWatchLoad measures, against a real kube-apiserver, what watching
// Calico's IPAMBlocks costs it at 5,000 nodes under pod churn, beside the
// kubelets' own Node status patches for the same nodes, and what the
// descheduler's one filtered Event informer (the ipStarved trigger's)
// costs it. A watch of the blocks (pkg/calicoipam.Watch) lists and watches
// every block of the cluster: the API server cannot select blocks by node.
// So the watch is held once per consumer for the cluster (NodeIPs' and
// RelieveNodePressure's ipSource CalicoIPAM), not once per node agent: by
// default 2 watchers, headroom-scheduler's and headroom-descheduler's.
// The watchers are raw watch streams, as many as
// HEADROOM_WATCH_LOAD_WATCHERS says (comma-separated), that read and count
// what the API server sends; given counts below the node count, the last is
// also extrapolated to one watch per node (the former design: it grows
// with watchers × events). The API server's CPU of each stretch is taken
// net of the same churn with no watcher. Built with the agentload tag
// (make bench-agent).
func TestWatchLoad(t *testing.T) {
	nodeCounts, _ := countsFromEnv(t, "HEADROOM_WATCH_LOAD_NODES", 5000)
	if len(nodeCounts) != 1 {
		t.Fatalf("HEADROOM_WATCH_LOAD_NODES=%v: want one node count", nodeCounts)
	}
	nodes := nodeCounts[0]
	watcherCounts, extrapolate := countsFromEnv(t, "HEADROOM_WATCH_LOAD_WATCHERS", 2)
	stretch := 30 * time.Second

	cp := controlplane.StartForTest(t, controlplane.Options{})
	apiServer, etcd := controlPlanePIDs(t, cp)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	wall0 := time.Now()
	fmt.Printf("load before: %s", uptime())
	out, err := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig", cp.KubeconfigPath,
		"apply", "-f", filepath.Join("..", "..", "pkg", "calicoipam", "testdata", "crds.yaml")).CombinedOutput()
	if err != nil {
		t.Fatalf("installing Calico's CRDs: %v\n%s", err, out)
	}
	var setupC counter
	admin := client(t, cp.Config, "", &setupC)
	dyn := dynamic.NewForConfigOrDie(cp.Config)
	workers := 32

	// The nodes, as the kubelets register them, and their blocks, as
	// Calico's IPAM writes them: a /26 of 10.0.0.0/12 each.
	start := time.Now()
	nodeObjs := make([]*corev1.Node, nodes)
	parallel(nodes, workers, func(i int) {
		n, err := admin.CoreV1().Nodes().Create(ctx, kubeletNode(fmt.Sprintf("node-%05d", i), start), metav1.CreateOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		nodeObjs[i] = n
	})
	blockOf := func(i, pods int) *unstructured.Unstructured {
		base := netip.MustParseAddr("10.0.0.0").As4()
		off := uint32(i) * 64
		base[1], base[2], base[3] = byte(off>>16), byte(off>>8), byte(off)
		node := fmt.Sprintf("node-%05d", i)
		return &unstructured.Unstructured{Object: calicotest.Block(netip.PrefixFrom(netip.AddrFrom4(base), 26).String(), "host:"+node, calicotest.Pods(node, 0, pods))}
	}
	blockRVs := make([]string, nodes)
	var blockBytes atomic.Int64
	blocks := dyn.Resource(calicoipam.IPAMBlocks)
	for deadline := time.Now().Add(time.Minute); ; {
		// The CRD is served a moment after it is applied.
		if _, err = blocks.List(ctx, metav1.ListOptions{Limit: 1}); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	parallel(nodes, workers, func(i int) {
		b := blockOf(i, podsPerBlock)
		j, _ := b.MarshalJSON()
		blockBytes.Add(int64(len(j)))
		got, err := blocks.Create(ctx, b, metav1.CreateOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		blockRVs[i] = got.GetResourceVersion()
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d Nodes and IPAMBlocks (%.0f bytes a block as JSON) created in %s", nodes, float64(blockBytes.Load())/float64(nodes), time.Since(start).Round(time.Second))

	m := &meter{t: t, apiServer: apiServer, etcd: etcd}
	m.measureIdle(20 * time.Second)
	t.Logf("idle: kube-apiserver %.3f, etcd %.3f CPU cores", m.idleAPIServer, m.idleEtcd)

	// The kubelets' Node status, in the same run: one round, a round per
	// nodeStatusReportFrequency.
	var statusC counter
	m.c = []*counter{&statusC}
	status := kubeletStatusRound(t, m, client(t, cp.Config, "", &statusC), nodeObjs, time.Now(), workers)
	statusRounds := float64(nodeStatusReportFrequency / time.Second)
	kubelet := perSecond{requests: float64(status.requests) / statusRounds, apiServerCPU: status.apiServerCPU / statusRounds}

	// The churn: a block of a random node gains or loses a pod.
	var churnC counter
	churnDyn := dynamic.NewForConfigOrDie(withCounter(cp.Config, &churnC))
	var mu sync.Mutex
	pods := make([]int, nodes)
	for i := range pods {
		pods[i] = podsPerBlock
	}
	churn := func(ctx context.Context, d time.Duration) {
		tick := time.NewTicker(time.Second / blockWritesPerSecond)
		defer tick.Stop()
		var wg sync.WaitGroup
		for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
			wg.Go(func() {
				mu.Lock()
				i := rand.IntN(nodes)
				pods[i] = 2*podsPerBlock + 1 - pods[i] // 30 ↔ 31
				b := blockOf(i, pods[i])
				b.SetResourceVersion(blockRVs[i])
				mu.Unlock()
				got, err := churnDyn.Resource(calicoipam.IPAMBlocks).Update(ctx, b, metav1.UpdateOptions{})
				if err != nil {
					return // a conflict with a concurrent write of the same block: one write fewer
				}
				mu.Lock()
				blockRVs[i] = got.GetResourceVersion()
				mu.Unlock()
			})
		}
		wg.Wait()
	}

	m.c = []*counter{&churnC}
	m.start()
	churn(ctx, stretch)
	base := m.stop()
	t.Logf("churn alone: %d writes in %s, kube-apiserver %.2f s CPU, etcd %.2f s CPU", base.requests, base.wall.Round(time.Millisecond), base.apiServerCPU, base.etcdCPU)

	type watchRow struct {
		watchers               int
		events, bytes, cpu     float64 // a second, net of the churn alone
		eventsPerWrite, perCPU float64
	}
	var rows []watchRow
	for _, k := range watcherCounts {
		events, bytes, stop := watchAll(t, ctx, cp.Config, calicoipam.IPAMBlocks.Group, calicoipam.IPAMBlocks.Version, calicoipam.IPAMBlocks.Resource, k)
		// The watches' own list and start are not counted: the stretch
		// begins once every watch runs.
		time.Sleep(5 * time.Second)
		e0, b0 := events.Load(), bytes.Load()
		m.start()
		churn(ctx, stretch)
		r := m.stop()
		e, b := events.Load()-e0, bytes.Load()-b0
		stop()
		secs := r.wall.Seconds()
		net := max(0, r.apiServerCPU-base.apiServerCPU*secs/base.wall.Seconds())
		row := watchRow{watchers: k, events: float64(e) / secs, bytes: float64(b) / secs, cpu: net / secs,
			eventsPerWrite: float64(e) / float64(max(r.requests, 1))}
		rows = append(rows, row)
		t.Logf("%d watchers: %d writes, %d watch events (%.1f a write), %d bytes, kube-apiserver %.2f s CPU (%.2f s net of the churn), etcd %.2f s, %s",
			k, r.requests, e, row.eventsPerWrite, b, r.apiServerCPU, net, r.etcdCPU, r.wall.Round(time.Millisecond))
	}

	// The descheduler's Event informer.
	eventRows := measureEventInformer(t, ctx, cp.Config, m, admin, nodes, stretch)

	writes := float64(base.requests) / base.wall.Seconds()
	fmt.Printf("\nwatch load, %d nodes, %.1f IPAMBlock writes/s (%.0f bytes a block), wall time %s\n", nodes, writes,
		float64(blockBytes.Load())/float64(nodes), time.Since(wall0).Round(time.Second))
	fmt.Printf("| %-62s | %14s | %16s | %18s |\n", "what, per second", "requests or events/s", "bytes sent/s", "kube-apiserver CPU cores")
	fmt.Printf("| %-62s | %14.1f | %16s | %18.3f |\n", "kubelets' Node status patches (one a node every 5 min)", kubelet.requests, "—", kubelet.apiServerCPU)
	fmt.Printf("| %-62s | %14.1f | %16s | %18.3f |\n", "the IPAMBlock writes themselves, no watcher", writes, "—", base.apiServerCPU/base.wall.Seconds())
	for _, r := range rows {
		fmt.Printf("| %-62s | %14.0f | %16.0f | %18.3f |\n", fmt.Sprintf("%d block watches for the cluster, measured", r.watchers), r.events, r.bytes, r.cpu)
	}
	if len(rows) > 0 && extrapolate {
		last := rows[len(rows)-1]
		f := float64(nodes) / float64(last.watchers)
		fmt.Printf("| %-62s | %14.0f | %16.0f | %18.1f |\n", fmt.Sprintf("%d per-node block watches (former design), %d's × %.1f", nodes, last.watchers, f), last.events*f, last.bytes*f, last.cpu*f)
	}
	for _, r := range eventRows {
		fmt.Printf("| %-62s | %14s | %16.0f | %18.3f |\n", r.name, r.requests, r.bytes, r.cpu)
	}
	fmt.Printf("load after: %s\n", uptime())
}

// perSecond is a cost a second.
type perSecond struct{ requests, apiServerCPU float64 }

// withCounter is cfg without client-side rate limit, its requests counted
// by c.
func withCounter(cfg *rest.Config, c *counter) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.WrapTransport = c.wrap
	return cfg
}

// watchAll starts n watches of a cluster-scoped resource, each from the
// resource version of a list, as an informer's, each on a connection of
// its own as each agent's is, and counts the events and bytes the API
// server sends them. stop ends them.
func watchAll(t testing.TB, ctx context.Context, cfg *rest.Config, group, version, resource string, n int) (events, bytes *atomic.Int64, stop func()) {
	events, bytes = &atomic.Int64{}, &atomic.Int64{}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	listC := dynamic.NewForConfigOrDie(cfg)
	l, err := listC.Resource(calicoipam.IPAMBlocks).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	rv := l.GetResourceVersion()
	url := fmt.Sprintf("/apis/%s/%s/%s?watch=1&allowWatchBookmarks=true&resourceVersion=%s", group, version, resource, rv)
	var started sync.WaitGroup
	for range n {
		c := rest.CopyConfig(cfg)
		c.QPS, c.Burst = -1, 0
		hc, err := rest.HTTPClientFor(c) // a transport, so a connection, of its own
		if err != nil {
			t.Fatal(err)
		}
		started.Add(1)
		wg.Go(func() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(c.Host, "/")+url, nil)
			resp, err := hc.Do(req)
			started.Done()
			if err != nil {
				if ctx.Err() == nil {
					t.Error(err)
				}
				return
			}
			defer resp.Body.Close()
			r := bufio.NewReaderSize(resp.Body, 64<<10)
			for {
				line, err := r.ReadSlice('\n')
				bytes.Add(int64(len(line)))
				if err == bufio.ErrBufferFull {
					continue
				}
				if err != nil {
					return
				}
				events.Add(1)
			}
		})
	}
	started.Wait()
	return events, bytes, func() { cancel(); wg.Wait() }
}

// eventRow is one line of the Event informer's table.
type eventRow struct {
	name, requests string
	bytes, cpu     float64
}

// measureEventInformer fills etcd with storedEvents Events, then, under
// otherEventsPerSecond Events of other reasons and starvedEventWrites a
// second of the kubelets' FailedCreatePodSandBox Events, measures the API
// server with no informer and with the descheduler's: one List and one
// Watch with relievenodepressure.SandboxFailuresSelector.
func measureEventInformer(t testing.TB, ctx context.Context, cfg *rest.Config, m *meter, admin kubernetes.Interface, nodes int, stretch time.Duration) []eventRow {
	ev := func(i int, starved bool) *corev1.Event {
		node := fmt.Sprintf("node-%05d", i%nodes)
		pod := fmt.Sprintf("%s-pod-%d", node, i)
		e := &corev1.Event{
			ObjectMeta:          metav1.ObjectMeta{GenerateName: pod + ".", Namespace: fmt.Sprintf("tenant-%d", i%20)},
			InvolvedObject:      corev1.ObjectReference{Kind: "Pod", Namespace: fmt.Sprintf("tenant-%d", i%20), Name: pod, UID: "0b3d7c1e-5f2a-4e8b-9c6d-1a2b3c4d5e6f", APIVersion: "v1"},
			Reason:              "Pulled",
			Message:             `Container image "registry.example/app:v1" already present on machine and can be accessed by the pod`,
			Source:              corev1.EventSource{Component: ipstarved.Kubelet, Host: node},
			FirstTimestamp:      metav1.Now(),
			LastTimestamp:       metav1.Now(),
			Count:               1,
			Type:                corev1.EventTypeNormal,
			ReportingController: ipstarved.Kubelet,
			ReportingInstance:   node,
		}
		if starved {
			e.Reason, e.Type = ipstarved.ReasonFailedCreatePodSandBox, corev1.EventTypeWarning
			e.Message = `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to setup network for sandbox "0123456789abcdef": plugin type="calico" failed (add): failed to request IPv4 addresses: Assigned 0 out of 1 requested IPv4 addresses; no more free affine blocks and strict affinity enabled`
		}
		return e
	}
	for i := range 20 {
		_, _ = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("tenant-%d", i)}}, metav1.CreateOptions{})
	}
	t0 := time.Now()
	parallel(storedEvents, 32, func(i int) {
		if _, err := admin.CoreV1().Events(fmt.Sprintf("tenant-%d", i%20)).Create(ctx, ev(i, i%10 == 0), metav1.CreateOptions{}); err != nil {
			t.Error(err)
		}
	})
	t.Logf("%d Events stored in %s", storedEvents, time.Since(t0).Round(time.Second))

	var writeC counter
	writer := client(t, cfg, "application/vnd.kubernetes.protobuf", &writeC)
	var n atomic.Int64
	churn := func(d time.Duration) {
		per := time.Second / (otherEventsPerSecond + starvedEventWrites)
		tick := time.NewTicker(per)
		defer tick.Stop()
		var wg sync.WaitGroup
		for end := time.Now().Add(d); time.Now().Before(end); <-tick.C {
			i := int(n.Add(1))
			wg.Go(func() {
				starved := i%(otherEventsPerSecond+starvedEventWrites) < starvedEventWrites
				e := ev(i, starved)
				_, _ = writer.CoreV1().Events(e.Namespace).Create(ctx, e, metav1.CreateOptions{})
			})
		}
		wg.Wait()
	}
	m.c = []*counter{&writeC}
	m.start()
	churn(stretch)
	base := m.stop()
	t.Logf("Events alone: %d writes, kube-apiserver %.2f s CPU", base.requests, base.apiServerCPU)

	// The descheduler's informer, as the plugin builds it: the List's cost
	// apart, then the Watch's under the same churn.
	var ct countingTransport
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst = -1, 0
	c.ContentType = "application/vnd.kubernetes.protobuf"
	c.WrapTransport = ct.wrap
	cs := kubernetes.NewForConfigOrDie(c)
	factory := informers.NewSharedInformerFactoryWithOptions(cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = relievenodepressure.SandboxFailuresSelector }))
	inf := factory.Core().V1().Events().Informer()
	ictx, stop := context.WithCancel(ctx)
	defer stop()
	var none counter
	m.c = []*counter{&none}
	m.start()
	factory.Start(ictx.Done())
	factory.WaitForCacheSync(ictx.Done())
	list := m.stop()
	listBytes := ct.bytes.Load()
	t.Logf("informer's first List: %d requests, %d bytes, %d Events cached, kube-apiserver %.2f s CPU, %s", ct.requests.Load(), listBytes, len(inf.GetStore().List()), list.apiServerCPU, list.wall.Round(time.Millisecond))
	r0, b0 := ct.requests.Load(), ct.bytes.Load()
	m.c = []*counter{&writeC}
	m.start()
	churn(stretch)
	r := m.stop()
	secs := r.wall.Seconds()
	net := max(0, r.apiServerCPU-base.apiServerCPU*secs/base.wall.Seconds())
	t.Logf("with the informer: %d Event writes, %d informer requests, %d bytes to it, kube-apiserver %.2f s CPU (%.2f net)", r.requests, ct.requests.Load()-r0, ct.bytes.Load()-b0, r.apiServerCPU, net)
	return []eventRow{
		{name: fmt.Sprintf("the Event writes themselves (%d + %d a second)", otherEventsPerSecond, starvedEventWrites), requests: fmt.Sprintf("%.1f", float64(base.requests)/base.wall.Seconds()), cpu: base.apiServerCPU / base.wall.Seconds()},
		{name: fmt.Sprintf("descheduler's Event informer: its List, once (%d Events stored)", storedEvents), requests: "1 a start", bytes: float64(listBytes), cpu: list.apiServerCPU},
		{name: "descheduler's Event informer: its Watch", requests: fmt.Sprintf("%.3f", float64(ct.requests.Load()-r0)/secs), bytes: float64(ct.bytes.Load()-b0) / secs, cpu: net / secs},
	}
}

// uptime is the machine's load, as uptime prints it.
func uptime() string {
	out, _ := exec.Command("uptime").Output()
	return string(bytes.TrimSpace(out)) + "\n"
}
