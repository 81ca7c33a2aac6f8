package app

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	fwk "k8s.io/kube-scheduler/framework"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/apis/config/validation"
	"github.com/headroom-k8s/headroom/apis/kubectl/v1alpha1"
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
	var output *outputFlags
	cmd := &cobra.Command{
		Use:   "explain-oom NODE [--pod-file POD.yaml] [-o FORMAT]",
		Short: "Print a node's OOM kill order and the risk a pod would have there",
		Long: `explain-oom prints the order in which the kernel's OOM killer would take the
containers on a node if each used its worst-case memory (its limit, or an
estimate without one), with the oom_score_adj the kubelet gives each. Given a
pod spec, it also prints the order with the pod placed there, the pod's
assessment and the score OOMRisk gives the node. The args are the profile's
(--config, --scheduler-name), overridden by the flags below. It only reads
from the API server: the node, and the pods bound to it.

-o json, -o yaml, -o jsonpath=... and -o go-template=... print an
OOMKillOrder (kubectl.headroom.dev/v1alpha1): the kill order with its totals
and, given a pod, the order with it placed, its assessment and the score.`,
		Example: `  kubectl headroom explain-oom worker-1
  kubectl headroom explain-oom worker-1 --pod-file pod.yaml
  # The containers the OOM killer would take, one a line.
  kubectl headroom explain-oom worker-1 -o json |
    jq -r '.order.containers[] | select(.atRisk) | "\(.namespace)/\(.pod) \(.container)"'`,
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
			printer, err := output.printer()
			if err != nil {
				return err
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
			order := &v1alpha1.OOMKillOrder{
				TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "OOMKillOrder"},
				ObjectMeta: metav1.ObjectMeta{Name: node},
				Order:      killOrder(n.Explain()),
			}
			if sampleErr != nil && !errors.Is(sampleErr, memstats.ErrNoStats) {
				order.MemorySample = sampleErr.Error()
			}
			if pod != nil {
				d, err := decide(cmd.Context(), p, c, pod)
				if err != nil {
					return err
				}
				order.Placement = oomPlacement(n, pod, &a, p, &d.verdicts[0], d.skippedScore.Has(oomrisk.Name))
			}
			return printOrTable(cmd.OutOrStdout(), printer, order, func(out io.Writer) {
				if order.MemorySample != "" {
					fmt.Fprintf(out, "memory sample: none used (%s): declared figures only\n", order.MemorySample)
				}
				fmt.Fprint(out, n.Explain())
				if order.Placement != nil {
					writeOOMPlacement(out, n, pod, order.Placement)
				}
			})
		},
	}
	output = addOutputFlags(cmd, "OOMKillOrder")
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

// oomPlacement is the kill order with pod placed on n, the pod's
// assessment and the score OOMRisk gave the node in v; skipped tells that
// OOMRisk's PreScore skipped scoring in that cycle.
func oomPlacement(n *oomkill.Node, pod *corev1.Pod, args *config.OOMRiskArgs, p *profile, v *verdict, skipped bool) *v1alpha1.OOMPlacement {
	in := oomkill.NewIncoming(pod)
	a := n.Assess(in)
	podWorst := in.WorstOn(n)
	out := &v1alpha1.OOMPlacement{
		Pod:                  pod.Namespace + "/" + pod.Name,
		QOS:                  string(in.QOS()),
		Order:                killOrder(n.ExplainWith(in)),
		ShortfallBeforeBytes: a.ShortfallBefore,
		ShortfallAfterBytes:  a.ShortfallAfter,
		Rank:                 a.Rank,
		OwnRiskPPM:           a.RiskPPM,
		PodWorstBytes:        podWorst,
		CollateralBytes:      a.CollateralBytes,
	}
	if a.Measured {
		out.Now = &v1alpha1.OOMAssessmentNow{
			ShortfallBeforeBytes: a.Now.ShortfallBefore, ShortfallAfterBytes: a.Now.ShortfallAfter,
			OwnRiskPPM: a.Now.RiskPPM, PodNowBytes: a.Now.PodNow, CollateralBytes: a.Now.CollateralBytes,
		}
	}
	terms := fmt.Sprintf("own risk %d ppm × weight %d, collateral %d ppm × weight %d",
		a.RiskPPM, args.OwnRiskWeight, oomkill.PPM(a.CollateralBytes, podWorst), args.CollateralWeight)
	score, ok := v.score(p, oomrisk.Name)
	switch {
	case v.filter != nil:
		out.ScoreReason = "the node fails Filter: " + filterReason(v.filter)
	case !ok && in.QOS() == corev1.PodQOSGuaranteed:
		out.ScoreReason = "OOMRisk skips Guaranteed pods (the same on every node)"
	case !ok && skipped:
		// PreScore found the pod fits every node's slack: Score would give
		// every node MaxNodeScore, as the assessment shows for this one.
		out.Score = ptr.To(fwk.MaxNodeScore)
		out.ScoreReason = fmt.Sprintf("%s (Score skipped: the pod fits every node's memory slack, so every node scores %d)", terms, fwk.MaxNodeScore)
	case !ok:
		out.ScoreReason = "OOMRisk is not a score plugin of the profile"
	default:
		out.Score, out.ScoreReason = ptr.To(score), terms
	}
	return out
}

