package app

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/duration"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// unknown is shown for a figure nobody reported.
const unknown = "<unknown>"

// nodeRow is one node's headroom as the plugins' models see it.
type nodeRow struct {
	name   string
	labels map[string]string
	// pid is the node's PID sample; pidErr why there is none (or why it
	// is stale: then pid holds the stale sample).
	pid    pidstats.NodeStats
	pidErr error
	// estUsed is pid.Used plus the PIDs of pods placed since the sample.
	estUsed int64
	// ip is the node's pod-IP sample, ipErr why there is none (or why it
	// is stale), ipEstUsed ip.Used plus the pods on the pod network placed
	// since the sample, as NodeIPs estimates it.
	ip        ipstats.NodeStats
	ipErr     error
	ipEstUsed int64
	// oom is the node's memory model; oomErr why there is none.
	oom    *oomkill.Node
	oomErr error
	// mem is the node's memory sample; memErr why the model does without
	// it (missing, stale or invalid).
	mem    memstats.NodeStats
	memErr error
	// verdict is the plugins' decision for the pod of --pod-file.
	verdict *verdict
}

func (r *nodeRow) pidKnown() bool { return r.pidErr == nil || pidstats.IsStale(r.pidErr) }

func (r *nodeRow) estFree() int64 { return max(r.pid.Allocatable()-r.estUsed, 0) }

func (r *nodeRow) ipKnown() bool { return r.ipErr == nil || sample.IsStale(r.ipErr) }

func (r *nodeRow) ipEstFree() int64 { return max(r.ip.Capacity-r.ipEstUsed, 0) }

// column is one column of the table: its header, its --sort-by key, how a
// row shows in it, and the value it sorts by (ok false sorts last).
type column struct {
	header string
	// key is the column's --sort-by name; empty: not sortable.
	key string
	// descending sorts the largest value first, as kubectl top does for
	// usage; headroom sorts the smallest first.
	descending bool
	// withPod columns are shown when a pod is given (--pod-file).
	withPod bool
	// wide columns are shown with -o wide only.
	wide  bool
	cell  func(r *nodeRow, now time.Time) string
	value func(r *nodeRow, now time.Time) (v int64, ok bool)
}

