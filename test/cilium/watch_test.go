package cilium

import (
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	ipamtypes "github.com/cilium/cilium/pkg/ipam/types"
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/headroom-k8s/headroom/pkg/ciliumipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/nodeagent"
)

// ciliumNodeRequests counts a client's requests for CiliumNodes by verb,
// as the API server's authorizer names them (get, list, watch, …), with
// the field selectors of its lists and watches and the watches still open.
type ciliumNodeRequests struct {
	next http.RoundTripper

	mu        sync.Mutex
	verbs     map[string]int
	selectors map[string]bool
	open      int
}

// countingDynamicClient is a dynamic client on cfg whose requests for
// CiliumNodes are counted.
func countingDynamicClient(t *testing.T, cfg *rest.Config) (dynamic.Interface, *ciliumNodeRequests) {
	t.Helper()
	requests := &ciliumNodeRequests{verbs: map[string]int{}, selectors: map[string]bool{}}
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		requests.next = rt
		return requests
	})
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client, requests
}

func (c *ciliumNodeRequests) RoundTrip(req *http.Request) (*http.Response, error) {
	collection := "/" + ciliumipam.CiliumNodes.Resource
	if !strings.Contains(req.URL.Path, collection) {
		return c.next.RoundTrip(req)
	}
	verb := strings.ToLower(req.Method)
	query := req.URL.Query()
	if req.Method == http.MethodGet {
		switch {
		case query.Get("watch") == "true" || query.Get("watch") == "1":
			verb = "watch"
		case strings.HasSuffix(req.URL.Path, collection):
			verb = "list"
		}
	}
	c.mu.Lock()
	c.verbs[verb]++
	if verb == "list" || verb == "watch" {
		c.selectors[query.Get("fieldSelector")] = true
	}
	c.mu.Unlock()
	resp, err := c.next.RoundTrip(req)
	if verb == "watch" && err == nil {
		c.mu.Lock()
		c.open++
		c.mu.Unlock()
		var once sync.Once
		resp.Body = &closeHook{ReadCloser: resp.Body, closed: func() {
			once.Do(func() {
				c.mu.Lock()
				c.open--
				c.mu.Unlock()
			})
		}}
	}
	return resp, err
}

// closeHook calls closed when the body is closed.
type closeHook struct {
	io.ReadCloser
	closed func()
}

func (h *closeHook) Close() error {
	h.closed()
	return h.ReadCloser.Close()
}

// counts returns the requests so far by verb and the watches open.
func (c *ciliumNodeRequests) counts() (map[string]int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.verbs), c.open
}

func (c *ciliumNodeRequests) fieldSelectors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for s := range c.selectors {
		out = append(out, s)
	}
	return out
}

// poolNode is a CiliumNode in pool mode with size addresses, the first
// used of them in use.
func poolNode(name string, size, used int) *ciliumv2.CiliumNode {
	cn := &ciliumv2.CiliumNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	cn.Spec.IPAM.Pool = poolOf(size)
	cn.Status.IPAM.Used = usedOf(used)
	return cn
}

func poolOf(size int) ipamtypes.AllocationMap {
	pool := ipamtypes.AllocationMap{}
	for i := range size {
		pool[fmt.Sprintf("10.20.0.%d", 10+i)] = ipamtypes.AllocationIP{Resource: "nic-0"}
	}
	return pool
}

func usedOf(n int) ipamtypes.AllocationMap {
	var ips []string
	for i := range n {
		ips = append(ips, fmt.Sprintf("10.20.0.%d", 10+i))
	}
	return owners("default", ips...)
}

// figures are the pod-IP figures the node carries; ok is false without.
func figures(a map[string]string) (capacity, used int64, ok bool) {
	s, err := ipstats.ParseNode(a, time.Now(), time.Hour)
	if err != nil {
		return 0, 0, false
	}
	return s.Capacity, s.Used, true
}

