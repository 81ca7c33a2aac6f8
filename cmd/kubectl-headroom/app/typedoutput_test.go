package app

import (
	"fmt"
	"github.com/headroom-k8s/headroom/test/kubectlout"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/headroom-k8s/headroom/apis/kubectl/v1alpha1"
)

// tableBlocks are the rows of each table in out (a header line starting
// with "#"), their cells joined by "|".
func tableBlocks(out string) [][]string {
	var blocks [][]string
	in := false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "#"):
			blocks, in = append(blocks, nil), true
		case in && regexp.MustCompile(`^\d`).MatchString(l):
			blocks[len(blocks)-1] = append(blocks[len(blocks)-1], strings.Join(regexp.MustCompile(`  +`).Split(strings.TrimSpace(l), -1), "|"))
		default:
			in = false
		}
	}
	return blocks
}

// killOrderRows are k's containers as the kill order's table shows them.
func killOrderRows(k v1alpha1.KillOrder) []string {
	yesNo := map[bool]string{true: "yes", false: "no"}
	var rows []string
	for i, c := range k.Containers {
		pod, container, worst := c.Namespace+"/"+c.Pod, c.Container, quantity(c.WorstBytes)
		if c.Incoming {
			pod += " (incoming)"
		}
		if c.Sidecar {
			container += " (sidecar)"
		}
		if c.Estimated {
			worst += " (estimated)"
		}
		cells := []string{fmt.Sprint(i), pod, container, c.QOS, fmt.Sprint(c.OOMScoreAdj)}
		if k.Measured != nil {
			used := quantity(*c.UsedBytes)
			if c.Declared {
				used += " (declared)"
			}
			cells = append(cells, used)
		}
		cells = append(cells, worst, quantity(c.PointsBytes))
		if k.Measured != nil {
			cells = append(cells, yesNo[*c.AtRiskNow])
		}
		rows = append(rows, strings.Join(append(cells, yesNo[c.AtRisk]), "|"))
	}
	return rows
}

// killOrderLine is the line that heads k's table.
func killOrderLine(node string, k v1alpha1.KillOrder) string {
	return fmt.Sprintf("node %s: capacity %s, allocatable %s, worst case %s, shortfall %s, at risk %s", node,
		quantity(k.CapacityBytes), quantity(k.AllocatableBytes), quantity(k.WorstCaseBytes), quantity(k.ShortfallBytes), quantity(k.AtRiskBytes))
}

// placementLines are the lines the table prints for pl.
func placementLines(pl *v1alpha1.OOMPlacement) []string {
	lines := []string{
		fmt.Sprintf("with %s (%s):", pl.Pod, pl.QOS),
		fmt.Sprintf("shortfall %s before, %s after; rank %d; own risk %d ppm of %s; collateral %s",
			quantity(pl.ShortfallBeforeBytes), quantity(pl.ShortfallAfterBytes), pl.Rank, pl.OwnRiskPPM, quantity(pl.PodWorstBytes), quantity(pl.CollateralBytes)),
	}
	if pl.Score != nil {
		lines = append(lines, fmt.Sprintf("score %d of 100: %s", *pl.Score, pl.ScoreReason))
	} else {
		lines = append(lines, "score: none, "+pl.ScoreReason)
	}
	return lines
}

// explain-oom -o json prints an OOMKillOrder with what the table shows: the
// totals, every row of the kill order and of the order with the pod, the
// assessment and the score.
func TestExplainOOMJSONIsTheTable(t *testing.T) {
	podFile := writeFile(t, "api.yaml", readmeBlock(t, "worked-example-pod"))
	for _, args := range [][]string{{"worker-1"}, {"worker-1", "--pod-file", podFile}} {
		table, err := runExplain(t, workedExampleCluster(), args...)
		if err != nil {
			t.Fatal(err)
		}
		out, err := runExplain(t, workedExampleCluster(), append(args, "-o", "json")...)
		if err != nil {
			t.Fatal(err)
		}
		k := kubectlout.DecodeStrict[v1alpha1.OOMKillOrder](t, out)
		if k.APIVersion != "kubectl.headroom.dev/v1alpha1" || k.Kind != "OOMKillOrder" || k.Name != "worker-1" {
			t.Errorf("%v: apiVersion %q, kind %q, name %q", args, k.APIVersion, k.Kind, k.Name)
		}
		blocks := tableBlocks(table)
		want := [][]string{killOrderRows(k.Order)}
		lines := []string{killOrderLine("worker-1", k.Order)}
		if k.Placement != nil {
			want = append(want, killOrderRows(k.Placement.Order))
			lines = append(lines, placementLines(k.Placement)...)
		} else if len(args) > 1 {
			t.Errorf("%v: no placement", args)
		}
		if !slices.EqualFunc(blocks, want, slices.Equal) {
			t.Errorf("%v: table rows\n%q\nJSON rows\n%q", args, blocks, want)
		}
		for _, l := range lines {
			if !strings.Contains(table, l) {
				t.Errorf("%v: the table lacks %q of the JSON:\n%s", args, l, table)
			}
		}
	}
	if _, err := runExplain(t, workedExampleCluster(), "worker-1", "-o", "wide"); err == nil || !strings.Contains(err.Error(), "want one of") {
		t.Errorf("-o wide: err %v, want the formats listed", err)
	}
}

