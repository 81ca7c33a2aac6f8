package app

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/apis/kubectl/v1alpha1"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/plugins/nodepids"
	"github.com/headroom-k8s/headroom/plugins/oomrisk"
)

func newExplainCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "explain",
		Short: "Explain what Headroom's scheduler plugins decide",
	}
	cmd.AddCommand(newExplainNodeCommand(o))
	return cmd
}

func newExplainNodeCommand(o *options) *cobra.Command {
	var podFlags podFlags
	var output *outputFlags
	cmd := &cobra.Command{
		Use:   "node NAME [--pod-file POD.yaml | --pod POD] [-o FORMAT]",
		Short: "Print each plugin's figures for a node and, for a pod, Filter's verdict and the scores",
		Long: `explain node prints the figures each of Headroom's plugins reads for the node:
its PID sample and the use estimated from it, and its memory kill order. Given
a pod (a spec in a file, or a pod of the cluster: a bound one is taken off
its node first, as if it were scheduled again), it runs a scheduling cycle of the profile's Headroom plugins (--config, --scheduler-name)
over every node, as the kube-scheduler does, and prints Filter's verdict for
the node, each plugin's score, and how the node ranks among those that pass.
The kube-scheduler's default plugins are not run.

-o json, -o yaml, -o jsonpath=... and -o go-template=... print a
NodeExplanation (kubectl.headroom.dev/v1alpha1) with the same figures and
decision.`,
		Example: `  kubectl headroom explain node worker-1
  kubectl headroom explain node worker-1 --pod-file pod.yaml
  kubectl headroom explain node worker-1 --pod my-pending-pod -n team
  # Does the pending pod fit worker-1, and if not, which plugin says no?
  kubectl headroom explain node worker-1 --pod my-pending-pod -n team -o json |
    jq -r '.pod.verdict | .filter + " " + .filterPlugin'`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNodes,
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			printer, err := output.printer()
			if err != nil {
				return err
			}
			s, err := o.setup(cmd.Context())
			if err != nil {
				return err
			}
			p, pidArgs, ipArgs, oomArgs, client := s.profile, s.pidArgs, s.ipArgs, s.oomArgs, s.client
			pod, err := podFlags.get(cmd.Context(), client, o.namespace())
			if err != nil {
				return err
			}
			c, err := listCluster(cmd.Context(), client, "")
			if err != nil {
				return err
			}
			node := c.node(name)
			if node == nil {
				return fmt.Errorf("node %q not found", name)
			}
			now := time.Now()
			if pod != nil {
				c = c.without(pod)
			}
			// The PID and pod-IP figures as nodes shows them.
			h := nodeRows(&cluster{nodes: []*corev1.Node{node}, pods: c.pods}, pidArgs, ipArgs, p.ipSource(), oomArgs, now)[0].api(now)
			x := &v1alpha1.NodeExplanation{
				TypeMeta:               metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "NodeExplanation"},
				ObjectMeta:             metav1.ObjectMeta{Name: name},
				SchedulerConfiguration: p.source,
				Profile:                p.cfg.SchedulerName,
				PIDs:                   h.PIDs,
				PodIPs:                 h.PodIPs,
			}
			n, oomErr := oomkill.NewNode(node, c.pods[name], estimateOf(oomArgs))
			if oomErr != nil {
				x.MemoryMessage = oomErr.Error()
			} else {
				x.Memory = ptr.To(killOrder(n.Explain()))
			}
			if pod != nil {
				d, err := decide(cmd.Context(), p, c, pod)
				if err != nil {
					return err
				}
				x.Pod = podDecision(pod, p, d, name)
				if n != nil {
					i := slices.IndexFunc(d.verdicts, func(v verdict) bool { return v.node == name })
					x.Pod.OOM = oomPlacement(n, pod, oomArgs, p, &d.verdicts[i], d.skippedScore.Has(oomrisk.Name))
				}
			}
			return printOrTable(cmd.OutOrStdout(), printer, x, func(out io.Writer) {
				fmt.Fprintf(out, "node %s (profile %q of %s)\n\n", name, p.cfg.SchedulerName, p.source)
				writePIDs(out, node, c.pods[name], pidArgs, p, now)
				writeIPs(out, node, c.pods[name], ipArgs, p, now)
				fmt.Fprintf(out, "\n%s", section(p, oomrisk.Name, "memory"))
				if oomErr != nil {
					fmt.Fprintf(out, "unknown: %v\n", oomErr)
				} else {
					fmt.Fprint(out, n.Explain())
				}
				if x.Pod == nil {
					return
				}
				writeDecision(out, x.Pod, p)
				if x.Pod.OOM != nil {
					writeOOMPlacement(out, n, pod, x.Pod.OOM)
				}
			})
		},
	}
	output = addOutputFlags(cmd, "NodeExplanation")
	podFlags.addFlags(cmd.Flags())
	return cmd
}

