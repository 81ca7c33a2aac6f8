package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/pkg/azureipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// awsConflist is the AWS VPC CNI's network configuration as its
// aws-node DaemonSet writes it (misc/10-aws.conflist, placeholders filled):
// aws-cni asks ipamd; egress-cni's host-local range is its own.
const awsConflist = `{"cniVersion": "0.4.0", "name": "aws-cni", "disableCheck": true, "plugins": [
  {"name": "aws-cni", "type": "aws-cni", "vethPrefix": "eni", "mtu": "9001", "podSGEnforcingMode": "strict",
   "pluginLogFile": "/var/log/aws-routed-eni/plugin.log", "pluginLogLevel": "DEBUG", "capabilities": {"io.kubernetes.cri.pod-annotations": true}},
  {"name": "egress-cni", "type": "egress-cni", "mtu": "9001", "enabled": "false", "randomizeSNAT": "prng", "nodeIP": "",
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "fd00::ac:00/118"}]], "routes": [{"dst": "::/0"}], "dataDir": "/run/cni/v4pd/egress-v6-ipam"},
   "pluginLogFile": "/var/log/aws-routed-eni/egress-v6-plugin.log", "pluginLogLevel": "DEBUG"},
  {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}]}`

// azureConflist is Azure CNI's with dynamic pod IP allocation (IPAM by
// CNS).
const azureConflist = `{"cniVersion": "0.3.0", "name": "azure", "plugins": [
  {"type": "azure-vnet", "mode": "transparent", "ipsToRouteViaHost": ["169.254.20.10"], "executionMode": "v4swift", "ipam": {"mode": "v4overlay", "type": "azure-cns"}},
  {"type": "portmap", "capabilities": {"portMappings": true}, "snat": true}]}`

func cniConfDir(t *testing.T, name, conflist string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(conflist), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// fakeIPAMD serves ipamd's /v1/enis and /metrics answers from
// pkg/awsipam/testdata (made by test/awsipamd from ipamd's datastore and
// metrics registry).
func fakeIPAMD(t *testing.T, enis, metrics string) string {
	t.Helper()
	mux := http.NewServeMux()
	for path, file := range map[string]string{"/v1/enis": enis, "/metrics": metrics} {
		b := repoFile(t, "pkg/awsipam/testdata/"+file)
		mux.HandleFunc(path, func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(b) })
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// cloudIPAMCluster is a control plane with the shipped node agent's
// manifests, nodes node-a and node-b, and headroom-scheduler.
type cloudIPAMCluster struct {
	cp         *controlplane.ControlPlane
	kubeconfig map[string]string
	cgroupRoot string
}

func startCloudIPAMCluster(ctx context.Context, t *testing.T) *cloudIPAMCluster {
	t.Helper()
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	applyManifests(ctx, t, cp, "namespace", "node-agent")
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := cp.CreateNode(ctx, n, resources("16", "64Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}
	c := &cloudIPAMCluster{cp: cp, kubeconfig: map[string]string{}, cgroupRoot: t.TempDir()}
	if err := os.MkdirAll(filepath.Join(c.cgroupRoot, "pids", "kubepods", "burstable"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node-a", "node-b"} {
		c.kubeconfig[n] = serviceAccountKubeconfig(ctx, t, cp, "headroom-system", "headroom-node-agent", agentPod(ctx, t, cp.Client, n))
	}
	return c
}

// agentArgs are the flags of the node's agent as the DaemonSet's pod
// runs it, with args added.
func (c *cloudIPAMCluster) agentArgs(node string, args ...string) []string {
	return append([]string{"--node-name=" + node, "--kubeconfig=" + c.kubeconfig[node], "--cgroup-root=" + c.cgroupRoot}, args...)
}

// report runs the agent once for node and returns the pod-IP figures it
// published.
func (c *cloudIPAMCluster) report(ctx context.Context, t *testing.T, node string, args ...string) ipstats.NodeStats {
	t.Helper()
	p, err := c.cp.StartProcessAs("node-agent-once-"+node, "headroom-node-agent", append(c.agentArgs(node, args...), "--once")...)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(time.Minute); err != nil {
		t.Fatalf("headroom-node-agent --once for %s: %v\n%s", node, err, p.Log(4<<10))
	}
	n, err := c.cp.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := ipstats.ParseNode(n.Annotations, time.Now(), 0)
	if err != nil {
		t.Fatalf("%s's pod-IP annotations: %v (%v)\n%s", node, err, n.Annotations, p.Log(4<<10))
	}
	return s
}

// fillNodeB places pods, each preferring node-a by affinity, until node-b
// has no free pod IP by NodeIPs' estimate (free of them), checking that
// none goes to node-a; the next pod fits nowhere.
func (c *cloudIPAMCluster) fillNodeB(ctx context.Context, t *testing.T, free int64) {
	t.Helper()
	if _, err := c.cp.StartScheduler(ctx, repoFile(t, "manifests/scheduler/scheduler-config.yaml")); err != nil {
		t.Fatal(err)
	}
	preferA := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-a"},
			}}},
		}},
	}}
	create := func(name string) {
		t.Helper()
		p := newPod(name, "headroom-scheduler", nil, nil, nil)
		p.Spec.Affinity = preferA
		if _, err := c.cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range free {
		name := fmt.Sprintf("p%02d", i)
		create(name)
		if node := waitBound(ctx, t, c.cp.Client, metav1.NamespaceDefault, name); node != "node-b" {
			t.Fatalf("%s bound to %s, which has no free pod IP; want node-b", name, node)
		}
	}
	create("stuck")
	cond := waitUnschedulable(ctx, t, c.cp.Client, metav1.NamespaceDefault, "stuck", "but no node has a free pod IP")
	if want := "2 " + nodeips.ErrReasonNoFreeIPs; !strings.Contains(cond.Message, want) {
		t.Errorf("PodScheduled condition %q, want it to contain %q", cond.Message, want)
	}
}

