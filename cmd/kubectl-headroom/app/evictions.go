package app

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/api"
	"sigs.k8s.io/descheduler/pkg/descheduler"
	"sigs.k8s.io/descheduler/pkg/descheduler/evictions"
	nodeutil "sigs.k8s.io/descheduler/pkg/descheduler/node"
	podutil "sigs.k8s.io/descheduler/pkg/descheduler/pod"
	"sigs.k8s.io/descheduler/pkg/features"
	"sigs.k8s.io/descheduler/pkg/framework/pluginregistry"
	frameworkprofile "sigs.k8s.io/descheduler/pkg/framework/profile"
	frameworktypes "sigs.k8s.io/descheduler/pkg/framework/types"

	"github.com/headroom-k8s/headroom/apis/kubectl/v1alpha1"
	"github.com/headroom-k8s/headroom/manifests"
	"github.com/headroom-k8s/headroom/pkg/ipstarved"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
)

// builtinPolicy names the DeschedulerPolicy built into kubectl-headroom.
const builtinPolicy = "the built-in default (manifests/descheduler/policy.yaml)"

func newEvictionsCommand(o *options) *cobra.Command {
	var policyPath string
	var output *outputFlags
	cmd := &cobra.Command{
		Use:   "evictions NODE [--policy FILE] [-o FORMAT]",
		Short: "Print what RelieveNodePressure would evict from a node now, in order, and why it would skip every other pod",
		Long: `evictions runs RelieveNodePressure's own planning on the node, with the
DeschedulerPolicy given by --policy (default: the one the headroom-descheduler
CronJob, or Deployment, of the cluster mounts; else the built-in one): the profile
that enables the plugin, its args, and its evictor (DefaultEvictor with the
policy's minReplicas, minPodAge, nodeFit, …) built by the descheduler's
framework. It lists the node's pods in the order the plugin walks them and
says, for each, whether the plan evicts it and the eviction's reason, or why
it stays. It reads a copy of the cluster and never evicts: the evictor runs
in dry-run mode against that copy.

It plans the node as the first of a descheduler cycle: the policy's total
and per-namespace limits, which evictions from nodes earlier in a cycle may
use up, are not counted. The plugin's eviction budgets over a window
(evictionBudget) are, as its state ConfigMap holds them: where they leave
too few evictions for the plan, nothing is evicted until the window slides,
and the decision is BudgetSpent. While the node's pressure has not yet been seen in
the policy's pressureSamples consecutive samples, nothing is evicted: it
says so and shows the plan that runs if the pressure lasts.

-o json, -o yaml, -o jsonpath=... and -o go-template=... print a
NodeEvictionPlan (kubectl.headroom.dev/v1alpha1): the decision (Evict,
Unrelievable, BudgetSpent, Waiting, WithinThresholds, NotDescheduled), the figures, and
each pod with its place in the plan and the reason.`,
		Example: `  kubectl headroom evictions worker-1
  kubectl headroom evictions worker-1 --policy my-policy.yaml
  # Fail a CI job when the plan would evict a pod of the payments namespace.
  kubectl headroom evictions worker-1 -o json |
    jq -e '[.pods[]? | select(.evict and .namespace == "payments")] | length == 0'`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNodes,
		RunE: func(cmd *cobra.Command, args []string) error {
			printer, err := output.printer()
			if err != nil {
				return err
			}
			client, err := o.newClient()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			policy, err := o.policyFile(ctx, client, policyPath)
			if err != nil {
				return err
			}
			plan, err := evictionsOf(ctx, client, args[0], policy)
			if err != nil {
				return err
			}
			return printOrTable(cmd.OutOrStdout(), printer, plan, func(out io.Writer) { writeEvictionPlan(out, plan) })
		},
	}
	output = addOutputFlags(cmd, "NodeEvictionPlan")
	cmd.Flags().StringVar(&policyPath, "policy", "", "DeschedulerPolicy (descheduler/v1alpha2) file; default: the running headroom-descheduler's (its CronJob's or Deployment's ConfigMap), else "+builtinPolicy)
	return cmd
}

// policyFile is the DeschedulerPolicy of --policy, else the one the
// running headroom-descheduler mounts, else the built-in one. It says on
// stderr which, and why when it falls back.
func (o *options) policyFile(ctx context.Context, client kubernetes.Interface, path string) (*configFile, error) {
	var f *configFile
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		f = &configFile{data: data, source: path}
	} else if c, err := deschedulerPolicyOf(ctx, client, o.systemNamespace); err == nil {
		f = c
	} else {
		fmt.Fprintf(o.streams.ErrOut, "Note: the running headroom-descheduler's policy could not be read (%v); using %s\n", err, builtinPolicy)
		f = &configFile{data: manifests.DeschedulerPolicy, source: builtinPolicy}
	}
	fmt.Fprintf(o.streams.ErrOut, "Using the DeschedulerPolicy of %s\n", f.source)
	return f, nil
}