// section heads the figures of one plugin, saying whether the profile runs it.
func section(p *profile, plugin, what string) string {
	if p.enabled(plugin) {
		return fmt.Sprintf("%s (%s):\n", what, plugin)
	}
	return fmt.Sprintf("%s (%s, not enabled in the profile):\n", what, plugin)
}

// writePIDs prints the node's PID figures as NodePIDs reads them.
func writePIDs(out io.Writer, node *corev1.Node, pods []*corev1.Pod, args *config.NodePIDsArgs, p *profile, now time.Time) {
	fmt.Fprint(out, section(p, nodepids.Name, "PIDs"))
	s, err := pidstats.ParseNode(node.Annotations, now, args.MaxSampleAge.Duration)
	if err != nil && !pidstats.IsStale(err) {
		fmt.Fprintf(out, "unknown: %v\n", err)
		return
	}
	estUsed := pidstats.EstimateUsed(s, pods, args.DefaultPodPIDs)
	fmt.Fprintf(out, "capacity %d, reserved %d, allocatable %d\n", s.Capacity, s.Reserved, s.Allocatable())
	fmt.Fprintf(out, "used %d when sampled %s ago (%s)", s.Used, duration.HumanDuration(now.Sub(s.SampledAt)), s.SampledAt.UTC().Format(time.RFC3339))
	if err != nil {
		fmt.Fprintf(out, ": stale, %v", err)
	}
	fmt.Fprintf(out, "\nestimated used %d (%+d for pods placed since the sample, %d PIDs each without %s), free %d\n",
		estUsed, estUsed-s.Used, args.DefaultPodPIDs, pidstats.AnnotationPodPIDs, max(s.Allocatable()-estUsed, 0))
}

// writeIPs prints the node's pod-IP figures as NodeIPs reads them.
func writeIPs(out io.Writer, node *corev1.Node, pods []*corev1.Pod, args *config.NodeIPsArgs, p *profile, now time.Time) {
	fmt.Fprintf(out, "\n%s", section(p, nodeips.Name, "pod IPs"))
	s, err := p.ipSource().Read(node, now, args.MaxSampleAge.Duration)
	if err != nil && !sample.IsStale(err) {
		fmt.Fprintf(out, "unknown: %v\n", err)
		return
	}
	estUsed := ipstats.EstimateUsed(s, slices.Values(pods))
	fmt.Fprintf(out, "capacity %d, used %d when sampled %s ago (%s)", s.Capacity, s.Used,
		duration.HumanDuration(now.Sub(s.SampledAt)), s.SampledAt.UTC().Format(time.RFC3339))
	if err != nil {
		fmt.Fprintf(out, ": stale, %v", err)
	}
	if s.LeakedKnown {
		fmt.Fprintf(out, "\nleaked %d of the used (allocated to no pod sandbox of the node; they count as used until freed)", s.Leaked)
	} else {
		fmt.Fprintf(out, "\nleaked: not published (the node's IPAM cannot tell, or no container runtime to ask)")
	}
	fmt.Fprintf(out, "\nestimated used %d (%+d for pods on the pod network placed since the sample), free %d, floor %d\n",
		estUsed, estUsed-s.Used, max(s.Capacity-estUsed, 0), args.MinFreeIPs)
}