// TestNodeIPsWithAWSVPCCNI: the real headroom-node-agent (--once, its
// pod-bound token, the shipped manifests) reads ipamd's answers, made by
// ipamd's own datastore and metrics (test/awsipamd), on two m5.large
// nodes: A's 3 ENIs of 9 addresses are all assigned (27 of 27: it can
// attach no more ENIs); B holds 12 addresses of which 3 are assigned, and
// ipamd met InsufficientFreeAddressesInSubnet: its pool cannot grow past
// the 12 (not the 27 it could reach). headroom-scheduler keeps every pod
// off A, though each prefers A, and places 9 on B; the 10th fits nowhere.
// Then the agent, run continuously for B, sees 9 pods with addresses on B
// where ipamd's answer (unchanged, so stale) says 3: the cross-check
// reports it with a Warning Event on the Node and publishes the pods'
// count, 9 of 12.
func TestNodeIPsWithAWSVPCCNI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := startCloudIPAMCluster(ctx, t)
	conf := cniConfDir(t, "10-aws.conflist", awsConflist)
	ipamdA := fakeIPAMD(t, "enis-full.json", "ipamd-metrics.txt")
	ipamdB := fakeIPAMD(t, "enis-secondary-ips.json", "ipamd-metrics-subnet-full.txt")
	aws := func(addr string) []string {
		return []string{"--cni-conf-dir=" + conf, "--aws-ipamd-introspection-address=" + addr, "--aws-ipamd-metrics-address=" + addr}
	}
	if s := c.report(ctx, t, "node-a", aws(ipamdA)...); s.Capacity != 27 || s.Used != 27 {
		t.Fatalf("node-a: capacity %d, used %d; want 27 and 27", s.Capacity, s.Used)
	}
	if s := c.report(ctx, t, "node-b", aws(ipamdB)...); s.Capacity != 12 || s.Used != 3 {
		t.Fatalf("node-b: capacity %d, used %d; want 12 (the subnet is exhausted) and 3", s.Capacity, s.Used)
	}
	c.fillNodeB(ctx, t, 9)

	// kwok gives B's 9 pods addresses; ipamd's answer still says 3, which
	// the agent, run continuously now, would publish: the pending pod goes
	// (NodeIPs counts the pods placed before a sample as in it).
	if err := c.cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Delete(ctx, "stuck", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	agent, err := c.cp.StartProcessAs("node-agent-b", "headroom-node-agent",
		c.agentArgs("node-b", append(aws(ipamdB), "--interval=1s", "--max-interval=2s", "--ip-hysteresis-percent=0")...)...)
	if err != nil {
		t.Fatal(err)
	}
	ev := waitEvent(ctx, t, c.cp.Client, "node-b", "PodIPFiguresDisagree", "aws-vpc-cni counts 3 addresses held by pods but 9 pods")
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("event %+v, want a Warning", ev)
	}
	waitNodeIPs(ctx, t, c, "node-b", 12, 9, agent)
}

// waitNodeIPs waits until node's pod-IP annotations say capacity and used.
func waitNodeIPs(ctx context.Context, t *testing.T, c *cloudIPAMCluster, node string, capacity, used int64, agent *controlplane.Process) {
	t.Helper()
	var last ipstats.NodeStats
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := c.cp.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last, _ = ipstats.ParseNode(n.Annotations, time.Now(), 0)
		return last.Capacity == capacity && last.Used == used, nil
	})
	if err != nil {
		t.Fatalf("%s: capacity %d, used %d; want %d and %d\n%s", node, last.Capacity, last.Used, capacity, used, agent.Log(8<<10))
	}
}