// tickUntil ticks the agent until its node carries those figures.
func (e *env) tickUntil(agent *nodeagent.Agent, name string, capacity, used int64) {
	e.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := agent.Tick(e.ctx); err != nil {
			e.t.Logf("tick: %v", err)
		}
		c, u, ok := figures(e.annotations(name))
		if ok && c == capacity && u == used {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("the node carries capacity %d, used %d (figures: %v); want %d of %d used", c, u, ok, used, capacity)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const hostLocalConflist = `{
  "cniVersion": "1.0.0",
  "name": "pods",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.85.0.0/28"}]], "dataDir": %q}
    }
  ]
}`

// writeHostLocal makes the network of confDir a host-local one that sorts
// before Cilium's (00-pods.conflist) and returns its file.
func writeHostLocal(t *testing.T, confDir string) string {
	t.Helper()
	file := filepath.Join(confDir, "00-pods.conflist")
	if err := os.WriteFile(file, fmt.Appendf(nil, hostLocalConflist, t.TempDir()), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestCiliumNodeWatched: on a Cilium node the agent keeps its CiliumNode
// by a list and watch of that one name, and its figures follow the
// object's changes, which Cilium's operator (spec) and agent (status)
// write, through that watch. Many ticks add no request: one list and one
// watch in all (or one watch that lists, client-go's WatchList), no GET.
// A tick that finds another network ends the watch; one that finds
// Cilium's again starts a new one.
func TestCiliumNodeWatched(t *testing.T) {
	e := start(t)
	const name = "watched"
	e.ciliumNode(poolNode(name, 30, 3))
	cfg := e.agentConfig(name, e.confDir)
	cfg.IPHysteresisPercent = 0 // every change of use is written
	client, requests := countingDynamicClient(t, e.cp.Config)
	agent, err := nodeagent.New(e.cp.Client, cfg, nodeagent.WithDynamicClient(client))
	if err != nil {
		t.Fatal(err)
	}
	e.tickUntil(agent, name, 30, 3)

	// The Cilium agent hands out two more addresses; the operator grows
	// the pool.
	cn, err := e.cilium.CiliumV2().CiliumNodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cn.Status.IPAM.Used = usedOf(5)
	if cn, err = e.cilium.CiliumV2().CiliumNodes().UpdateStatus(e.ctx, cn, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.tickUntil(agent, name, 30, 5)
	cn.Spec.IPAM.Pool = poolOf(40)
	if _, err = e.cilium.CiliumV2().CiliumNodes().Update(e.ctx, cn, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.tickUntil(agent, name, 40, 5)

	const ticks = 200
	before, _ := requests.counts()
	for range ticks {
		if err := agent.Tick(e.ctx); err != nil {
			t.Logf("tick: %v", err)
		}
	}
	after, open := requests.counts()
	t.Logf("requests for CiliumNodes after three changes and %d more ticks: %v, %d watch open", ticks, after, open)
	if !maps.Equal(before, after) {
		t.Errorf("%d ticks made requests for CiliumNodes: %v before, %v after", ticks, before, after)
	}
	if after["get"] != 0 || len(after) > 2 || after["list"] > 1 || after["watch"] != 1 || open != 1 {
		t.Errorf("requests for CiliumNodes %v, %d watch open; want at most one list, one watch and no other", after, open)
	}
	if got, want := requests.fieldSelectors(), "metadata.name="+name; len(got) != 1 || got[0] != want {
		t.Errorf("lists and watches with field selectors %q, want %q only", got, want)
	}

	// Another network: the watch ends, and no request follows.
	hostLocal := writeHostLocal(t, e.confDir)
	if err := agent.Tick(e.ctx); err != nil {
		t.Fatal(err)
	}
	stopped, open := requests.counts()
	if open != 0 {
		t.Fatalf("%d watches of CiliumNodes open on a host-local network", open)
	}
	for range 20 {
		if err := agent.Tick(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if now, _ := requests.counts(); !maps.Equal(stopped, now) {
		t.Errorf("ticks on a host-local network made requests for CiliumNodes: %v before, %v after", stopped, now)
	}

	// Cilium's again, after a change made while nobody watched.
	cn, err = e.cilium.CiliumV2().CiliumNodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cn.Status.IPAM.Used = usedOf(7)
	if _, err = e.cilium.CiliumV2().CiliumNodes().UpdateStatus(e.ctx, cn, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(hostLocal); err != nil {
		t.Fatal(err)
	}
	e.tickUntil(agent, name, 40, 7)
	if restarted, open := requests.counts(); restarted["watch"] != stopped["watch"]+1 || restarted["get"] != 0 || open != 1 {
		t.Errorf("requests for CiliumNodes after the network became Cilium's again: %v, %d watch open; want a second watch", restarted, open)
	}
}

// TestCiliumNodeNotReadOffCilium: where the network is not Cilium's, the
// agent makes no request for CiliumNodes at all, ticking or --once.
func TestCiliumNodeNotReadOffCilium(t *testing.T) {
	e := start(t)
	const name = "host-local"
	e.ciliumNode(poolNode(name, 30, 3)) // there, but not this node's IPAM
	confDir := t.TempDir()
	writeHostLocal(t, confDir)
	client, requests := countingDynamicClient(t, e.cp.Config)
	agent, err := nodeagent.New(e.cp.Client, e.agentConfig(name, confDir), nodeagent.WithDynamicClient(client))
	if err != nil {
		t.Fatal(err)
	}
	if err := agent.Once(e.ctx); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		if err := agent.Tick(e.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if c, u, ok := figures(e.annotations(name)); !ok || c != 13 || u != 0 {
		t.Fatalf("host-local figures %d of %d used (present: %v), want 0 of 13", u, c, ok)
	}
	if got, open := requests.counts(); len(got) != 0 || open != 0 {
		t.Fatalf("requests for CiliumNodes on a host-local node: %v, %d watches open", got, open)
	}
}