// evictionsOf is RelieveNodePressure's plan for node.
// enableContextualLogging turns klog's contextual logging on once: the flag
// is a global that informers' goroutines read.
var enableContextualLogging sync.Once

func evictionsOf(ctx context.Context, client kubernetes.Interface, name string, policyFile *configFile) (*v1alpha1.NodeEvictionPlan, error) {
	// The sandbox's informers and the plugin's Event cache stop with the
	// plan.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sandbox, err := copyCluster(ctx, client)
	if err != nil {
		return nil, err
	}
	// Before the plugin is built: it caches the Events when it starts.
	sandboxNote := copySandboxFailures(ctx, client, sandbox, name)
	registry, plugin := planningRegistry()
	policy, source, err := loadPolicy(policyFile, sandbox, registry)
	if err != nil {
		return nil, err
	}
	profile, err := relieveProfile(policy, source)
	if err != nil {
		return nil, err
	}

	// The evictor's Filter says only yes or no; DefaultEvictor logs which
	// of its checks a pod fails. The log of this run is read for them.
	// component-base's cli.Run turns contextual logging off; the plugins
	// take their loggers from the context.
	checks := &evictorChecks{byPod: map[string]string{}}
	enableContextualLogging.Do(func() { klog.EnableContextualLogging(true) })
	ctx = klog.NewContext(ctx, klog.New(checks))

	factory := informers.NewSharedInformerFactory(sandbox, 0)
	podInformer := factory.Core().V1().Pods().Informer()
	// As the descheduler: DefaultEvictor reads PVCs during the cycle.
	_ = factory.Core().V1().PersistentVolumeClaims().Informer()
	nodeLister := factory.Core().V1().Nodes().Lister()
	getPods, err := podutil.BuildGetPodsAssignedToNodeFunc(podInformer)
	if err != nil {
		return nil, err
	}
	podEvictor, err := evictions.NewPodEvictor(ctx, sandbox, &events.FakeRecorder{}, podInformer, features.DefaultMutableFeatureGate,
		evictions.NewOptions().
			WithDryRun(true).
			WithMaxPodsToEvictPerNode(policy.MaxNoOfPodsToEvictPerNode).
			WithMaxPodsToEvictPerNamespace(policy.MaxNoOfPodsToEvictPerNamespace).
			WithMaxPodsToEvictTotal(policy.MaxNoOfPodsToEvictTotal).
			WithMetricsEnabled(false))
	if err != nil {
		return nil, err
	}
	if _, err := frameworkprofile.NewProfile(ctx, *profile, registry,
		frameworkprofile.WithClientSet(sandbox),
		frameworkprofile.WithSharedInformerFactory(factory),
		frameworkprofile.WithPodEvictor(podEvictor),
		frameworkprofile.WithGetPodsAssignedToNodeFnc(getPods),
		frameworkprofile.WithProfileInstanceID("0"),
	); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	podEvictor.WaitForEventHandlersSync(ctx)

	out := &v1alpha1.NodeEvictionPlan{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "NodeEvictionPlan"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Policy:     source,
		Profile:    profile.Name,
	}
	selector := ""
	if policy.NodeSelector != nil {
		selector = *policy.NodeSelector
	}
	nodes, err := nodeutil.ReadyNodes(ctx, sandbox, nodeLister, selector)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(nodes, func(n *corev1.Node) bool { return n.Name == name })
	if i < 0 {
		if _, err := nodeLister.Get(name); err != nil {
			return nil, fmt.Errorf("node %q: %w", name, err)
		}
		out.Decision = v1alpha1.DecisionNotDescheduled
		return out, nil
	}
	if *plugin == nil {
		return nil, fmt.Errorf("%s: profile %q did not build %s", source, profile.Name, relievenodepressure.PluginName)
	}
	// The plugin's record of earlier runs (the debounce, the last relief)
	// decides as much as the figures: the plan reads a copy of it.
	ns, cmName := (*plugin).StateConfigMap()
	if cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{}); err == nil {
		if err := sandbox.Tracker().Add(cm); err != nil {
			return nil, err
		}
	} else {
		out.Notes = append(out.Notes, fmt.Sprintf("the descheduler's record of earlier runs, ConfigMap %s/%s, could not be read (%v): the plan assumes no pressure seen before", ns, cmName, err))
	}
	if sandboxNote != "" {
		out.Notes = append(out.Notes, sandboxNote)
	}
	plan, err := (*plugin).Plan(ctx, nodes, nodes[i])
	if err != nil {
		return nil, err
	}
	if len(nodes) < 2 {
		out.Notes = append(out.Notes, fmt.Sprintf("%d ready node; the descheduler skips its cycles with fewer than 2", len(nodes)))
	}
	fillEvictionPlan(out, plan, checks)
	return out, nil
}