// writeOOMPlacement prints the placement of pod on n.
func writeOOMPlacement(out io.Writer, n *oomkill.Node, pod *corev1.Pod, pl *v1alpha1.OOMPlacement) {
	in := oomkill.NewIncoming(pod)
	fmt.Fprintf(out, "\nwith %s (%s):\n%s", pl.Pod, pl.QOS, n.ExplainWith(in))
	fmt.Fprintf(out, "\nshortfall %s before, %s after; rank %d; own risk %d ppm of %s; collateral %s\n",
		quantity(pl.ShortfallBeforeBytes), quantity(pl.ShortfallAfterBytes), pl.Rank, pl.OwnRiskPPM, quantity(pl.PodWorstBytes), quantity(pl.CollateralBytes))
	if now := pl.Now; now != nil {
		fmt.Fprintf(out, "now (measured): shortfall %s before, %s after; own risk %d ppm of %s; collateral %s\n",
			quantity(now.ShortfallBeforeBytes), quantity(now.ShortfallAfterBytes), now.OwnRiskPPM, quantity(now.PodNowBytes), quantity(now.CollateralBytes))
	}
	if pl.Score == nil {
		fmt.Fprintf(out, "score: none, %s\n", pl.ScoreReason)
		return
	}
	fmt.Fprintf(out, "score %d of %d: %s\n", *pl.Score, fwk.MaxNodeScore, pl.ScoreReason)
}

// killOrder is e as the typed output.
func killOrder(e oomkill.Explanation) v1alpha1.KillOrder {
	k := v1alpha1.KillOrder{
		CapacityBytes: e.Capacity, AllocatableBytes: e.Allocatable,
		WorstCaseBytes: e.TotalWorst, ShortfallBytes: e.Shortfall, AtRiskBytes: e.AtRiskBytes,
		Containers: []v1alpha1.OOMVictim{},
	}
	if e.Measured {
		k.Measured = &v1alpha1.MeasuredMemory{UsedBytes: e.UsedNow, ShortfallBytes: e.ShortfallNow, AtRiskBytes: e.AtRiskNowBytes}
	}
	for _, v := range e.Order {
		c := v1alpha1.OOMVictim{
			Namespace: v.Namespace, Pod: v.Pod, Container: v.Container, Sidecar: v.Sidecar, Incoming: v.Incoming,
			QOS: string(v.QOS), OOMScoreAdj: v.Adj, WorstBytes: v.Worst, Estimated: v.Estimated,
			PointsBytes: v.Points, AtRisk: v.AtRisk,
		}
		if e.Measured {
			c.UsedBytes, c.Declared, c.AtRiskNow = ptr.To(v.Used), !v.Measured, ptr.To(v.AtRiskNow)
		}
		k.Containers = append(k.Containers, c)
	}
	return k
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