// columns are the table's columns, in order. A new figure is one entry
// here.
var columns = []column{
	{header: "NAME", key: "name"},
	{header: "PIDS-CAPACITY", key: "pid-capacity",
		cell: pidCell(func(r *nodeRow) int64 { return r.pid.Capacity }), value: pidValue(func(r *nodeRow) int64 { return r.pid.Capacity })},
	{header: "PIDS-RESERVED", wide: true,
		cell: pidCell(func(r *nodeRow) int64 { return r.pid.Reserved }), value: pidValue(func(r *nodeRow) int64 { return r.pid.Reserved })},
	{header: "PIDS-ALLOCATABLE", key: "pid-allocatable",
		cell: pidCell((*nodeRow).allocatable), value: pidValue((*nodeRow).allocatable)},
	{header: "PIDS-USED", key: "pid-used", descending: true,
		cell: pidCell(func(r *nodeRow) int64 { return r.pid.Used }), value: pidValue(func(r *nodeRow) int64 { return r.pid.Used })},
	{header: "PIDS-USED(EST)", wide: true,
		cell: pidCell(func(r *nodeRow) int64 { return r.estUsed }), value: pidValue(func(r *nodeRow) int64 { return r.estUsed })},
	{header: "PIDS-FREE(EST)", key: "pid-free",
		cell: pidCell((*nodeRow).estFree), value: pidValue((*nodeRow).estFree)},
	{header: "SAMPLE-AGE", key: "sample-age", descending: true,
		cell: func(r *nodeRow, now time.Time) string {
			if !r.pidKnown() {
				return pidReason(r.pidErr)
			}
			age := duration.HumanDuration(now.Sub(r.pid.SampledAt))
			if r.pidErr != nil {
				age += " (stale)"
			}
			return age
		},
		value: func(r *nodeRow, now time.Time) (int64, bool) {
			return int64(now.Sub(r.pid.SampledAt)), r.pidKnown()
		}},
	{header: "POD-IPS", key: "ip-capacity",
		cell: ipCell(func(r *nodeRow) int64 { return r.ip.Capacity }), value: ipValue(func(r *nodeRow) int64 { return r.ip.Capacity })},
	{header: "POD-IPS-USED", wide: true,
		cell: ipCell(func(r *nodeRow) int64 { return r.ip.Used }), value: ipValue(func(r *nodeRow) int64 { return r.ip.Used })},
	{header: "POD-IPS-FREE(EST)", key: "ip-free",
		cell: ipCell((*nodeRow).ipEstFree), value: ipValue((*nodeRow).ipEstFree)},
	{header: "POD-IPS-LEAKED", key: "ip-leaked", descending: true,
		cell: func(r *nodeRow, now time.Time) string {
			if r.ipKnown() && !r.ip.LeakedKnown {
				return "-" // the node's IPAM cannot tell
			}
			return ipCell(func(r *nodeRow) int64 { return r.ip.Leaked })(r, now)
		},
		value: func(r *nodeRow, _ time.Time) (int64, bool) { return r.ip.Leaked, r.ipKnown() && r.ip.LeakedKnown }},
	{header: "IP-SAMPLE-AGE", wide: true,
		cell: func(r *nodeRow, now time.Time) string {
			switch {
			case sample.IsInvalid(r.ipErr):
				return "<invalid>"
			case !r.ipKnown():
				return unknown
			case r.ipErr != nil:
				return duration.HumanDuration(now.Sub(r.ip.SampledAt)) + " (stale)"
			}
			return duration.HumanDuration(now.Sub(r.ip.SampledAt))
		}},
	{header: "MEM-ALLOCATABLE", key: "mem-allocatable",
		cell: oomCell((*oomkill.Node).Allocatable), value: oomValue((*oomkill.Node).Allocatable)},
	{header: "MEM-USED", key: "mem-used", descending: true,
		cell: func(r *nodeRow, now time.Time) string {
			if used, ok := memUsed(r, now); ok {
				return quantity(used)
			}
			return unknown
		},
		value: memUsed},
	{header: "MEM-WORST-CASE", key: "mem-worst-case", descending: true,
		cell: oomCell((*oomkill.Node).TotalWorst), value: oomValue((*oomkill.Node).TotalWorst)},
	{header: "OOM-SHORTFALL", key: "oom-shortfall", descending: true,
		cell: oomCell((*oomkill.Node).Shortfall), value: oomValue((*oomkill.Node).Shortfall)},
	{header: "OOM-AT-RISK", key: "oom-at-risk", descending: true,
		cell: oomCell((*oomkill.Node).AtRiskBytes), value: oomValue((*oomkill.Node).AtRiskBytes)},
	{header: "FILTER", withPod: true,
		cell: func(r *nodeRow, _ time.Time) string {
			if r.verdict.filter != nil {
				return "fails(" + r.verdict.filter.Plugin() + ")"
			}
			return "passes"
		}},
	{header: "SCORE", key: "score", descending: true, withPod: true,
		cell: func(r *nodeRow, _ time.Time) string {
			if r.verdict.filter != nil {
				return "-"
			}
			return strconv.FormatInt(r.verdict.total, 10)
		},
		value: func(r *nodeRow, _ time.Time) (int64, bool) {
			return r.verdict.total, r.verdict.filter == nil
		}},
	{header: "FILTER-REASON", withPod: true, wide: true,
		cell: func(r *nodeRow, _ time.Time) string {
			if r.verdict.filter != nil {
				return r.verdict.filter.Message()
			}
			return "<none>"
		}},
}

func (r *nodeRow) allocatable() int64 { return r.pid.Allocatable() }

func pidCell(f func(*nodeRow) int64) func(*nodeRow, time.Time) string {
	return func(r *nodeRow, _ time.Time) string {
		if !r.pidKnown() {
			return pidReason(r.pidErr)
		}
		return strconv.FormatInt(f(r), 10)
	}
}

func pidValue(f func(*nodeRow) int64) func(*nodeRow, time.Time) (int64, bool) {
	return func(r *nodeRow, _ time.Time) (int64, bool) { return f(r), r.pidKnown() }
}

// pidReason says why a node's PID figures are missing.
func pidReason(err error) string {
	if pidstats.IsInvalid(err) {
		return "<invalid>"
	}
	return unknown
}

// ipCell shows a pod-IP figure; a stale sample's figures are marked.
func ipCell(f func(*nodeRow) int64) func(*nodeRow, time.Time) string {
	return func(r *nodeRow, _ time.Time) string {
		switch {
		case sample.IsInvalid(r.ipErr):
			return "<invalid>"
		case !r.ipKnown():
			return unknown
		case r.ipErr != nil:
			return strconv.FormatInt(f(r), 10) + "(stale)"
		}
		return strconv.FormatInt(f(r), 10)
	}
}

