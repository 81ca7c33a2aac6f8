package app

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/printers"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/apis/kubectl/v1alpha1"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// outputScheme types what -o prints: kubectl-headroom's own kinds, and
// the Nodes of -o name.
var outputScheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		panic(err)
	}
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	return s
}()

// outputFlags is -o, defined the same way on every command: cli-runtime's
// print flags, typed by outputScheme; no -o prints the command's table.
type outputFlags struct {
	flags *genericclioptions.PrintFlags
	// own are the formats the command prints itself (nodes: wide).
	own []string
}

// addOutputFlags defines -o on cmd, whose own formats are own.
func addOutputFlags(cmd *cobra.Command, kind string, own ...string) *outputFlags {
	f := &outputFlags{flags: genericclioptions.NewPrintFlags("").WithTypeSetter(outputScheme), own: own}
	f.flags.AddFlags(cmd)
	cmd.Flags().Lookup("output").Usage = "Output format. One of: (" + strings.Join(f.formats(), ", ") + "). Default: a table. " +
		"The structured formats print a " + kind + " (" + v1alpha1.SchemeGroupVersion.String() + ")."
	_ = cmd.RegisterFlagCompletionFunc("output", completeFrom(f.formats))
	return f
}

// format is the -o value; "" for the table.
func (f *outputFlags) format() string { return *f.flags.OutputFormat }

// formats are the -o values: the command's own, and cli-runtime's printers'.
func (f *outputFlags) formats() []string {
	return append(slices.Clone(f.own), f.flags.AllowedFormats()...)
}

// printer is cli-runtime's printer of -o; nil for the table and the
// command's own formats.
func (f *outputFlags) printer() (printers.ResourcePrinter, error) {
	if f.format() == "" || slices.Contains(f.own, f.format()) {
		return nil, nil
	}
	p, err := f.flags.ToPrinter()
	if genericclioptions.IsNoCompatiblePrinterError(err) {
		return nil, fmt.Errorf("-o %q: want one of %v", f.format(), f.formats())
	}
	return p, err
}

// printOrTable prints obj with printer, the one of -o, or table without
// one. Commands get the printer before they do their work, so that a bad
// -o fails at once.
func printOrTable(out io.Writer, printer printers.ResourcePrinter, obj runtime.Object, table func(io.Writer)) error {
	if printer == nil {
		table(out)
		return nil
	}
	return printer.PrintObj(obj, out)
}

// nodesPrinter prints the nodes command's result: a table through
// cli-runtime's table printer (wide: with the wide columns), node/NAME
// lines through its name printer, else the NodeHeadroomList through the
// printer of -o (json, yaml, jsonpath, go-template, ...).
type nodesPrinter struct {
	format  string
	table   printers.PrintOptions
	printer printers.ResourcePrinter
}

func newNodesPrinter(f *outputFlags, noHeaders, showLabels bool, labelColumns []string) (*nodesPrinter, error) {
	p := &nodesPrinter{format: f.format()}
	var err error
	if p.printer, err = f.printer(); err != nil {
		return nil, err
	}
	p.table = printers.PrintOptions{NoHeaders: noHeaders, Wide: p.format == "wide", ShowLabels: showLabels, ColumnLabels: labelColumns}
	return p, nil
}