// TestNodeIPsWithAzureCNI: Azure CNS's NodeNetworkConfig CRD (Azure's own,
// pkg/azureipam/testdata) is served; node A's NodeNetworkConfig holds 16
// addresses and its network container reports NCUpdateSubnetFullError,
// and 16 pods on A hold them; B's holds 16 of up to 250. The real
// headroom-node-agent, with the shipped manifests and the azure-cni
// component's rights only, publishes A as 16 of 16 and B as 250 with its
// pods' addresses, and headroom-scheduler keeps pods off A.
func TestNodeIPsWithAzureCNI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := startCloudIPAMCluster(ctx, t)
	kubectl(ctx, t, c.cp, "apply", "-f", repoPath(t, "manifests/node-agent/azure-cni/rbac.yaml"))
	kubectl(ctx, t, c.cp, "apply", "-f", repoPath(t, "pkg/azureipam/testdata/acn.azure.com_nodenetworkconfigs.yaml"))
	kubectl(ctx, t, c.cp, "wait", "--for=condition=Established", "crd/nodenetworkconfigs.acn.azure.com", "--timeout=60s")
	dyn := dynamic.NewForConfigOrDie(c.cp.Config)
	for node, ncStatus := range map[string]string{"node-a": azureipam.NCSubnetFull, "node-b": "NCUpdateSuccess"} {
		var obj map[string]any
		if err := yaml.Unmarshal(repoFile(t, "pkg/azureipam/testdata/nodenetworkconfig.yaml"), &obj); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		u.SetName(node)
		status := obj["status"]
		created, err := dyn.Resource(azureipam.NodeNetworkConfigs).Namespace(azureipam.Namespace).Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// status is a subresource: DNC-RC writes it.
		created.Object["status"] = status
		ncs, _, _ := unstructured.NestedSlice(created.Object, "status", "networkContainers")
		ncs[0].(map[string]any)["status"] = ncStatus
		if err := unstructured.SetNestedSlice(created.Object, ncs, "status", "networkContainers"); err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(azureipam.NodeNetworkConfigs).Namespace(azureipam.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A's 16 addresses are its pods': their status as the kubelet reports it.
	for i := range 16 {
		p := newPod(fmt.Sprintf("on-a-%02d", i), "", map[string]string{"kwok.x-k8s.io/status": "custom"}, nil, nil)
		p.Spec.NodeName = "node-a"
		p, err := c.cp.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ip := fmt.Sprintf("10.241.0.%d", 5+i)
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
		if _, err := c.cp.Client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	conf := []string{"--cni-conf-dir=" + cniConfDir(t, "10-azure.conflist", azureConflist)}
	if s := c.report(ctx, t, "node-a", conf...); s.Capacity != 16 || s.Used != 16 {
		t.Fatalf("node-a: capacity %d, used %d; want 16 (the subnet is full) and 16", s.Capacity, s.Used)
	}
	if s := c.report(ctx, t, "node-b", conf...); s.Capacity != 250 || s.Used != 0 {
		t.Fatalf("node-b: capacity %d, used %d; want 250 and 0", s.Capacity, s.Used)
	}
	// Pods prefer A and go to B; B's figure of 250 leaves room for all.
	if _, err := c.cp.StartScheduler(ctx, repoFile(t, "manifests/scheduler/scheduler-config.yaml")); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		name := fmt.Sprintf("p%02d", i)
		p := newPod(name, "headroom-scheduler", nil, nil, nil)
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100,
				Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
					Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"node-a"}}}}}}}}
		if _, err := c.cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if node := waitBound(ctx, t, c.cp.Client, metav1.NamespaceDefault, name); node != "node-b" {
			t.Fatalf("%s bound to %s, whose subnet is full; want node-b", name, node)
		}
	}
}

func kubectl(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, args ...string) {
	t.Helper()
	out, err := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), append([]string{"--kubeconfig", cp.KubeconfigPath}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
}

// TestAzureCNIComponentMatchesChart: the azure-cni component and the
// chart's nodeAgent.azureCNI.enabled add the same objects, a Role and its
// binding in kube-system and nothing else, and the Role grants reads of
// NodeNetworkConfigs only.
func TestAzureCNIComponentMatchesChart(t *testing.T) {
	base, withComponent := renderKustomize(t), renderKustomizeWith(t, "node-agent/azure-cni")
	added := map[string]object{}
	for k, o := range withComponent {
		if _, ok := base[k]; !ok {
			added[k] = o
		}
	}
	chartBase, chart := renderChart(t), renderChart(t, "-f", valuesFile(t, "nodeAgent: {azureCNI: {enabled: true}}"))
	chartAdded := map[string]object{}
	for k, o := range chart {
		if _, ok := chartBase[k]; !ok {
			chartAdded[k] = o
		}
	}
	compareObjects(t, added, chartAdded)
	const roleKey = "Role kube-system/headroom-node-agent-azure-cni"
	if len(added) != 2 || added[roleKey] == nil || added["RoleBinding kube-system/headroom-node-agent-azure-cni"] == nil {
		t.Fatalf("the component adds %v, want the Role and RoleBinding headroom-node-agent-azure-cni in kube-system", slices.Sorted(func(yield func(string) bool) {
			for k := range added {
				if !yield(k) {
					return
				}
			}
		}))
	}
	role := decodeTyped[*rbacv1.Role](t, added, roleKey)
	want := []rbacv1.PolicyRule{{APIGroups: []string{"acn.azure.com"}, Resources: []string{"nodenetworkconfigs"}, Verbs: []string{"get", "list", "watch"}}}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("Role rules %+v, want %+v", role.Rules, want)
	}
}