func ipValue(f func(*nodeRow) int64) func(*nodeRow, time.Time) (int64, bool) {
	return func(r *nodeRow, _ time.Time) (int64, bool) { return f(r), r.ipKnown() }
}

// memUsed is the node's working set where OOMRisk's model is measured.
func memUsed(r *nodeRow, _ time.Time) (int64, bool) {
	if r.oom == nil || !r.oom.Measured() {
		return 0, false
	}
	return r.oom.UsedNow(), true
}

func oomCell(f func(*oomkill.Node) int64) func(*nodeRow, time.Time) string {
	return func(r *nodeRow, _ time.Time) string {
		if r.oom == nil {
			return unknown
		}
		return quantity(f(r.oom))
	}
}

func oomValue(f func(*oomkill.Node) int64) func(*nodeRow, time.Time) (int64, bool) {
	return func(r *nodeRow, _ time.Time) (int64, bool) {
		if r.oom == nil {
			return 0, false
		}
		return f(r.oom), true
	}
}

func quantity(bytes int64) string {
	return resource.NewQuantity(bytes, resource.BinarySI).String()
}

// shown returns the columns of the table: withPod ones only with a pod.
func shown(withPod bool) []column {
	var cols []column
	for _, c := range columns {
		if withPod || !c.withPod {
			cols = append(cols, c)
		}
	}
	return cols
}

func sortKeys(withPod bool) []string {
	var keys []string
	for _, c := range shown(withPod) {
		if c.key != "" {
			keys = append(keys, c.key)
		}
	}
	return keys
}