func (p *nodesPrinter) print(out io.Writer, rows []*nodeRow, cols []column, list *v1alpha1.NodeHeadroomList, now time.Time) error {
	switch {
	case p.printer == nil:
		return printers.NewTablePrinter(p.table).PrintObj(nodeTable(rows, cols, list, now), out)
	case p.format == "name":
		// As kubectl get nodes -o name: Nodes, one a line, for kubectl.
		for _, r := range rows {
			n := &corev1.Node{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"}, ObjectMeta: metav1.ObjectMeta{Name: r.name}}
			if err := p.printer.PrintObj(n, out); err != nil {
				return err
			}
		}
		return nil
	}
	return p.printer.PrintObj(list, out)
}

// nodeTable is the table of rows in cols, each row's object its item of
// list (for --show-labels and -L).
func nodeTable(rows []*nodeRow, cols []column, list *v1alpha1.NodeHeadroomList, now time.Time) *metav1.Table {
	t := &metav1.Table{}
	for i, c := range cols {
		d := metav1.TableColumnDefinition{Name: c.header, Type: "string"}
		if i == 0 {
			d.Format = "name"
		}
		if c.wide {
			d.Priority = 1
		}
		t.ColumnDefinitions = append(t.ColumnDefinitions, d)
	}
	for i, r := range rows {
		row := metav1.TableRow{Object: runtime.RawExtension{Object: &list.Items[i]}}
		for _, c := range cols {
			if c.cell == nil {
				row.Cells = append(row.Cells, r.name)
				continue
			}
			row.Cells = append(row.Cells, c.cell(r, now))
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// nodeHeadroomList is rows, in their order, as the typed output.
func nodeHeadroomList(rows []*nodeRow, p *profile, pod *corev1.Pod, now time.Time) *v1alpha1.NodeHeadroomList {
	list := &v1alpha1.NodeHeadroomList{
		TypeMeta:               metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "NodeHeadroomList"},
		SchedulerConfiguration: p.source,
		Profile:                p.cfg.SchedulerName,
		Items:                  []v1alpha1.NodeHeadroom{},
	}
	if pod != nil {
		list.Pod = pod.Namespace + "/" + pod.Name
	}
	for _, r := range rows {
		list.Items = append(list.Items, r.api(now))
	}
	return list
}

// state is the state of a sample that the model (pidstats, ipstats: both
// report the sample package's errors) parsed with err.
func state(err error) (v1alpha1.State, string) {
	switch {
	case err == nil:
		return v1alpha1.StateKnown, ""
	case sample.IsStale(err):
		return v1alpha1.StateStale, err.Error()
	case sample.IsInvalid(err):
		return v1alpha1.StateInvalid, err.Error()
	}
	return v1alpha1.StateUnknown, err.Error()
}

// api is the row as a NodeHeadroom.
func (r *nodeRow) api(now time.Time) v1alpha1.NodeHeadroom {
	h := v1alpha1.NodeHeadroom{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "NodeHeadroom"},
		ObjectMeta: metav1.ObjectMeta{Name: r.name, Labels: r.labels},
	}
	h.PIDs.State, h.PIDs.Message = state(r.pidErr)
	if r.pidKnown() {
		at := metav1.NewTime(r.pid.SampledAt)
		h.PIDs.SampledAt = &at
		h.PIDs.Capacity, h.PIDs.Reserved, h.PIDs.Allocatable = ptr.To(r.pid.Capacity), ptr.To(r.pid.Reserved), ptr.To(r.pid.Allocatable())
		h.PIDs.Used, h.PIDs.EstimatedUsed, h.PIDs.EstimatedFree = ptr.To(r.pid.Used), ptr.To(r.estUsed), ptr.To(r.estFree())
	}
	h.PodIPs.State, h.PodIPs.Message = state(r.ipErr)
	if r.ipKnown() {
		at := metav1.NewTime(r.ip.SampledAt)
		h.PodIPs.SampledAt = &at
		h.PodIPs.Capacity, h.PodIPs.Used = ptr.To(r.ip.Capacity), ptr.To(r.ip.Used)
		h.PodIPs.EstimatedUsed, h.PodIPs.EstimatedFree = ptr.To(r.ipEstUsed), ptr.To(r.ipEstFree())
		if r.ip.LeakedKnown {
			h.PodIPs.Leaked = ptr.To(r.ip.Leaked)
		}
	}
	if r.oom == nil {
		h.Memory.State = v1alpha1.StateUnknown
		if r.oomErr != nil {
			h.Memory.Message = r.oomErr.Error()
		}
	} else {
		h.Memory.State = v1alpha1.StateKnown
		h.Memory.AllocatableBytes, h.Memory.WorstCaseBytes = ptr.To(r.oom.Allocatable()), ptr.To(r.oom.TotalWorst())
		h.Memory.ShortfallBytes, h.Memory.AtRiskBytes = ptr.To(r.oom.Shortfall()), ptr.To(r.oom.AtRiskBytes())
		if r.oom.Measured() {
			h.Memory.UsedBytes, h.Memory.ShortfallNowBytes = ptr.To(r.oom.UsedNow()), ptr.To(r.oom.ShortfallNow())
		}
	}
	h.Memory.Measured, h.Memory.MeasuredMessage = state(r.memErr)
	if !r.mem.SampledAt.IsZero() {
		at := metav1.NewTime(r.mem.SampledAt)
		h.Memory.SampledAt = &at
	}
	if v := r.verdict; v != nil {
		h.Verdict = &v1alpha1.Verdict{Filter: "passes"}
		if v.filter != nil {
			h.Verdict.Filter, h.Verdict.FilterPlugin, h.Verdict.FilterMessage = "fails", v.filter.Plugin(), v.filter.Message()
		} else {
			h.Verdict.Score = ptr.To(v.total)
			for _, s := range v.scores {
				h.Verdict.PluginScores = append(h.Verdict.PluginScores, v1alpha1.PluginScore{Plugin: s.Name, Score: s.Score})
			}
		}
	}
	return h
}
