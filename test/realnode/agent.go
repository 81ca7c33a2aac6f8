package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// nodeAgentKinds are the objects of kubectl kustomize manifests/ that run
// the node agent beside its DaemonSet: namespace and quota, identity,
// rights, admission policy. The scheduler's and descheduler's workloads
// stay out: tests and the demo run those as processes.
var nodeAgentKinds = map[string]bool{
	"Namespace": true, "ResourceQuota": true, "ServiceAccount": true,
	"ClusterRole": true, "ClusterRoleBinding": true, "Role": true, "RoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

// DeployShippedNodeAgent applies the shipped node agent as kubectl apply -k
// manifests/ would (the images block's tag, which the node has imported),
// adds args to its container as an operator's patch would — the kubelet's
// PID reservation is one, --reserved-pids, which the agent cannot read off
// the node — and waits until its pod runs on the node with them and has
// written the node's PID and pod-IP figures.
func (n *Node) DeployShippedNodeAgent(ctx context.Context, args ...string) (*corev1.Pod, error) {
	return n.deployShippedNodeAgent(ctx, nil, nil, args...)
}

// Components of the shipped node agent an operator opts into, as
// manifests/ paths.
const (
	// CRIAccess is manifests/node-agent/cri-access: the container
	// runtime's socket directory, group 0, --container-runtime-endpoint.
	CRIAccess = "node-agent/cri-access"
	// ReclaimLeakedIPs is manifests/node-agent/reclaim-leaked-ips, on top
	// of CRIAccess.
	ReclaimLeakedIPs = "node-agent/reclaim-leaked-ips"
)

// DeployShippedNodeAgentWith deploys the shipped node agent as
// DeployShippedNodeAgent does, with the shipped components added as a
// kustomization of the operator's would add them (components, e.g.
// CRIAccess). The runtime's socket directory and endpoint are the node's
// containerd's, which listens under the node's own directory rather than
// /run/containerd. Deploying again with other components changes the
// running DaemonSet, as an operator's kubectl apply -k does.
func (n *Node) DeployShippedNodeAgentWith(ctx context.Context, components []string, args ...string) (*corev1.Pod, error) {
	return n.deployShippedNodeAgent(ctx, components, nil, args...)
}

// NodeCgroupRoot is where DeployShippedNodeAgentOnNodeCgroup mounts the
// node's own cgroup in the agent's container.
const NodeCgroupRoot = "/host/node-cgroup"

// DeployShippedNodeAgentOnNodeCgroup deploys the shipped node agent as
// DeployShippedNodeAgent does, but shows it the node's own cgroup (the
// kubelet's cgroupRoot, which holds kubepods and nothing else) where the
// host's cgroup mount would be: its --cgroup-root is NodeCgroupRoot, with
// the node's cgroup of the memory and pids hierarchies mounted there (v1:
// NodeCgroupRoot/memory and NodeCgroupRoot/pids; v2: the one cgroup). The
// agent's code is unchanged; what it takes for the root cgroup — the
// node's memory working set, memory-used — is then the node's cgroup's
// working set rather than the whole machine's. That is what a node whose
// machine runs nothing but it shows, and what a miniature node on a shared
// machine (ReservedMemory) needs: there the machine's root cgroup holds the
// other work on the machine, gigabytes that are not the node's.
func (n *Node) DeployShippedNodeAgentOnNodeCgroup(ctx context.Context, args ...string) (*corev1.Pod, error) {
	return n.deployShippedNodeAgent(ctx, nil, func(ds *appsv1.DaemonSet) {
		mountNodeCgroup(ds, n.host.Cgroups, func(m *corev1.VolumeMount) { m.SubPath = n.host.CgroupName })
	}, append([]string{nodeCgroupRootArg}, args...)...)
}

const nodeCgroupRootArg = "--cgroup-root=" + NodeCgroupRoot

// mountNodeCgroup gives the agent's container its node's own cgroup at
// NodeCgroupRoot (v1: the memory and pids hierarchies' cgroup at
// NodeCgroupRoot/memory and NodeCgroupRoot/pids; v2: the one cgroup) in
// place of the host's cgroup mount: sub names the node's cgroup below each
// hierarchy's root (SubPath, or SubPathExpr for a cgroup per node).
func mountNodeCgroup(ds *appsv1.DaemonSet, cg cgroups, sub func(*corev1.VolumeMount)) {
	type mount struct{ hierarchy, container string }
	mounts := []mount{{cgroupMount, NodeCgroupRoot}}
	if !cg.V2 {
		mounts = []mount{
			{filepath.Join(cgroupMount, "memory"), NodeCgroupRoot + "/memory"},
			{filepath.Join(cgroupMount, "pids"), NodeCgroupRoot + "/pids"},
		}
	}
	spec := &ds.Spec.Template.Spec
	c := &spec.Containers[0]
	kept := c.Args[:0]
	for _, a := range c.Args {
		if !strings.HasPrefix(a, "--cgroup-root=") {
			kept = append(kept, a)
		}
	}
	c.Args = append(kept, nodeCgroupRootArg)
	dir := corev1.HostPathDirectory
	for i, m := range mounts {
		name := fmt.Sprintf("node-cgroup-%d", i)
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: m.hierarchy, Type: &dir},
		}})
		vm := corev1.VolumeMount{Name: name, MountPath: m.container, ReadOnly: true}
		sub(&vm)
		c.VolumeMounts = append(c.VolumeMounts, vm)
	}
}

