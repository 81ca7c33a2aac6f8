// Package cilium tests Headroom's node agent on Cilium nodes: Cilium's own
// CiliumNode CRD (the YAML that ships inside Cilium's Go module) in a real
// kube-apiserver, CiliumNode objects made with Cilium's Go types and
// written through Cilium's clientset as its operator and agent write them,
// and the figures compared with what Cilium's IPAM code counts.
package cilium

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/cilium/pkg/ip"
	"github.com/cilium/cilium/pkg/ipam/service/ipallocator"
	ipamtypes "github.com/cilium/cilium/pkg/ipam/types"
	crdsv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/client/crds/v2"
	ciliumv2 "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/v2"
	ciliumclient "github.com/cilium/cilium/pkg/k8s/client/clientset/versioned"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/pkg/ciliumipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/nodeagent"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// ciliumConflist is the network configuration the Cilium agent writes
// (05-cilium.conflist) with its defaults: the cilium-cni plugin, which asks
// the agent for addresses and has no IPAM section.
const ciliumConflist = `{
  "cniVersion": "0.3.1",
  "name": "cilium",
  "plugins": [
    {
      "type": "cilium-cni",
      "enable-debug": false,
      "log-file": "/var/run/cilium/cilium-cni.log"
    }
  ]
}`

type env struct {
	t       *testing.T
	ctx     context.Context
	cp      *controlplane.ControlPlane
	cilium  ciliumclient.Interface
	dynamic dynamic.Interface
	confDir string
}

// start runs a kube-apiserver with Cilium's CiliumNode CRD installed.
func start(t *testing.T) *env { return startWith(t, controlplane.Options{}) }

