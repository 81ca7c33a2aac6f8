package app

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/apis/config/validation"
	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/plugins/oomrisk"
)

// newExplainOOMCommand returns explain-oom: a node's kill order as OOMRisk
// sees it and, given a pod, where the pod would land in it and the score
// OOMRisk gives the node. It reads the node and the pods bound to it.
func newExplainOOMCommand(o *options) *cobra.Command {
	var node, podFile string
	var overrides config.OOMRiskArgs
	cmd := &cobra.Command{
		Use:   "explain-oom NODE [--pod-file POD.yaml]",
		Short: "Print a node's OOM kill order and the risk a pod would have there",
		Long: `explain-oom prints the order in which the kernel's OOM killer would take the
containers on a node if each used its worst-case memory (its limit, or an
estimate without one), with the oom_score_adj the kubelet gives each. Given a
pod spec, it also prints the order with the pod placed there, the pod's
assessment and the score OOMRisk gives the node. The args are the profile's
(--config, --scheduler-name), overridden by the flags below. It only reads
from the API server: the node, and the pods bound to it.`,
		Example: `  kubectl headroom explain-oom worker-1
  kubectl headroom explain-oom worker-1 --pod-file pod.yaml`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: o.completeNodes,
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case len(args) == 1 && node != "" && node != args[0]:
				return fmt.Errorf("node %s and --node %s: give one", args[0], node)
			case len(args) == 1:
				node = args[0]
			case node == "":
				return fmt.Errorf("a NODE is required")
			default:
				fmt.Fprintln(o.streams.ErrOut, "Note: --node is deprecated; give the node as the argument: explain-oom NODE")
			}
			s, err := o.setup(cmd.Context())
			if err != nil {
				return err
			}
			p := s.profile
			a := *s.oomArgs
			fs := cmd.Flags()
			for flag, f := range map[string]struct{ dst, src *int64 }{
				"own-risk-weight":               {&a.OwnRiskWeight, &overrides.OwnRiskWeight},
				"collateral-weight":             {&a.CollateralWeight, &overrides.CollateralWeight},
				"no-limit-request-percent":      {&a.NoLimitRequestPercent, &overrides.NoLimitRequestPercent},
				"no-limit-allocatable-permille": {&a.NoLimitAllocatablePermille, &overrides.NoLimitAllocatablePermille},
			} {
				if fs.Changed(flag) {
					*f.dst = *f.src
				}
			}
			if err := validation.ValidateOOMRiskArgs(field.NewPath("OOMRiskArgs"), &a); err != nil {
				return err
			}
			p.setArgs(oomrisk.Name, &a)
			var pod *corev1.Pod
			if podFile != "" {
				if pod, err = readPod(podFile, o.namespace()); err != nil {
					return err
				}
			}
			c, err := getNode(cmd.Context(), s.client, node)
			if err != nil {
				return err
			}
			opts, _, sampleErr := oomkill.MemorySampleOf(c.nodes[0], time.Now(), a.MaxSampleAge.Duration)
			n, err := oomkill.NewNode(c.nodes[0], c.pods[node], estimateOf(&a), opts...)
			if err != nil {
				return err
			}
			if sampleErr != nil && !errors.Is(sampleErr, memstats.ErrNoStats) {
				fmt.Fprintf(cmd.OutOrStdout(), "memory sample: none used (%v): declared figures only\n", sampleErr)
			}
			fmt.Fprint(cmd.OutOrStdout(), n.Explain())
			if pod == nil {
				return nil
			}
			d, err := decide(cmd.Context(), p, c, pod)
			if err != nil {
				return err
			}
			writeOOMPlacement(cmd.OutOrStdout(), n, pod, &a, p, &d.verdicts[0], d.skippedScore.Has(oomrisk.Name))
			return nil
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&node, "node", "", "node to explain")
	// The node was a flag before it was the argument: kept, hidden, for
	// scripts written then.
	_ = fs.MarkHidden("node")
	fs.StringVar(&podFile, "pod-file", "", "YAML or JSON of a Pod to place on the node")
	fs.Int64Var(&overrides.OwnRiskWeight, "own-risk-weight", 0, "OOMRiskArgs ownRiskWeight (default: the profile's)")
	fs.Int64Var(&overrides.CollateralWeight, "collateral-weight", 0, "OOMRiskArgs collateralWeight (default: the profile's)")
	fs.Int64Var(&overrides.NoLimitRequestPercent, "no-limit-request-percent", 0, "OOMRiskArgs noLimitRequestPercent (default: the profile's)")
	fs.Int64Var(&overrides.NoLimitAllocatablePermille, "no-limit-allocatable-permille", 0, "OOMRiskArgs noLimitAllocatablePermille (default: the profile's)")
	return cmd
}