// cniConfDirArg points each agent pod at its node's network
// configuration (Node.host.ConfDir) below the host's /etc/cni/net.d, which
// the shipped DaemonSet mounts at the same path: Kubernetes expands
// $(NODE_NAME), the pod's env, in its args.
const cniConfDirArg = "--cni-conf-dir=" + CNIConfDir + "/$(NODE_NAME)"

// DeployShippedNodeAgentOnNodes deploys the shipped node agent as
// DeployShippedNodeAgent does, for several real nodes of one cluster: its
// pod on each reads that node's kubelet configuration file (the shipped
// --kubelet-config, mounted from the node's directory), so that each pod
// takes its own node's systemReserved.pid — nodes with budgets of their
// own; args must not give --reserved-pids. Each pod sees its node's own
// cgroup, as DeployShippedNodeAgentOnNodeCgroup shows it, and serves no
// metrics. It waits until a pod runs on
// every node and every node carries its figures. CRI access is not offered
// here: the components name one runtime socket, and each node has its own.
func DeployShippedNodeAgentOnNodes(ctx context.Context, nodes []*Node, args ...string) ([]*corev1.Pod, error) {
	if len(nodes) == 0 {
		return nil, fmt.Errorf("no nodes")
	}
	for _, a := range args {
		if strings.HasPrefix(a, "--reserved-pids") {
			return nil, fmt.Errorf("%s: each node's pod reads its own node's reservation from the kubelet's configuration", a)
		}
	}
	const kubeletConfig = "/host/kubelet/config.yaml"
	// The nodes share the host's network: no two pods can serve at the
	// shipped :9809, so none serves (and the probe of it goes).
	args = append([]string{"--kubelet-config=" + kubeletConfig, nodeCgroupRootArg, "--metrics-bind-address=0"}, args...)
	first, err := nodes[0].deployShippedNodeAgent(ctx, nil, func(ds *appsv1.DaemonSet) {
		// Every node's kubepods is under the host's cgroup mount: each
		// pod is shown its own node's cgroup (Options' cgroupRoot).
		mountNodeCgroup(ds, nodes[0].host.Cgroups, func(m *corev1.VolumeMount) { m.SubPathExpr = cgroupPrefix + "$(NODE_NAME)" })
		spec := &ds.Spec.Template.Spec
		spec.Containers[0].LivenessProbe = nil
		spec.Containers[0].Ports = nil
		dir := corev1.HostPathDirectory
		spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "kubelet-config", VolumeSource: corev1.VolumeSource{
			HostPath: &corev1.HostPathVolumeSource{Path: filepath.Dir(nodes[0].Dir), Type: &dir},
		}})
		c := &spec.Containers[0]
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "kubelet-config", MountPath: kubeletConfig, ReadOnly: true,
			SubPathExpr: "node-$(NODE_NAME)/" + filepath.Base(nodes[0].KubeletConfig)})
	}, args...)
	if err != nil {
		return nil, err
	}
	pods := []*corev1.Pod{first}
	for _, n := range nodes[1:] {
		p, err := n.waitShippedNodeAgent(ctx, append([]string{cniConfDirArg}, args...))
		if err != nil {
			return nil, err
		}
		pods = append(pods, p)
	}
	return pods, nil
}

// shippedComponentsDefaultSocket is the runtime socket the CRIAccess
// component names.
const shippedComponentsDefaultSocket = "/run/containerd/containerd.sock"

func (n *Node) deployShippedNodeAgent(ctx context.Context, components []string, mutate func(*appsv1.DaemonSet), args ...string) (*corev1.Pod, error) {
	cp := n.cp
	kubectl := filepath.Join(cp.BinDir, "kubectl")
	rendered, err := renderShipped(ctx, kubectl, components)
	if err != nil {
		return nil, err
	}
	var kept []string
	for _, doc := range strings.Split(string(rendered), "\n---\n") {
		var meta struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			return nil, err
		}
		if nodeAgentKinds[meta.Kind] || (meta.Kind == "DaemonSet" && meta.Metadata.Name == "headroom-node-agent") {
			// The node's containerd listens under the node's directory.
			doc = strings.ReplaceAll(doc, shippedComponentsDefaultSocket, n.Socket)
			doc = strings.ReplaceAll(doc, filepath.Dir(shippedComponentsDefaultSocket), filepath.Dir(n.Socket))
			kept = append(kept, doc)
		}
	}
	// Each node's network configuration is in a directory of its own.
	args = append([]string{cniConfDirArg}, args...)
	apply := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.KubeconfigPath, "apply", "--server-side", "--force-conflicts", "-f", "-")
	apply.Stdin = strings.NewReader(strings.Join(kept, "\n---\n"))
	if out, err := apply.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("applying the shipped node agent: %w\n%s", err, out)
	}
	return n.UpdateShippedNodeAgent(ctx, func(ds *appsv1.DaemonSet) {
		spec := &ds.Spec.Template.Spec
		spec.Containers[0].Args = append(spec.Containers[0].Args, args...)
		if mutate != nil {
			mutate(ds)
		}
	}, args...)
}

