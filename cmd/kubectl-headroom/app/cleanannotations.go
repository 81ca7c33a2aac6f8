package app

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// annotationPrefix is the prefix of every annotation Headroom's node agent
// writes on Nodes.
const annotationPrefix = "headroom.dev/"

func newCleanAnnotationsCommand(o *options) *cobra.Command {
	var yes bool
	var selector string
	cmd := &cobra.Command{
		Use:   "clean-annotations [NODE...] [-l SELECTOR] [--yes]",
		Short: "Remove Headroom's headroom.dev/* annotations from Nodes (a dry run unless --yes)",
		Long: `clean-annotations removes every headroom.dev/* annotation (the node agent's
PID, pod-IP and memory samples) from the named nodes, or from every node (or
those -l selects) when none is named: the last step of uninstalling Headroom.
Without --yes it only prints what it would remove. Each Node is patched with
a JSON merge patch that deletes those keys alone, guarded by the Node's
resourceVersion, so that nothing else on the Node changes.

Remove the node agent first (its DaemonSet writes the annotations again
every interval); clean-annotations warns when the DaemonSet is still there.`,
		Example: `  kubectl headroom clean-annotations            # what would be removed, from every node
  kubectl headroom clean-annotations --yes      # remove them
  kubectl headroom clean-annotations worker-1 --yes`,
		ValidArgsFunction: o.completeNodes,
		RunE: func(cmd *cobra.Command, args []string) error {
			if _, err := labels.Parse(selector); err != nil {
				return fmt.Errorf("-l %q: %w", selector, err)
			}
			if len(args) > 0 && selector != "" {
				return fmt.Errorf("give NODE names or -l, not both")
			}
			client, err := o.newClient()
			if err != nil {
				return err
			}
			ctx, out, errOut := cmd.Context(), cmd.OutOrStdout(), o.streams.ErrOut
			if _, err := client.AppsV1().DaemonSets(o.systemNamespace).Get(ctx, "headroom-node-agent", metav1.GetOptions{}); err == nil {
				fmt.Fprintf(errOut, "Warning: DaemonSet %s/headroom-node-agent is still there: its agents write the annotations again; delete it first\n", o.systemNamespace)
			} else if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
				return err
			}
			nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err != nil {
				return err
			}
			found := map[string]bool{}
			cleaned, keys := 0, 0
			for i := range nodes.Items {
				n := &nodes.Items[i]
				if len(args) > 0 && !slices.Contains(args, n.Name) {
					continue
				}
				found[n.Name] = true
				var remove []string
				for k := range n.Annotations {
					if strings.HasPrefix(k, annotationPrefix) {
						remove = append(remove, k)
					}
				}
				if len(remove) == 0 {
					continue
				}
				slices.Sort(remove)
				if !yes {
					fmt.Fprintf(out, "node/%s: would remove %s\n", n.Name, strings.Join(remove, ", "))
					cleaned, keys = cleaned+1, keys+len(remove)
					continue
				}
				patch := map[string]any{"metadata": map[string]any{"resourceVersion": n.ResourceVersion, "annotations": nullKeys(remove)}}
				data, err := json.Marshal(patch)
				if err != nil {
					return err
				}
				if _, err := client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, data, metav1.PatchOptions{}); err != nil {
					return fmt.Errorf("node/%s: %w (run it again to retry)", n.Name, err)
				}
				fmt.Fprintf(out, "node/%s: removed %s\n", n.Name, strings.Join(remove, ", "))
				cleaned, keys = cleaned+1, keys+len(remove)
			}
			for _, name := range args {
				if !found[name] {
					return fmt.Errorf("node %q not found", name)
				}
			}
			switch {
			case cleaned == 0:
				fmt.Fprintln(errOut, "No node carries headroom.dev/ annotations")
			case !yes:
				fmt.Fprintf(errOut, "Dry run: %d annotation(s) on %d node(s) would be removed; run again with --yes to remove them\n", keys, cleaned)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&yes, "yes", false, "remove the annotations; without it, only print what would be removed")
	cmd.Flags().StringVarP(&selector, "selector", "l", "", "label selector of the nodes to clean (when no NODE is named)")
	return cmd
}

// nullKeys is a merge patch's annotations that deletes keys.
func nullKeys(keys []string) map[string]any {
	m := map[string]any{}
	for _, k := range keys {
		m[k] = nil
	}
	return m
}