// estimateOf is the worst-case estimate the OOMRisk args describe.
func estimateOf(args *config.OOMRiskArgs) oomkill.Estimate {
	return oomkill.Estimate{
		RequestMultiplierPercent:      args.NoLimitRequestPercent,
		FractionOfAllocatablePermille: args.NoLimitAllocatablePermille,
	}
}

// writeOOMPlacement prints the kill order with pod placed on n, the pod's
// assessment and the score OOMRisk gave the node in v; skipped tells that
// OOMRisk's PreScore skipped scoring in that cycle.
func writeOOMPlacement(out io.Writer, n *oomkill.Node, pod *corev1.Pod, args *config.OOMRiskArgs, p *profile, v *verdict, skipped bool) {
	in := oomkill.NewIncoming(pod)
	a := n.Assess(in)
	podWorst := in.WorstOn(n)
	fmt.Fprintf(out, "\nwith %s/%s (%s):\n%s", pod.Namespace, pod.Name, in.QOS(), n.ExplainWith(in))
	fmt.Fprintf(out, "\nshortfall %s before, %s after; rank %d; own risk %d ppm of %s; collateral %s\n",
		quantity(a.ShortfallBefore), quantity(a.ShortfallAfter), a.Rank, a.RiskPPM, quantity(podWorst), quantity(a.CollateralBytes))
	if a.Measured {
		fmt.Fprintf(out, "now (measured): shortfall %s before, %s after; own risk %d ppm of %s; collateral %s\n",
			quantity(a.Now.ShortfallBefore), quantity(a.Now.ShortfallAfter), a.Now.RiskPPM, quantity(a.Now.PodNow), quantity(a.Now.CollateralBytes))
	}
	score, ok := v.score(p, oomrisk.Name)
	switch {
	case v.filter != nil:
		fmt.Fprintf(out, "score: none, the node fails Filter: %s\n", filterReason(v.filter))
	case !ok && in.QOS() == corev1.PodQOSGuaranteed:
		fmt.Fprintln(out, "score: none, OOMRisk skips Guaranteed pods (the same on every node)")
	case !ok && skipped:
		// PreScore found the pod fits every node's slack: Score would give
		// every node MaxNodeScore, as the assessment shows for this one.
		fmt.Fprintf(out, "score %d of %d: own risk %d ppm × weight %d, collateral %d ppm × weight %d (Score skipped: the pod fits every node's memory slack, so every node scores %d)\n",
			fwk.MaxNodeScore, fwk.MaxNodeScore, a.RiskPPM, args.OwnRiskWeight, oomkill.PPM(a.CollateralBytes, podWorst), args.CollateralWeight, fwk.MaxNodeScore)
	case !ok:
		fmt.Fprintln(out, "score: none, OOMRisk is not a score plugin of the profile")
	default:
		fmt.Fprintf(out, "score %d of %d: own risk %d ppm × weight %d, collateral %d ppm × weight %d\n",
			score, fwk.MaxNodeScore, a.RiskPPM, args.OwnRiskWeight, oomkill.PPM(a.CollateralBytes, podWorst), args.CollateralWeight)
	}
}

// score returns the named plugin's score of the node, before its weight.
func (v *verdict) score(p *profile, plugin string) (int64, bool) {
	for _, s := range v.scores {
		if s.Name == plugin {
			return s.Score / max(p.weights[plugin], 1), true
		}
	}
	return 0, false
}

// filterReason is a Filter status as the scheduler reports it.
func filterReason(s *fwk.Status) string {
	if s.Plugin() != "" {
		return s.Plugin() + ": " + s.Message()
	}
	return s.Message()
}