// startWith is start with the control plane's options (kwok, for one).
func startWith(t *testing.T, opts controlplane.Options) *env {
	cp := controlplane.StartForTest(t, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e := &env{t: t, ctx: ctx, cp: cp, confDir: t.TempDir()}
	var err error
	if e.cilium, err = ciliumclient.NewForConfig(cp.Config); err != nil {
		t.Fatal(err)
	}
	if e.dynamic, err = dynamic.NewForConfig(cp.Config); err != nil {
		t.Fatal(err)
	}
	raw, err := crdsv2.EmbedFS.ReadFile("ciliumnodes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
		t.Fatalf("Cilium's ciliumnodes.yaml: %v", err)
	}
	ext := apiextensionsclient.NewForConfigOrDie(cp.Config)
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				_, err := e.cilium.CiliumV2().CiliumNodes().List(ctx, metav1.ListOptions{})
				return err == nil, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the CiliumNode CRD is not served: %v", err)
	}
	if err := os.WriteFile(filepath.Join(e.confDir, "05-cilium.conflist"), []byte(ciliumConflist), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// ciliumNode writes cn as Cilium does: the operator creates the object
// with its spec, the agent writes its status through the status
// subresource.
func (e *env) ciliumNode(cn *ciliumv2.CiliumNode) {
	e.t.Helper()
	status := cn.Status
	created, err := e.cilium.CiliumV2().CiliumNodes().Create(e.ctx, cn, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatalf("creating CiliumNode %s: %v", cn.Name, err)
	}
	created.Status = status
	if _, err := e.cilium.CiliumV2().CiliumNodes().UpdateStatus(e.ctx, created, metav1.UpdateOptions{}); err != nil {
		e.t.Fatalf("writing CiliumNode %s's status: %v", cn.Name, err)
	}
}

// agentConfig is the node agent's configuration for the node of that
// name, whose Node it creates, with the network of confDir.
func (e *env) agentConfig(name, confDir string) nodeagent.Config {
	e.t.Helper()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := e.cp.Client.CoreV1().Nodes().Create(e.ctx, node, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
	cfg := nodeagent.DefaultConfig()
	cfg.NodeName = name
	cfg.CNIConfDir = confDir
	cfg.ContainerRuntimeEndpoint = ""
	cfg.CgroupRoot = e.t.TempDir()
	if err := os.MkdirAll(filepath.Join(cfg.CgroupRoot, "kubepods"), 0o755); err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

// runAgent runs the node agent once (--once) on the node of that name and
// returns the node's annotations afterwards.
func (e *env) runAgent(name string) map[string]string {
	e.t.Helper()
	agent, err := nodeagent.New(e.cp.Client, e.agentConfig(name, e.confDir), nodeagent.WithDynamicClient(e.dynamic))
	if err != nil {
		e.t.Fatal(err)
	}
	if err := agent.Once(e.ctx); err != nil {
		e.t.Fatalf("node agent --once on %s: %v", name, err)
	}
	return e.annotations(name)
}

func (e *env) annotations(name string) map[string]string {
	e.t.Helper()
	got, err := e.cp.Client.CoreV1().Nodes().Get(e.ctx, name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	return got.Annotations
}

func (e *env) wantFigures(a map[string]string, capacity, used int64) {
	e.t.Helper()
	s, err := ipstats.ParseNode(a, time.Now(), time.Minute)
	if err != nil {
		e.t.Fatalf("the agent's pod-IP annotations %v: %v", a, err)
	}
	if s.Capacity != capacity || s.Used != used {
		e.t.Fatalf("the agent published capacity %d, used %d (free %d); Cilium's IPAM says capacity %d, used %d (free %d)",
			s.Capacity, s.Used, s.Free(), capacity, used, capacity-used)
	}
	if _, ok := a[ipstats.AnnotationLeaked]; ok {
		e.t.Fatalf("a leak count on a Cilium node: %v", a)
	}
}

// hostScopeFree is what Cilium's agent counts free in cluster-pool and
// kubernetes modes: its host-scope allocator is an ipallocator CIDR range
// of the node's allocation CIDR, the first pod CIDR of the family, with
// each address in use allocated from it.
func hostScopeFree(t *testing.T, cidrs []string, used []string) (capacity, free int64) {
	t.Helper()
	for _, c := range cidrs[:1] {
		r := ipallocator.NewCIDRRange(netip.MustParsePrefix(c))
		capacity += int64(r.Free())
		for _, u := range used {
			a := netip.MustParseAddr(u)
			if r.CIDR().Contains(a) {
				if err := r.Allocate(a); err != nil {
					t.Fatalf("Cilium's allocator refuses %s of %s: %v", a, c, err)
				}
			}
		}
		free += int64(r.Free())
	}
	return capacity, free
}

func owners(prefix string, ips ...string) ipamtypes.AllocationMap {
	m := ipamtypes.AllocationMap{}
	for i, a := range ips {
		owner := fmt.Sprintf("%s/pod-%d", prefix, i)
		if i == 0 {
			owner = "router" // cilium_host
		}
		m[a] = ipamtypes.AllocationIP{Owner: owner}
	}
	return m
}

func prefixes(cidrs ...string) []ip.Prefix {
	var out []ip.Prefix
	for _, c := range cidrs {
		out = append(out, ip.PrefixFrom(netip.MustParsePrefix(c)))
	}
	return out
}

// TestCiliumPoolMode: in the crd, azure and alibabacloud modes the operator
// gives the node a pool of addresses (spec.ipam.pool, each with the
// interface it sits on) and the agent lists those it handed out
// (status.ipam.used). The operator counts AvailableIPs = len(pool) and
// UsedIPs = len(used); the agent's figures are those.
func TestCiliumPoolMode(t *testing.T) {
	e := start(t)
	pool := ipamtypes.AllocationMap{}
	for i := 4; i < 34; i++ { // 30 secondary addresses on two interfaces
		pool[fmt.Sprintf("10.10.1.%d", i)] = ipamtypes.AllocationIP{Resource: "nic-" + strconv.Itoa(i%2)}
	}
	used := owners("default", "10.10.1.4", "10.10.1.5", "10.10.1.6", "10.10.1.7", "10.10.1.8", "10.10.1.9", "10.10.1.10")
	cn := &ciliumv2.CiliumNode{ObjectMeta: metav1.ObjectMeta{Name: "azure-node"}}
	cn.Spec.InstanceID = "vm-0"
	cn.Spec.IPAM.Pool = pool
	cn.Spec.IPAM.PreAllocate = 8
	cn.Status.IPAM.Used = used
	e.ciliumNode(cn)
	a := e.runAgent("azure-node")
	e.wantFigures(a, int64(len(pool)), int64(len(used)))
	t.Logf("pool mode: %s of %s used", a[ipstats.AnnotationUsed], a[ipstats.AnnotationCapacity])
}

// TestCiliumPodCIDRs: pod CIDRs with the addresses in use listed, for one
// family and for two (the family with the fewest free is published); the
// figures equal Cilium's host-scope allocator's.
func TestCiliumPodCIDRs(t *testing.T) {
	e := start(t)
	for _, tc := range []struct {
		name          string
		v4, v6        []string // pod CIDRs per family
		usedV4, used6 []string
	}{
		{name: "ipv4", v4: []string{"10.0.1.0/24"}, usedV4: []string{"10.0.1.1", "10.0.1.17", "10.0.1.200"}},
		{name: "two-cidrs", v4: []string{"10.0.2.0/26", "10.0.3.0/27"}, usedV4: []string{"10.0.2.1", "10.0.2.9", "10.0.2.62"}},
		{name: "dual-stack", v4: []string{"10.0.4.0/28"}, v6: []string{"fd00:4::/120"},
			usedV4: []string{"10.0.4.1", "10.0.4.2", "10.0.4.3"}, used6: []string{"fd00:4::1", "fd00:4::2", "fd00:4::3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.t = t
			cn := &ciliumv2.CiliumNode{ObjectMeta: metav1.ObjectMeta{Name: tc.name}}
			cn.Spec.IPAM.PodCIDRs = prefixes(append(slices.Clone(tc.v4), tc.v6...)...)
			cn.Status.IPAM.Used = owners("default", append(slices.Clone(tc.usedV4), tc.used6...)...)
			e.ciliumNode(cn)
			capacity, free := hostScopeFree(t, tc.v4, tc.usedV4)
			if len(tc.v6) > 0 {
				if c6, f6 := hostScopeFree(t, tc.v6, tc.used6); f6 < free {
					capacity, free = c6, f6
				}
			}
			a := e.runAgent(tc.name)
			e.wantFigures(a, capacity, capacity-free)
			t.Logf("%s: %s of %s used; Cilium's allocator: %d free", tc.name, a[ipstats.AnnotationUsed], a[ipstats.AnnotationCapacity], free)
		})
	}
}

// TestCiliumClusterPoolUnknown: a CiliumNode as Cilium v1.20 writes it in
// cluster-pool mode — pod CIDRs from the operator, their state from the
// agent, no list of addresses in use, which the agent keeps to itself — and
// one in multi-pool mode give no pod-IP figures: unknown, not a guess.
func TestCiliumClusterPoolUnknown(t *testing.T) {
	e := start(t)
	cn := &ciliumv2.CiliumNode{ObjectMeta: metav1.ObjectMeta{Name: "cluster-pool"}}
	cn.Spec.IPAM.PodCIDRs = prefixes("10.0.9.0/24")
	cn.Status.IPAM.PodCIDRs = ipamtypes.PodCIDRMap{"10.0.9.0/24": {Status: ipamtypes.PodCIDRStatusInUse}}
	e.ciliumNode(cn)
	mp := &ciliumv2.CiliumNode{ObjectMeta: metav1.ObjectMeta{Name: "multi-pool"}}
	mp.Spec.IPAM.Pools.Allocated = []ipamtypes.IPAMPoolAllocation{{Pool: "default", CIDRs: prefixes("10.0.10.0/27")}}
	mp.Spec.IPAM.Pools.Requested = []ipamtypes.IPAMPoolRequest{{Pool: "default", Needed: ipamtypes.IPAMPoolDemand{IPv4Addrs: 16}}}
	e.ciliumNode(mp)
	for _, name := range []string{"cluster-pool", "multi-pool", "no-ciliumnode"} {
		a := e.runAgent(name)
		for _, k := range []string{ipstats.AnnotationCapacity, ipstats.AnnotationUsed, ipstats.AnnotationSampledAt, ipstats.AnnotationLeaked} {
			if v, ok := a[k]; ok {
				t.Errorf("%s: %s=%s, want no pod-IP figures", name, k, v)
			}
		}
	}
	// The object as the API server returns it, with Cilium's schema's
	// defaults, is read as unstructured where Headroom looks.
	got, err := e.dynamic.Resource(ciliumipam.CiliumNodes).Get(e.ctx, "cluster-pool", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cidrs, _, err := unstructured.NestedStringSlice(got.Object, "spec", "ipam", "podCIDRs"); err != nil || !slices.Equal(cidrs, []string{"10.0.9.0/24"}) {
		t.Fatalf("spec.ipam.podCIDRs as served: %v, %v", cidrs, err)
	}
	if _, err := ciliumipam.FromObject(got.Object); !errors.Is(err, ciliumipam.ErrUnsupported) {
		t.Fatalf("FromObject: %v, want unsupported", err)
	}
}