// podDecision is the decision d for pod on the node.
func podDecision(pod *corev1.Pod, p *profile, d *decision, name string) *v1alpha1.PodDecision {
	pd := &v1alpha1.PodDecision{Name: pod.Namespace + "/" + pod.Name, Nodes: len(d.verdicts)}
	var err error
	if pd.PIDs, err = pidstats.PodPIDs(pod, defaultPodPIDs(p)); err != nil {
		pd.PIDsMessage = err.Error()
	}
	var feasible []verdict
	var mine *verdict
	for i := range d.verdicts {
		v := &d.verdicts[i]
		if v.filter == nil {
			feasible = append(feasible, *v)
		}
		if v.node == name {
			mine = v
		}
	}
	pd.Feasible = len(feasible)
	pd.Verdict.Filter = "passes"
	if mine.filter != nil {
		pd.Verdict.Filter, pd.Verdict.FilterPlugin, pd.Verdict.FilterMessage = "fails", mine.filter.Plugin(), mine.filter.Message()
		return pd
	}
	if len(feasible) == 0 {
		return pd
	}
	if !d.preScore.IsSuccess() {
		pd.ScoreMessage = filterReason(d.preScore)
		return pd
	}
	pd.Verdict.Score = ptr.To(mine.total)
	for _, s := range mine.scores {
		pd.Verdict.PluginScores = append(pd.Verdict.PluginScores, v1alpha1.PluginScore{Plugin: s.Name, Score: s.Score})
	}
	slices.SortStableFunc(feasible, func(a, b verdict) int {
		if a.total != b.total {
			return cmp.Compare(b.total, a.total)
		}
		return strings.Compare(a.node, b.node)
	})
	pd.Rank = slices.IndexFunc(feasible, func(v verdict) bool { return v.node == name }) + 1
	pd.Best, pd.BestScore = feasible[0].node, ptr.To(feasible[0].total)
	pd.NotScored = sets.List(d.skippedScore)
	return pd
}

// writeDecision prints Filter's verdict on the node and its scores.
func writeDecision(out io.Writer, pd *v1alpha1.PodDecision, p *profile) {
	pidsNote := ""
	if pd.PIDsMessage != "" {
		pidsNote = fmt.Sprintf(" (%s)", pd.PIDsMessage)
	}
	fmt.Fprintf(out, "\npod %s: %d PIDs%s\n", pd.Name, pd.PIDs, pidsNote)
	v := pd.Verdict
	if v.Filter == "fails" {
		reason := v.FilterMessage
		if v.FilterPlugin != "" {
			reason = v.FilterPlugin + ": " + reason
		}
		fmt.Fprintf(out, "Filter: fails: %s\n", reason)
	} else {
		fmt.Fprintln(out, "Filter: passes")
	}
	fmt.Fprintf(out, "nodes that pass Filter: %d of %d\n", pd.Feasible, pd.Nodes)
	if v.Filter == "fails" || pd.Feasible == 0 {
		return
	}
	if v.Score == nil {
		fmt.Fprintf(out, "Score: none, PreScore: %s\n", pd.ScoreMessage)
		return
	}
	var terms []string
	for _, s := range v.PluginScores {
		w := max(p.weights[s.Plugin], 1)
		terms = append(terms, fmt.Sprintf("%s %d × weight %d", s.Plugin, s.Score/w, w))
	}
	if len(terms) == 0 {
		terms = append(terms, "no plugin scores the pod")
	}
	fmt.Fprintf(out, "Score: %s = %d; rank %d of %d (best: %s, %d)\n",
		strings.Join(terms, " + "), *v.Score, pd.Rank, pd.Feasible, pd.Best, *pd.BestScore)
	if len(pd.NotScored) > 0 {
		fmt.Fprintf(out, "not scored (PreScore skipped them: every node would score the same): %s\n",
			strings.Join(pd.NotScored, ", "))
	}
}

// defaultPodPIDs is NodePIDs' PIDs of a pod without the annotation.
func defaultPodPIDs(p *profile) int64 {
	args, _ := p.figureArgs()
	if a, ok := args[nodepids.Name].(*config.NodePIDsArgs); ok {
		return a.DefaultPodPIDs
	}
	return 0
}
