package app

import (
	"context"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/kubernetes/pkg/scheduler/backend/cache"
	"k8s.io/kubernetes/pkg/scheduler/framework"
)

// cluster is what the scheduler's cache holds: nodes, and the pods bound to
// them that have not finished (the kube-scheduler's informer leaves
// Succeeded and Failed pods out).
type cluster struct {
	nodes []*corev1.Node
	pods  map[string][]*corev1.Pod // by node name
}

// listCluster lists the nodes that selector (a label selector; empty:
// every node) selects and every pod bound to a node.
func listCluster(ctx context.Context, client kubernetes.Interface, selector string) (*cluster, error) {
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, err
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: assignedPods("").String()})
	if err != nil {
		return nil, err
	}
	c := &cluster{pods: map[string][]*corev1.Pod{}}
	for i := range nodes.Items {
		c.nodes = append(c.nodes, &nodes.Items[i])
	}
	sort.Slice(c.nodes, func(i, j int) bool { return c.nodes[i].Name < c.nodes[j].Name })
	c.addPods(pods.Items, "")
	return c, nil
}

// getNode gets one node and the pods bound to it.
func getNode(ctx context.Context, client kubernetes.Interface, name string) (*cluster, error) {
	node, err := client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: assignedPods(name).String()})
	if err != nil {
		return nil, err
	}
	c := &cluster{nodes: []*corev1.Node{node}, pods: map[string][]*corev1.Pod{}}
	c.addPods(pods.Items, name)
	return c, nil
}

// assignedPods selects the pods bound to node (to any node when empty) that
// have not finished, as the kube-scheduler's pod informer does.
func assignedPods(node string) fields.Selector {
	nodeSel := fields.OneTermNotEqualSelector("spec.nodeName", "")
	if node != "" {
		nodeSel = fields.OneTermEqualSelector("spec.nodeName", node)
	}
	return fields.AndSelectors(nodeSel,
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodSucceeded)),
		fields.OneTermNotEqualSelector("status.phase", string(corev1.PodFailed)))
}

// addPods adds the listed pods, checking the selector's terms again: not
// every server (nor the fake clientset) honours field selectors.
func (c *cluster) addPods(items []corev1.Pod, node string) {
	for i := range items {
		p := &items[i]
		if p.Spec.NodeName == "" || (node != "" && p.Spec.NodeName != node) ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		c.pods[p.Spec.NodeName] = append(c.pods[p.Spec.NodeName], p)
	}
}

func (c *cluster) node(name string) *corev1.Node {
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// without returns c without the pod (by UID), for a bound pod to be
// scheduled afresh; c itself when the pod is not there.
func (c *cluster) without(pod *corev1.Pod) *cluster {
	if pod.UID == "" || pod.Spec.NodeName == "" {
		return c
	}
	out := &cluster{nodes: c.nodes, pods: map[string][]*corev1.Pod{}}
	for node, pods := range c.pods {
		for _, p := range pods {
			if p.UID != pod.UID {
				out.pods[node] = append(out.pods[node], p)
			}
		}
	}
	return out
}

// snapshot is the scheduler's view of c, with the framework's NodeInfos.
func (c *cluster) snapshot() *cache.Snapshot {
	var pods []*corev1.Pod
	for _, n := range c.nodes {
		pods = append(pods, c.pods[n.Name]...)
	}
	return cache.NewSnapshot(pods, c.nodes)
}

// verdict is what the profile's plugins decide for a pod on one node.
type verdict struct {
	node string
	// filter is Filter's status; nil when the node passes.
	filter *fwk.Status
	// scores are the plugins' scores, times their weights; total their sum.
	scores []fwk.PluginScore
	total  int64
}

// decision is a scheduling cycle of the profile's plugins for one pod on
// every node of the snapshot, as the kube-scheduler runs it: PreFilter,
// Filter, PreScore and Score on the nodes that pass. It binds nothing.
type decision struct {
	preFilter *fwk.Status
	preScore  *fwk.Status
	verdicts  []verdict // in the order of the cluster's nodes; the feasible ones scored
	// skippedScore names the Score plugins whose PreScore skipped them.
	skippedScore sets.Set[string]
}

func decide(ctx context.Context, p *profile, c *cluster, pod *corev1.Pod) (*decision, error) {
	snap := c.without(pod).snapshot()
	fw, err := p.newFramework(ctx, snap)
	if err != nil {
		return nil, err
	}
	d := &decision{}
	state := framework.NewCycleState()
	_, d.preFilter, _ = fw.RunPreFilterPlugins(ctx, state, pod)
	var feasible []fwk.NodeInfo
	for _, n := range c.nodes { // the snapshot lists its nodes in no set order
		ni, err := snap.NodeInfos().Get(n.Name)
		if err != nil {
			return nil, err
		}
		v := verdict{node: n.Name}
		if !d.preFilter.IsSuccess() {
			v.filter = d.preFilter
		} else if s := fw.RunFilterPlugins(ctx, state, pod, ni); !s.IsSuccess() {
			v.filter = s
		} else {
			feasible = append(feasible, ni)
		}
		d.verdicts = append(d.verdicts, v)
	}
	if len(feasible) == 0 {
		return d, nil
	}
	if d.preScore = fw.RunPreScorePlugins(ctx, state, pod, feasible); !d.preScore.IsSuccess() {
		return d, nil
	}
	d.skippedScore = state.GetSkipScorePlugins()
	scores, s := fw.RunScorePlugins(ctx, state, pod, feasible)
	if !s.IsSuccess() {
		return nil, s.AsError()
	}
	byNode := map[string]fwk.NodePluginScores{}
	for _, ns := range scores {
		byNode[ns.Name] = ns
	}
	for i := range d.verdicts {
		if ns, ok := byNode[d.verdicts[i].node]; ok {
			d.verdicts[i].scores, d.verdicts[i].total = ns.Scores, ns.TotalScore
		}
	}
	return d, nil
}
