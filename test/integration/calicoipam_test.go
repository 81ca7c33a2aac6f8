package integration

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/headroom-k8s/headroom/pkg/calicoipam"
	"github.com/headroom-k8s/headroom/pkg/calicoipam/calicotest"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// preferNode is a node affinity that prefers the node of that name.
func preferNode(name string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
			Weight: 100,
			Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{
				Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{name},
			}}},
		}},
	}}
}

// calicoObjects installs Calico's CRDs (pkg/calicoipam/testdata) and
// returns kubectl against cp and a function that creates or replaces a
// Calico object as Calico's IPAM writes it.
func calicoObjects(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane) (kubectl func(args ...string), apply func(gvr schema.GroupVersionResource, obj map[string]any)) {
	kubectl = func(args ...string) {
		t.Helper()
		out, err := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), append([]string{"--kubeconfig", cp.KubeconfigPath}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	kubectl("apply", "-f", repoPath(t, "pkg/calicoipam/testdata/crds.yaml"))
	kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/ipamblocks.crd.projectcalico.org",
		"crd/ippools.crd.projectcalico.org", "crd/ipamconfigs.crd.projectcalico.org")
	admin := dynamic.NewForConfigOrDie(cp.Config)
	apply = func(gvr schema.GroupVersionResource, obj map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{Object: obj}
		r := admin.Resource(gvr)
		cur, err := r.Get(ctx, u.GetName(), metav1.GetOptions{})
		if err == nil {
			u.SetResourceVersion(cur.GetResourceVersion())
			_, err = r.Update(ctx, u, metav1.UpdateOptions{})
		} else {
			_, err = r.Create(ctx, u, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatalf("writing %s %s: %v", gvr.Resource, u.GetName(), err)
		}
	}
	return kubectl, apply
}

// TestNodeIPsCalicoIPAMSource: NodeIPs with ipSource CalicoIPAM counts the
// nodes' pod IPs from Calico's objects itself, with no node agent and no
// annotation: the shipped scheduler, its rights from
// manifests/scheduler/calico-ipam, keeps pods that prefer node-a (its block
// full, strictAffinity, no second block to claim) off it; two go to node-b
// (14 of 16 used), the third fits nowhere. Calico then releases three of
// node-a's addresses and the pending pod goes there once node-a changes.
func TestNodeIPsCalicoIPAMSource(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	kubectl, apply := calicoObjects(ctx, t, cp)
	blockA := "10.200.0.0/28"
	fullA := calicotest.Pods("node-a", 1, 15)
	fullA[0] = calicotest.Holder{Node: "node-a"} // the tunnel address
	apply(calicoipam.IPPools, calicotest.IPPool("default-ipv4-ippool", "10.200.0.0/27", 28))
	apply(calicoipam.IPAMConfigs, calicotest.IPAMConfig(true, 1))
	apply(calicoipam.IPAMBlocks, calicotest.Block(blockA, "host:node-a", fullA))
	apply(calicoipam.IPAMBlocks, calicotest.Block("10.200.0.16/28", "host:node-b", calicotest.Pods("node-b", 0, 14)))
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := cp.CreateNode(ctx, n, resources("16", "64Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}
	applyManifests(ctx, t, cp, "namespace")
	if err := cp.ApplyShippedIdentities(ctx); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", repoPath(t, "manifests/scheduler/calico-ipam/rbac.yaml"))

	config := strings.Replace(string(repoFile(t, "manifests/scheduler/scheduler-config.yaml")),
		"      ampleFreeIPs: 110\n", "      ampleFreeIPs: 110\n      ipSource: CalicoIPAM\n", 1)
	if !strings.Contains(config, "ipSource: CalicoIPAM") {
		t.Fatal("the shipped scheduler configuration has no NodeIPs ampleFreeIPs line to follow")
	}
	if _, err := cp.StartScheduler(ctx, []byte(config)); err != nil {
		t.Fatal(err)
	}
	pods := cp.Client.CoreV1().Pods(metav1.NamespaceDefault)
	// kwok leaves the pods' status alone (Pending, nothing started), as a
	// real node leaves a bound pod's until its sandbox has an address: a
	// pod kwok made Running would count as in Calico's blocks, where no CNI
	// here ever writes it, and its address would be counted free.
	create := func(name string) {
		t.Helper()
		p := newPod(name, "headroom-scheduler", map[string]string{controlplane.KwokCustomStatusAnnotation: "custom"}, nil, nil)
		p.Spec.Affinity = preferNode("node-a")
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		name := fmt.Sprintf("p%d", i)
		create(name)
		if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, name); node != "node-b" {
			t.Fatalf("%s bound to %s, whose Calico blocks are full; want node-b", name, node)
		}
	}
	create("stuck")
	cond := waitUnschedulable(ctx, t, cp.Client, metav1.NamespaceDefault, "stuck", "but no node has a free pod IP")
	if want := "2 " + nodeips.ErrReasonNoFreeIPs; !strings.Contains(cond.Message, want) {
		t.Errorf("PodScheduled condition %q, want it to contain %q", cond.Message, want)
	}
	for _, n := range []string{"node-a", "node-b"} {
		node, err := cp.Client.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := node.Annotations[ipstats.AnnotationCapacity]; ok {
			t.Fatalf("%s carries pod-IP annotations; the figures were to come from Calico's objects alone", n)
		}
	}

	// Calico releases three of node-a's addresses (pods deleted there).
	// The scheduler reads them when node-a next changes (here an
	// annotation, which also requeues the pod; without a change, the
	// scheduler's periodic retry of unschedulable pods).
	for _, o := range []int{3, 7, 9} {
		delete(fullA, o)
	}
	apply(calicoipam.IPAMBlocks, calicotest.Block(blockA, "host:node-a", fullA))
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, time.Minute, true, func(ctx context.Context) (bool, error) {
		kubectl("annotate", "--overwrite", "node", "node-a", "headroom.dev/test="+time.Now().Format("150405.000"))
		p, err := pods.Get(ctx, "stuck", metav1.GetOptions{})
		return err == nil && p.Spec.NodeName != "", nil
	})
	if err != nil {
		t.Fatalf("stuck never bound after node-a's release: %v", err)
	}
	if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, "stuck"); node != "node-a" {
		t.Fatalf("stuck bound to %s, want node-a", node)
	}
}
