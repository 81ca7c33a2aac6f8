// Package figure is the scheduler plugin over a figure that a node agent
// samples and pods consume (PIDs, pod IPs, ...): PreFilter, Filter,
// PreScore, Score and NormalizeScore, the queueing hints, SignPod, the
// per-node state, the count of nodes by sample state, and the Events and
// metrics, written once for every such figure.
//
// A figure plugin (plugins/nodepids, plugins/nodeips) is a Definition: its
// names and reasons, how its args decode, and the Figure those args
// configure, which reads a node's sample, estimates the node's use from its
// pods, and tells what a pod needs. Adding a figure is one Definition, its
// args, and a line in the registry (plugins.Figures).
//
// A figure travels one way: the node's annotations are read (Figure.Read)
// and estimated against the node's pods (Sample.Estimate) once per change
// of the NodeInfo, into an entry whose summary the per-node state keeps
// (plugins/internal/nodecache); PreFilter, Filter, PreScore and Score read
// summaries and bounds, never the annotations.
package figure

import (
	"context"
	"iter"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/apis/config/scheme"
)

// Sample is what the core reads of a node's sample as a figure's model
// parsed it (pidstats.NodeStats, ipstats.NodeStats): its time, the use
// it reports (or, estimated, Figure.Estimate's), and the free units that
// use leaves.
type Sample interface {
	SampleTime() time.Time
	ReportedUsed() int64
	Free() int64
}

// Figure is what one figure plugin knows that the others do not, configured
// by its args: how to read a node's sample S, how the node's pods change
// it, the floor, and what a pod needs. A sample may also name an
// annotation of its own that the figure ignores while the sample counts
// (IgnoredAnnotation() (key string, err error)).
type Figure[S Sample] interface {
	// Read parses the node's sample without an age limit, at now (the
	// model's clock-skew check). The error is the model's "no sample"
	// error or an invalid-annotation error (sample.InvalidError): the
	// node's headroom is unknown.
	Read(node *corev1.Node, now time.Time) (S, error)
	// Estimate returns the sample with its use estimated from the pods
	// the scheduler holds for the node.
	Estimate(s S, pods iter.Seq[*corev1.Pod]) S
	// Floor is what the node keeps free.
	Floor(s S) int64
	// Need returns the units the pod takes of a node. takes is false for a
	// pod that takes none whatever the node (a host-network pod's pod IP):
	// PreFilter and PreScore skip it. err reports a malformed annotation
	// of the pod, which counts as need (a Warning Event on the pod).
	Need(pod *corev1.Pod) (need int64, takes bool, err error)
	// Counted reports whether a pod placed after its node's sample counts
	// in the node's estimate, whatever its phase: when it is deleted, the
	// estimate drops.
	Counted(pod *corev1.Pod) bool
	// Sign is SignPod's fragment: pods with equal fragments are alike to
	// the figure.
	Sign(pod *corev1.Pod) fwk.SignFragment
}

// Settings are the args every figure plugin has.
type Settings struct {
	// MaxSampleAge is the age beyond which a sample counts as unknown; 0:
	// no limit.
	MaxSampleAge time.Duration
	// UnknownScore is the score of a node whose headroom is unknown, or
	// config.UnknownNodeScoreMeanOfKnown.
	UnknownScore int64
	// Ample is the free units after placement from which a node scores as
	// well as any; 0: no limit.
	Ample int64
}

// Names are a figure plugin's names and reasons, as users see them.
type Names struct {
	// Plugin is the plugin's name in the registry and the configuration.
	Plugin string
	// Kind names the figure in log lines, as the models name it in their
	// errors ("PID", "pod IP").
	Kind string
	// Noun names the figure in the messages of invalid node annotations
	// ("PID", "pod-IP").
	Noun string
	// FilterReason is Filter's reason: no node and no number, so that the
	// scheduler aggregates it across nodes.
	FilterReason string
	// InvalidNodeEvent is the reason of the Warning Event on a Node whose
	// annotations the plugin ignores.
	InvalidNodeEvent string
	// InvalidPodEvent is the reason of the Warning Event on a pod whose
	// need annotation is malformed, and PodAnnotation that annotation;
	// empty when the figure reads none.
	InvalidPodEvent, PodAnnotation string
}

// Definition is a figure plugin: its names, its args (A, the internal
// type; the v1 type NewV1Args returns) and the Figure of samples S they
// configure.
type Definition[A any, S Sample] struct {
	Names
	// NewV1Args returns the plugin's empty v1 args, which the scheme
	// defaults when a profile has no pluginConfig for the plugin.
	NewV1Args func() runtime.Object
	// Validate validates the args; path is their field path.
	Validate func(path *field.Path, args *A) error
	// Configure returns the settings and the Figure of validated args; h
	// is the scheduler's handle (nil in tests), for a figure that reads
	// more than the nodes' annotations.
	Configure func(args *A, h fwk.Handle) (Settings, Figure[S], error)
}

// Args returns the plugin's args from obj, as the scheduler decoded them
// (nil: the defaults), validated.
func (d *Definition[A, S]) Args(obj runtime.Object) (*A, error) {
	args, err := scheme.PluginArgs[A](d.Plugin, obj, d.NewV1Args())
	if err != nil {
		return nil, err
	}
	if err := d.Validate(field.NewPath(d.Plugin+"Args"), args); err != nil {
		return nil, errorf(d.Plugin, err)
	}
	return args, nil
}

// New builds the plugin from its args; it is the plugin's factory.
func (d *Definition[A, S]) New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error) {
	args, err := d.Args(obj)
	if err != nil {
		return nil, err
	}
	s, f, err := d.Configure(args, h)
	if err != nil {
		return nil, errorf(d.Plugin, err)
	}
	return newPlugin[S](ctx, h, d.Names, s, f), nil
}

// Name is the plugin's name.
func (d *Definition[A, S]) Name() string { return d.Plugin }

// DefaultArgs returns the plugin's args with every field defaulted, in the
// internal type the plugin reads.
func (d *Definition[A, S]) DefaultArgs() (runtime.Object, error) {
	a, err := scheme.PluginArgs[A](d.Plugin, nil, d.NewV1Args())
	if err != nil {
		return nil, err
	}
	obj, ok := any(a).(runtime.Object)
	if !ok {
		return nil, errorf(d.Plugin, errNotObject)
	}
	return obj, nil
}

// Registered is a figure plugin as the registry lists it, whatever its
// args' type: headroom-scheduler, kubectl-headroom and the perf harness
// iterate over them.
type Registered interface {
	// Name is the plugin's name.
	Name() string
	// New is the plugin's factory.
	New(ctx context.Context, obj runtime.Object, h fwk.Handle) (fwk.Plugin, error)
	// DefaultArgs returns the plugin's defaulted internal args.
	DefaultArgs() (runtime.Object, error)
}