// fillEvictionPlan sets plan's decision, figures and pods from the
// plugin's plan p, with the evictor's checks for the pods it keeps.
func fillEvictionPlan(plan *v1alpha1.NodeEvictionPlan, p *relievenodepressure.NodePlan, checks *evictorChecks) {
	if len(p.Unknown) > 0 {
		plan.Unknown = p.Unknown
	}
	plan.Now, plan.Thresholds, plan.After = figures(p.Before), figures(p.Thresholds), figures(p.After)
	plan.PressureSeen, plan.Relieves = p.Waiting, p.Relieves
	// The ipStarved trigger's evictions need no pressure: on their own they
	// make the decision Evict.
	starved := slices.ContainsFunc(p.StarvedOfPodIP, func(pp relievenodepressure.PodPlan) bool { return pp.Evict })
	switch {
	case !p.Triggered && !starved:
		plan.Decision = v1alpha1.DecisionWithinThresholds
		return
	case !p.Triggered:
		plan.Decision, plan.Relieves = v1alpha1.DecisionEvict, true
	case p.Waiting != "":
		plan.Decision = v1alpha1.DecisionWaiting
	case p.Relieves:
		plan.Decision = v1alpha1.DecisionEvict
	case p.Budget != "":
		plan.Decision, plan.Budget = v1alpha1.DecisionBudgetSpent, p.Budget
	default:
		plan.Decision = v1alpha1.DecisionUnrelievable
	}
	// The memory trigger's gains, where it is on and the node's memory known.
	memory := slices.Contains(p.Before, any("memoryUsed"))
	for _, pp := range slices.Concat(p.Pods, p.StarvedOfPodIP) {
		e := v1alpha1.PodEviction{Namespace: pp.Pod.Namespace, Name: pp.Pod.Name, Evict: pp.Evict, FreesPIDs: pp.PIDs, Reason: pp.Reason}
		if pp.Pod.Spec.Priority != nil {
			e.Priority = *pp.Pod.Spec.Priority
		}
		if memory {
			e.FreesMemoryBytes = ptr.To(pp.MemoryBytes)
		}
		if pp.Evict {
			plan.Evictions++
			e.EvictionOrder = plan.Evictions
		} else if c, ok := checks.of(pp.Pod); ok && strings.HasPrefix(pp.Reason, "the evictor's") {
			e.Reason = "the evictor's filter keeps it: " + c
		}
		plan.Pods = append(plan.Pods, e)
	}
}

// figures are the plugin's key, value pairs.
func figures(kv []any) []v1alpha1.Figure {
	var out []v1alpha1.Figure
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, v1alpha1.Figure{Name: fmt.Sprint(kv[i]), Value: fmt.Sprint(kv[i+1])})
	}
	return out
}

