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
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apimachinery/pkg/util/sets"

	"github.com/headroom-k8s/headroom/apis/config"
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
	cmd := &cobra.Command{
		Use:   "node NAME [--pod-file POD.yaml | --pod POD]",
		Short: "Print each plugin's figures for a node and, for a pod, Filter's verdict and the scores",
		Long: `explain node prints the figures each of Headroom's plugins reads for the node:
its PID sample and the use estimated from it, and its memory kill order. Given
a pod (a spec in a file, or a pod of the cluster: a bound one is taken off
its node first, as if it were scheduled again), it runs a scheduling cycle of the profile's Headroom plugins (--config, --scheduler-name)
over every node, as the kube-scheduler does, and prints Filter's verdict for
the node, each plugin's score, and how the node ranks among those that pass.
The kube-scheduler's default plugins are not run.`,
		Example: `  kubectl headroom explain node worker-1
  kubectl headroom explain node worker-1 --pod-file pod.yaml
  kubectl headroom explain node worker-1 --pod my-pending-pod -n team`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: o.completeNodes,
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
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
			out := cmd.OutOrStdout()
			now := time.Now()
			fmt.Fprintf(out, "node %s (profile %q of %s)\n\n", name, p.cfg.SchedulerName, p.source)
			if pod != nil {
				c = c.without(pod)
			}
			writePIDs(out, node, c.pods[name], pidArgs, p, now)
			writeIPs(out, node, c.pods[name], ipArgs, p, now)
			n, oomErr := oomkill.NewNode(node, c.pods[name], estimateOf(oomArgs))
			fmt.Fprintf(out, "\n%s", section(p, oomrisk.Name, "memory"))
			if oomErr != nil {
				fmt.Fprintf(out, "unknown: %v\n", oomErr)
			} else {
				fmt.Fprint(out, n.Explain())
			}
			if pod == nil {
				return nil
			}
			d, err := decide(cmd.Context(), p, c, pod)
			if err != nil {
				return err
			}
			writeDecision(out, pod, p, d, name)
			if n != nil {
				i := slices.IndexFunc(d.verdicts, func(v verdict) bool { return v.node == name })
				writeOOMPlacement(out, n, pod, oomArgs, p, &d.verdicts[i], d.skippedScore.Has(oomrisk.Name))
			}
			return nil
		},
	}
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
	s, err := ipstats.ParseNode(node.Annotations, now, args.MaxSampleAge.Duration)
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

// writeDecision prints Filter's verdict on the node and its scores.
func writeDecision(out io.Writer, pod *corev1.Pod, p *profile, d *decision, name string) {
	pids, err := pidstats.PodPIDs(pod, defaultPodPIDs(p))
	pidsNote := ""
	if err != nil {
		pidsNote = fmt.Sprintf(" (%v)", err)
	}
	fmt.Fprintf(out, "\npod %s/%s: %d PIDs%s\n", pod.Namespace, pod.Name, pids, pidsNote)
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
	if mine.filter != nil {
		fmt.Fprintf(out, "Filter: fails: %s\n", filterReason(mine.filter))
	} else {
		fmt.Fprintln(out, "Filter: passes")
	}
	fmt.Fprintf(out, "nodes that pass Filter: %d of %d\n", len(feasible), len(d.verdicts))
	if mine.filter != nil || len(feasible) == 0 {
		return
	}
	if !d.preScore.IsSuccess() {
		fmt.Fprintf(out, "Score: none, PreScore: %s\n", filterReason(d.preScore))
		return
	}
	var terms []string
	for _, s := range mine.scores {
		w := max(p.weights[s.Name], 1)
		terms = append(terms, fmt.Sprintf("%s %d × weight %d", s.Name, s.Score/w, w))
	}
	if len(terms) == 0 {
		terms = append(terms, "no plugin scores the pod")
	}
	slices.SortStableFunc(feasible, func(a, b verdict) int {
		if a.total != b.total {
			return cmp.Compare(b.total, a.total)
		}
		return strings.Compare(a.node, b.node)
	})
	rank := slices.IndexFunc(feasible, func(v verdict) bool { return v.node == name }) + 1
	fmt.Fprintf(out, "Score: %s = %d; rank %d of %d (best: %s, %d)\n",
		strings.Join(terms, " + "), mine.total, rank, len(feasible), feasible[0].node, feasible[0].total)
	if d.skippedScore.Len() > 0 {
		fmt.Fprintf(out, "not scored (PreScore skipped them: every node would score the same): %s\n",
			strings.Join(sets.List(d.skippedScore), ", "))
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