// renderShipped is kubectl kustomize manifests/, with components of
// manifests/ added by a kustomization of its own, as an operator adds them,
// and Headroom's images at the tag the node imported (ImageTag: the
// default minor's is manifests/'s own; another minor's, its overlay's,
// manifests/minors/<minor>).
func renderShipped(ctx context.Context, kubectl string, components []string) ([]byte, error) {
	manifests := filepath.Join(controlplane.RepoDir(), "manifests")
	tag, err := ImageTag()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "headroom-kustomization-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	// kustomize takes bases and components by relative path only.
	rel, err := filepath.Rel(tmp, manifests)
	if err != nil {
		return nil, err
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + rel + "\n"
	if len(components) > 0 {
		k += "components:\n"
	}
	for _, c := range components {
		k += "- " + filepath.Join(rel, c) + "\n"
	}
	k += "images:\n"
	for _, name := range []string{"headroom-scheduler", "headroom-descheduler", "headroom-node-agent"} {
		k += "- name: ghcr.io/headroom-k8s/" + name + "\n  newTag: " + tag + "\n"
	}
	if err := os.WriteFile(filepath.Join(tmp, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return nil, err
	}
	dir := tmp
	out, err := exec.CommandContext(ctx, kubectl, "kustomize", dir).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		return nil, fmt.Errorf("kubectl kustomize manifests/ with components %v: %w\n%s", components, err, stderr)
	}
	return out, nil
}

// UpdateShippedNodeAgent changes the node agent's DaemonSet as an
// operator's edit would (mutate), and waits until a pod of the new
// template runs on the node with args and the node carries the agent's
// figures.
func (n *Node) UpdateShippedNodeAgent(ctx context.Context, mutate func(*appsv1.DaemonSet), args ...string) (*corev1.Pod, error) {
	cp := n.cp
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		ds, err := cp.Client.AppsV1().DaemonSets(controlplane.Namespace).Get(ctx, "headroom-node-agent", metav1.GetOptions{})
		if err != nil {
			return err
		}
		mutate(ds)
		_, err = cp.Client.AppsV1().DaemonSets(controlplane.Namespace).Update(ctx, ds, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("changing the node agent's DaemonSet: %w", err)
	}
	return n.waitShippedNodeAgent(ctx, args)
}

// waitShippedNodeAgent waits until a pod of the node agent's DaemonSet
// runs on the node with args and the node carries the agent's figures.
func (n *Node) waitShippedNodeAgent(ctx context.Context, args []string) (*corev1.Pod, error) {
	cp := n.cp
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cp.Client.CoreV1().Pods(controlplane.Namespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			p := &pods.Items[i]
			if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && strings.HasPrefix(p.Name, "headroom-node-agent-") && hasArgs(p, args) {
				pod = p
			}
		}
		if pod == nil {
			return false, nil
		}
		node, err := cp.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return node.Annotations[pidstats.AnnotationSampledAt] != "" && node.Annotations[ipstats.AnnotationSampledAt] != "", nil
	})
	if err != nil {
		ds, _ := cp.Client.AppsV1().DaemonSets(controlplane.Namespace).Get(ctx, "headroom-node-agent", metav1.GetOptions{})
		pods, _ := cp.Client.CoreV1().Pods(controlplane.Namespace).List(ctx, metav1.ListOptions{})
		return nil, fmt.Errorf("the shipped node agent did not run and write on %s: %w\nDaemonSet status %+v\npods:%s", n.Name, err, ds.Status, PodSummaries(pods.Items))
	}
	return pod, nil
}

// hasArgs reports whether the pod's first container runs with args.
func hasArgs(p *corev1.Pod, args []string) bool {
	have := map[string]bool{}
	for _, a := range p.Spec.Containers[0].Args {
		have[a] = true
	}
	for _, a := range args {
		if !have[a] {
			return false
		}
	}
	return true
}

// PodSummaries describes pods in a line each, with why a container waits
// or ended: what a failing test or the demo prints.
func PodSummaries(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "\n  %s/%s on %q: %s", p.Namespace, p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Waiting != nil {
				fmt.Fprintf(&b, " (%s waiting: %s %s)", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
			}
			if c.State.Terminated != nil {
				fmt.Fprintf(&b, " (%s terminated: %s %d)", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode)
			}
		}
	}
	return b.String()
}