func newNodesCommand(o *options) *cobra.Command {
	var sortBy, selector string
	var podFlags podFlags
	var noHeaders, showLabels bool
	var labelColumns []string
	var printFlags *outputFlags
	cmd := &cobra.Command{
		Use:   "nodes [-l SELECTOR] [--sort-by COLUMN] [--pod-file POD.yaml | --pod POD] [-o FORMAT]",
		Short: "Show every node's PID, pod-IP and memory (OOM) headroom",
		Long: `nodes prints a row per node with the figures Headroom's plugins work from:
PIDs from the node's headroom.dev/pid-* annotations (capacity, allocatable,
used when sampled, free as estimated now, counting the pods placed since the
sample) and the sample's age; pod IPs from the headroom.dev/ip-* annotations
(the CNI IPAM's capacity, free as estimated now, counting the pods on the pod
network placed since the sample, and of those in use the leaked ones,
allocated to no pod sandbox of the node, "-" where the IPAM cannot tell;
"(stale)" past NodeIPs' maxSampleAge);
memory as OOMRisk models it (allocatable, the
working set where headroom-node-agent measures it (headroom.dev/memory-*:
the sample less the listed pods that left, plus the requests of pods placed
after it), the worst case of the pods there, the shortfall by which it
exceeds capacity and the memory of the containers the OOM killer would take
to cover it, in the kernel's order by what they hold where measured).
Figures use the args of the profile (--config, --scheduler-name). Given a
pod (--pod-file or --pod, as for explain node), two columns show whether the node passes the plugins' Filter (or
which plugin rejects it) and the sum of their weighted scores, from a
scheduling cycle of the profile's Headroom plugins over the listed nodes
(see explain node).

-o wide adds the reserved PIDs, the estimated PIDs in use, the pod IPs used
when sampled, the pod-IP sample's age and Filter's reason. -o json, -o yaml,
-o jsonpath=... and -o go-template=... print a NodeHeadroomList
(kubectl.headroom.dev/v1alpha1) with each node's figures, its sample states
(known, unknown, stale, invalid: the states of the scheduler's headroom_nodes
gauge) and the verdicts; -o name prints node/NAME, in the order of --sort-by.`,
		Example: `  kubectl headroom nodes --sort-by pid-free
  kubectl headroom nodes -l topology.kubernetes.io/zone=eu-1a --sort-by oom-shortfall
  kubectl headroom nodes --pod-file pod.yaml --sort-by score -o wide
  kubectl headroom nodes -o jsonpath='{range .items[*]}{.metadata.name} {.pids.estimatedFree}{"\\n"}{end}'
  kubectl headroom nodes --sort-by pid-free -o name | head -1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			col, err := sortColumn(sortBy, podFlags.given())
			if err != nil {
				return err
			}
			printer, err := newNodesPrinter(printFlags, noHeaders, showLabels, labelColumns)
			if err != nil {
				return err
			}
			if _, err := labels.Parse(selector); err != nil {
				return fmt.Errorf("-l %q: %w", selector, err)
			}
			s, err := o.setup(cmd.Context())
			if err != nil {
				return err
			}
			p, pidArgs, ipArgs, oomArgs, client := s.profile, s.pidArgs, s.ipArgs, s.oomArgs, s.client
			c, err := listCluster(cmd.Context(), client, selector)
			if err != nil {
				return err
			}
			pod, err := podFlags.get(cmd.Context(), client, o.namespace())
			if err != nil {
				return err
			}
			if pod != nil {
				c = c.without(pod)
			}
			now := time.Now()
			rows := nodeRows(c, pidArgs, ipArgs, p.ipSource(), oomArgs, now)
			if pod != nil && len(rows) > 0 {
				d, err := decide(cmd.Context(), p, c, pod)
				if err != nil {
					return err
				}
				for i := range rows { // both in node order
					rows[i].verdict = &d.verdicts[i]
				}
			}
			sortRows(rows, col, now)
			if len(rows) == 0 {
				fmt.Fprintln(o.streams.ErrOut, "No nodes found")
			}
			list := nodeHeadroomList(rows, p, pod, now)
			return printer.print(cmd.OutOrStdout(), rows, shown(pod != nil), list, now)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&sortBy, "sort-by", "name", "column to sort by: "+strings.Join(sortKeys(true), ", ")+" (score with a pod)")
	fs.StringVarP(&selector, "selector", "l", "", "label selector of the nodes to show (e.g. -l key1=value1,key2!=value2), as kubectl get nodes -l")
	podFlags.addFlags(fs)
	fs.BoolVar(&noHeaders, "no-headers", false, "print no header row (table output)")
	fs.BoolVar(&showLabels, "show-labels", false, "show each node's labels as the last column (table output)")
	fs.StringSliceVarP(&labelColumns, "label-columns", "L", nil, "labels of the nodes to show as columns (table output)")
	printFlags = addOutputFlags(cmd, "NodeHeadroomList", "wide")
	_ = cmd.RegisterFlagCompletionFunc("sort-by", completeFrom(func() []string { return sortKeys(true) }))
	return cmd
}

func sortColumn(key string, withPod bool) (*column, error) {
	for _, c := range shown(withPod) {
		if c.key != "" && c.key == key {
			return &c, nil
		}
	}
	return nil, fmt.Errorf("--sort-by %q: want one of %s", key, strings.Join(sortKeys(withPod), ", "))
}

// nodeRows computes every node's figures with the plugins' models and args.
func nodeRows(c *cluster, pidArgs *config.NodePIDsArgs, ipArgs *config.NodeIPsArgs, ips ipstats.Source, oomArgs *config.OOMRiskArgs, now time.Time) []*nodeRow {
	est := oomkill.Estimate{
		RequestMultiplierPercent:      oomArgs.NoLimitRequestPercent,
		FractionOfAllocatablePermille: oomArgs.NoLimitAllocatablePermille,
	}
	rows := make([]*nodeRow, 0, len(c.nodes))
	for _, n := range c.nodes {
		r := &nodeRow{name: n.Name, labels: n.Labels}
		pods := c.pods[n.Name]
		r.pid, r.pidErr = pidstats.ParseNode(n.Annotations, now, pidArgs.MaxSampleAge.Duration)
		if r.pidKnown() {
			r.estUsed = pidstats.EstimateUsed(r.pid, pods, pidArgs.DefaultPodPIDs)
		}
		r.ip, r.ipErr = ips.Read(n, now, ipArgs.MaxSampleAge.Duration)
		if r.ipKnown() {
			r.ipEstUsed = ipstats.EstimateUsed(r.ip, slices.Values(pods))
		}
		var opts []oomkill.Option
		opts, r.mem, r.memErr = oomkill.MemorySampleOf(n, now, oomArgs.MaxSampleAge.Duration)
		r.oom, r.oomErr = oomkill.NewNode(n, pods, est, opts...)
		rows = append(rows, r)
	}
	return rows
}

// sortRows sorts by col, rows without the figure last, then by name.
func sortRows(rows []*nodeRow, col *column, now time.Time) {
	slices.SortStableFunc(rows, func(a, b *nodeRow) int {
		if col.value != nil {
			va, oka := col.value(a, now)
			vb, okb := col.value(b, now)
			switch {
			case oka && !okb:
				return -1
			case !oka && okb:
				return 1
			case oka && okb && va != vb:
				if col.descending {
					return cmp.Compare(vb, va)
				}
				return cmp.Compare(va, vb)
			}
		}
		return strings.Compare(a.name, b.name)
	})
}