// writeEvictionPlan prints the plan: the figures, the decision and the
// pods in the order the plan walks them.
func writeEvictionPlan(out io.Writer, p *v1alpha1.NodeEvictionPlan) {
	if p.Decision == v1alpha1.DecisionNotDescheduled {
		fmt.Fprintf(out, "node %s is not Ready or not selected by the policy's nodeSelector: the descheduler leaves it alone\n", p.Name)
		return
	}
	fmt.Fprintf(out, "node %s (profile %q of %s)\n", p.Name, p.Profile, p.Policy)
	for _, n := range p.Notes {
		fmt.Fprintf(out, "note: %s\n", n)
	}
	for _, trigger := range []string{"PIDs", "memory", "OOM", "podIPs"} {
		if why, ok := p.Unknown[trigger]; ok {
			fmt.Fprintf(out, "%s: unknown (%s): the %s trigger leaves the node alone\n", trigger, why, trigger)
		}
	}
	if len(p.Now) > 0 {
		fmt.Fprintf(out, "now: %s\n", figureList(p.Now))
	}
	if p.Decision == v1alpha1.DecisionWithinThresholds {
		fmt.Fprintln(out, "within thresholds: nothing to evict")
		return
	}
	if len(p.Thresholds) > 0 {
		fmt.Fprintf(out, "above threshold (%s)\n", figureList(p.Thresholds))
	} else {
		fmt.Fprintln(out, "no free pod IP, and pods starved of one (ipStarved)")
	}
	if p.Decision == v1alpha1.DecisionWaiting {
		fmt.Fprintf(out, "waiting: seen above threshold in %s; nothing is evicted until the pressure lasts (pressureSamples)\n", p.PressureSeen)
	}
	plan := "plan"
	if p.Decision == v1alpha1.DecisionWaiting {
		plan = "plan if the pressure lasts, by the figures of now"
	}
	if p.Relieves && len(p.After) == 0 {
		fmt.Fprintf(out, "%s: %d eviction(s)\n", plan, p.Evictions)
	} else if p.Relieves {
		fmt.Fprintf(out, "%s: %d eviction(s), after which %s\n", plan, p.Evictions, figureList(p.After))
	} else if p.Decision == v1alpha1.DecisionBudgetSpent {
		fmt.Fprintf(out, "%s: none now: %s; nothing is evicted until the window slides past enough earlier evictions (evictionBudget)\n", plan, p.Budget)
	} else {
		fmt.Fprintf(out, "%s: none; no eviction within the limits brings the node to its threshold (at best %s), so nothing is evicted and a %s Warning Event is recorded on the Node\n",
			plan, figureList(p.After), relievenodepressure.ReasonNodePressureUnrelievable)
	}
	if len(p.Pods) == 0 {
		fmt.Fprintln(out, "no pods on the node")
		return
	}
	memory := p.Pods[0].FreesMemoryBytes != nil
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	if memory {
		fmt.Fprintln(w, "\n#\tPOD\tPRIORITY\tFREES PIDS\tFREES MEMORY\tDECISION")
	} else {
		fmt.Fprintln(w, "\n#\tPOD\tPRIORITY\tFREES PIDS\tDECISION")
	}
	for i, e := range p.Pods {
		decision := "skip: " + e.Reason
		if e.Evict {
			decision = fmt.Sprintf("EVICT %d: %s", e.EvictionOrder, e.Reason)
		}
		pod := e.Namespace + "/" + e.Name
		if memory {
			fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%s\t%s\n", i+1, pod, e.Priority, e.FreesPIDs,
				resource.NewQuantity(*e.FreesMemoryBytes, resource.BinarySI), decision)
			continue
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%d\t%s\n", i+1, pod, e.Priority, e.FreesPIDs, decision)
	}
	w.Flush()
}

// figureList renders figures as the plugin logs them: "name value, ...".
func figureList(fs []v1alpha1.Figure) string {
	parts := make([]string, 0, len(fs))
	for _, f := range fs {
		parts = append(parts, f.Name+" "+f.Value)
	}
	return strings.Join(parts, ", ")
}

// copyCluster lists what the descheduler's dry-run sandbox mirrors (nodes,
// pods, namespaces, priority classes, PodDisruptionBudgets, PVCs) into a fake
// clientset: the plugin and the evictor run against the copy, so nothing they
// do reaches the cluster.
func copyCluster(ctx context.Context, client kubernetes.Interface) (*fake.Clientset, error) {
	var objs []runtime.Object
	opts := metav1.ListOptions{}
	nodes, err := client.CoreV1().Nodes().List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i := range nodes.Items {
		objs = append(objs, &nodes.Items[i])
	}
	pods, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i := range pods.Items {
		objs = append(objs, &pods.Items[i])
	}
	namespaces, err := client.CoreV1().Namespaces().List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i := range namespaces.Items {
		objs = append(objs, &namespaces.Items[i])
	}
	classes, err := client.SchedulingV1().PriorityClasses().List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i := range classes.Items {
		objs = append(objs, &classes.Items[i])
	}
	pdbs, err := client.PolicyV1().PodDisruptionBudgets(metav1.NamespaceAll).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i := range pdbs.Items {
		objs = append(objs, &pdbs.Items[i])
	}
	pvcs, err := client.CoreV1().PersistentVolumeClaims(metav1.NamespaceAll).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for i := range pvcs.Items {
		objs = append(objs, &pvcs.Items[i])
	}
	return fake.NewClientset(objs...), nil
}

// maxSandboxFailures bounds the Events copySandboxFailures lists.
const maxSandboxFailures = 1000

