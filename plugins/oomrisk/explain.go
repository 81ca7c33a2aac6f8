package oomrisk

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	fwk "k8s.io/kube-scheduler/framework"
	corev1defaults "k8s.io/kubernetes/pkg/apis/core/v1"

	"github.com/headroom-k8s/headroom/apis/config"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/apis/config/validation"
	"github.com/headroom-k8s/headroom/pkg/oomkill"
)

// explainOptions are explain-oom's flags.
type explainOptions struct {
	kubeconfig string
	node       string
	podFile    string
	args       config.OOMRiskArgs
}

// NewExplainCommand returns the explain-oom command: it prints a node's kill
// order as OOMRisk sees it and, given a pod spec, where the pod would land in
// it and the score OOMRisk would give the node. It only reads from the API
// server: the node, and the pods bound to it.
func NewExplainCommand() *cobra.Command {
	return newExplainCommand(func(kubeconfig string) (kubernetes.Interface, error) {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = kubeconfig
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
		if err != nil {
			return nil, err
		}
		return kubernetes.NewForConfig(cfg)
	})
}

func newExplainCommand(newClient func(kubeconfig string) (kubernetes.Interface, error)) *cobra.Command {
	o := explainOptions{args: config.OOMRiskArgs{
		OwnRiskWeight:              configv1.DefaultOwnRiskWeight,
		CollateralWeight:           configv1.DefaultCollateralWeight,
		NoLimitRequestPercent:      configv1.DefaultNoLimitRequestPercent,
		NoLimitAllocatablePermille: configv1.DefaultNoLimitAllocatablePermille,
	}}
	cmd := &cobra.Command{
		Use:   "explain-oom --node NAME [--pod-file POD.yaml]",
		Short: "Print a node's OOM kill order and the risk a pod would have there",
		Long: `explain-oom prints the order in which the kernel's OOM killer would take the
containers on a node if each used its worst-case memory (its limit, or an
estimate without one), with the oom_score_adj the kubelet gives each. Given a
pod spec, it also prints the order with the pod placed there, the pod's
assessment and the score OOMRisk would give the node. It only reads from the
API server.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := validation.ValidateOOMRiskArgs(nil, &o.args); err != nil {
				return err
			}
			client, err := newClient(o.kubeconfig)
			if err != nil {
				return err
			}
			var pod *corev1.Pod
			if o.podFile != "" {
				if pod, err = readPod(o.podFile); err != nil {
					return err
				}
			}
			return explain(cmd.Context(), client, o.node, pod, &o.args, cmd.OutOrStdout())
		},
	}
	// kube-scheduler's help prints its own flag sections: use cobra's.
	plain := &cobra.Command{}
	cmd.SetHelpFunc(plain.HelpFunc())
	cmd.SetUsageFunc(plain.UsageFunc())

	fs := cmd.Flags()
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; default: $KUBECONFIG or ~/.kube/config")
	fs.StringVar(&o.node, "node", "", "node to explain")
	fs.StringVar(&o.podFile, "pod-file", "", "YAML or JSON of a Pod to place on the node")
	fs.Int64Var(&o.args.OwnRiskWeight, "own-risk-weight", o.args.OwnRiskWeight, "OOMRiskArgs ownRiskWeight")
	fs.Int64Var(&o.args.CollateralWeight, "collateral-weight", o.args.CollateralWeight, "OOMRiskArgs collateralWeight")
	fs.Int64Var(&o.args.NoLimitRequestPercent, "no-limit-request-percent", o.args.NoLimitRequestPercent, "OOMRiskArgs noLimitRequestPercent")
	fs.Int64Var(&o.args.NoLimitAllocatablePermille, "no-limit-allocatable-permille", o.args.NoLimitAllocatablePermille, "OOMRiskArgs noLimitAllocatablePermille")
	_ = cmd.MarkFlagRequired("node")
	return cmd
}

func readPod(path string) (*corev1.Pod, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("%s: want a Pod, got %T", path, obj)
	}
	// As the API server would: requests default to limits, which decides
	// the QoS class.
	corev1defaults.SetObjectDefaults_Pod(pod)
	if pod.Namespace == "" {
		pod.Namespace = metav1.NamespaceDefault
	}
	return pod, nil
}

// explain writes the node's kill order and, for a pod, the placement's
// assessment and score.
func explain(ctx context.Context, client kubernetes.Interface, nodeName string, pod *corev1.Pod, args *config.OOMRiskArgs, out io.Writer) error {
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	list, err := client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", nodeName).String(),
	})
	if err != nil {
		return err
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		if list.Items[i].Spec.NodeName == nodeName { // not every server honours field selectors
			pods = append(pods, &list.Items[i])
		}
	}
	n, err := oomkill.NewNode(node, pods, estimateOf(args))
	if err != nil {
		return err
	}
	fmt.Fprint(out, n.Explain())
	if pod == nil {
		return nil
	}

	in := oomkill.NewIncoming(pod)
	a := n.Assess(in)
	podWorst := in.WorstOn(n)
	fmt.Fprintf(out, "\nwith %s/%s (%s):\n%s", pod.Namespace, pod.Name, in.QOS(), n.ExplainWith(in))
	fmt.Fprintf(out, "\nshortfall %s before, %s after; rank %d; own risk %d ppm of %s; collateral %s\n",
		quantity(a.ShortfallBefore), quantity(a.ShortfallAfter), a.Rank, a.RiskPPM, quantity(podWorst), quantity(a.CollateralBytes))
	if in.QOS() == corev1.PodQOSGuaranteed {
		fmt.Fprintln(out, "score: none, OOMRisk skips Guaranteed pods (the same on every node)")
		return nil
	}
	s := strategy{ownRiskWeight: args.OwnRiskWeight, collateralWeight: args.CollateralWeight}
	score, cost := s.score(a, podWorst)
	risk, collateral := terms(a, podWorst)
	fmt.Fprintf(out, "score %d of %d: cost %d ppm = (%d × own risk %d + %d × collateral %d) / %d\n",
		score, fwk.MaxNodeScore, cost, s.ownRiskWeight, risk, s.collateralWeight, collateral, s.ownRiskWeight+s.collateralWeight)
	return nil
}

func quantity(bytes int64) string {
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}