// explain node -o json prints a NodeExplanation with what the text shows.
func TestExplainNodeJSONIsTheText(t *testing.T) {
	pod := writeFile(t, "pod.yaml", podYAML)
	for _, args := range [][]string{
		{"explain", "node", "short"},
		{"explain", "node", "short", "--pod-file", pod},
		{"explain", "node", "roomy", "--pod-file", pod},
	} {
		text, err := run(t, headroomCluster(), args...)
		if err != nil {
			t.Fatal(err)
		}
		out, err := run(t, headroomCluster(), append(args, "-o", "json")...)
		if err != nil {
			t.Fatal(err)
		}
		x := kubectlout.DecodeStrict[v1alpha1.NodeExplanation](t, out)
		if x.APIVersion != "kubectl.headroom.dev/v1alpha1" || x.Kind != "NodeExplanation" || x.Name != args[2] {
			t.Errorf("%v: apiVersion %q, kind %q, name %q", args, x.APIVersion, x.Kind, x.Name)
		}
		if x.PIDs.Capacity == nil || x.PodIPs.Capacity == nil || x.Memory == nil {
			t.Fatalf("%v: PIDs %s, pod IPs %s, memory %v: want figures of both and a kill order", args, x.PIDs.State, x.PodIPs.State, x.Memory)
		}
		lines := []string{
			fmt.Sprintf("node %s (profile %q of %s)", x.Name, x.Profile, x.SchedulerConfiguration),
			fmt.Sprintf("capacity %d, reserved %d, allocatable %d\nused %d when sampled", *x.PIDs.Capacity, *x.PIDs.Reserved, *x.PIDs.Allocatable, *x.PIDs.Used),
			fmt.Sprintf("estimated used %d (%+d for pods placed since the sample", *x.PIDs.EstimatedUsed, *x.PIDs.EstimatedUsed-*x.PIDs.Used),
			fmt.Sprintf("free %d\n", *x.PIDs.EstimatedFree),
			fmt.Sprintf("capacity %d, used %d when sampled", *x.PodIPs.Capacity, *x.PodIPs.Used),
			fmt.Sprintf("estimated used %d (%+d for pods on the pod network placed since the sample), free %d", *x.PodIPs.EstimatedUsed, *x.PodIPs.EstimatedUsed-*x.PodIPs.Used, *x.PodIPs.EstimatedFree),
			killOrderLine(x.Name, *x.Memory),
		}
		if x.PodIPs.Leaked != nil {
			lines = append(lines, fmt.Sprintf("leaked %d of the used", *x.PodIPs.Leaked))
		}
		want := [][]string{killOrderRows(*x.Memory)}
		if d := x.Pod; d != nil {
			lines = append(lines, fmt.Sprintf("pod %s: %d PIDs", d.Name, d.PIDs), fmt.Sprintf("nodes that pass Filter: %d of %d", d.Feasible, d.Nodes))
			if d.Verdict.Filter == "fails" {
				lines = append(lines, fmt.Sprintf("Filter: fails: %s: %s", d.Verdict.FilterPlugin, d.Verdict.FilterMessage))
			} else {
				lines = append(lines, "Filter: passes", fmt.Sprintf("= %d; rank %d of %d (best: %s, %d)", *d.Verdict.Score, d.Rank, d.Feasible, d.Best, *d.BestScore))
			}
			if d.OOM == nil {
				t.Fatalf("%v: no OOM placement", args)
			}
			lines = append(lines, placementLines(d.OOM)...)
			want = append(want, killOrderRows(d.OOM.Order))
		} else if len(args) > 3 {
			t.Errorf("%v: no pod decision", args)
		}
		for _, l := range lines {
			if !strings.Contains(text, l) {
				t.Errorf("%v: the text lacks %q of the JSON:\n%s", args, l, text)
			}
		}
		if blocks := tableBlocks(text); !slices.EqualFunc(blocks, want, slices.Equal) {
			t.Errorf("%v: table rows\n%q\nJSON rows\n%q", args, blocks, want)
		}
	}
}