// copySandboxFailures copies the kubelet's FailedCreatePodSandBox Events
// from node into the sandbox, which the descheduler's dry-run mirror lacks:
// the ipStarved trigger reads them. It returns a note when they cannot be
// listed; the plan then finds no pod starved of a pod IP.
func copySandboxFailures(ctx context.Context, client kubernetes.Interface, sandbox *fake.Clientset, node string) string {
	list, err := client.CoreV1().Events(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("reason", ipstarved.ReasonFailedCreatePodSandBox).String(),
		Limit:         maxSandboxFailures,
	})
	if err != nil {
		return fmt.Sprintf("the kubelet's %s Events could not be listed (%v): the plan finds no pod starved of a pod IP", ipstarved.ReasonFailedCreatePodSandBox, err)
	}
	for i := range list.Items {
		if e := &list.Items[i]; e.Source.Host == node {
			if err := sandbox.Tracker().Add(e); err != nil {
				return fmt.Sprintf("copying Event %s/%s: %v", e.Namespace, e.Name, err)
			}
		}
	}
	return ""
}

// planningRegistry is headroom-descheduler's registry (the descheduler's
// in-tree plugins and RelieveNodePressure), whose RelieveNodePressure
// builder hands the plugin it builds to the caller. It becomes the
// descheduler's global registry too: its policy decoding reads the plugins'
// args types there, as in headroom-descheduler.
func planningRegistry() (pluginregistry.Registry, **relievenodepressure.RelieveNodePressure) {
	registry := pluginregistry.NewRegistry()
	descheduler.RegisterDefaultPlugins(registry)
	var built *relievenodepressure.RelieveNodePressure
	u := relievenodepressure.Utilities()
	builder := func(ctx context.Context, args runtime.Object, handle frameworktypes.Handle) (frameworktypes.Plugin, error) {
		p, err := u.PluginBuilder(ctx, args, handle)
		if err == nil {
			built, _ = p.(*relievenodepressure.RelieveNodePressure)
		}
		return p, err
	}
	pluginregistry.Register(relievenodepressure.PluginName, builder, u.PluginType, u.PluginArgInstance, u.PluginArgValidator, u.PluginArgDefaulter, registry)
	pluginregistry.PluginRegistry = registry
	return registry, &built
}

// loadPolicy decodes, validates and defaults the DeschedulerPolicy of f as
// the descheduler does.
func loadPolicy(f *configFile, client kubernetes.Interface, registry pluginregistry.Registry) (*api.DeschedulerPolicy, string, error) {
	// The descheduler reads its policy from a file.
	dir, err := os.MkdirTemp("", "kubectl-headroom-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, f.data, 0o600); err != nil {
		return nil, "", err
	}
	policy, err := descheduler.LoadPolicyConfig(path, client, registry)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", f.source, err)
	}
	return policy, f.source, nil
}

// relieveProfile is the policy's first profile that enables
// RelieveNodePressure at the deschedule extension point.
func relieveProfile(policy *api.DeschedulerPolicy, source string) (*api.DeschedulerProfile, error) {
	for i := range policy.Profiles {
		if slices.Contains(policy.Profiles[i].Plugins.Deschedule.Enabled, relievenodepressure.PluginName) {
			return &policy.Profiles[i], nil
		}
	}
	return nil, fmt.Errorf("%s: no profile enables %s in plugins.deschedule", source, relievenodepressure.PluginName)
}

// evictorChecks is a log sink that keeps, by pod, the checks DefaultEvictor
// logs a pod fails (its Filter's V(4) line) and drops everything else.
type evictorChecks struct {
	mu    sync.Mutex
	byPod map[string]string
}

func (c *evictorChecks) Init(klog.RuntimeInfo)          {}
func (c *evictorChecks) Enabled(int) bool               { return true }
func (c *evictorChecks) Error(error, string, ...any)    {}
func (c *evictorChecks) WithValues(...any) klog.LogSink { return c }
func (c *evictorChecks) WithName(string) klog.LogSink   { return c }

func (c *evictorChecks) Info(_ int, msg string, kv ...any) {
	if msg != "Pod fails the following checks" {
		return
	}
	var pod, checks string
	for i := 0; i+1 < len(kv); i += 2 {
		switch kv[i] {
		case "pod":
			pod = fmt.Sprint(kv[i+1])
		case "checks":
			checks = fmt.Sprint(kv[i+1])
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byPod[pod] = checks
}

func (c *evictorChecks) of(pod *corev1.Pod) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.byPod[klog.KObj(pod).String()]
	return s, ok
}
