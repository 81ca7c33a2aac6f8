package nodepids

import (
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/figure/figuretest"
)

// pidNode is a node with the four PID annotations.
func pidNode(name string, capacity, reserved, used int64, sampledAt time.Time) *corev1.Node {
	return figuretest.AnnotatedNode(name,
		pidstats.AnnotationCapacity, strconv.FormatInt(capacity, 10),
		pidstats.AnnotationReserved, strconv.FormatInt(reserved, 10),
		pidstats.AnnotationUsed, strconv.FormatInt(used, 10),
		pidstats.AnnotationSampledAt, sampledAt.UTC().Format(time.RFC3339))
}

// pod is a pod declaring pids ("" for no annotation).
func pod(name, pids string) *corev1.Pod {
	p := figuretest.Pod(name)
	if pids != "" {
		p.Annotations = map[string]string{pidstats.AnnotationPodPIDs: pids}
	}
	return p
}

// bench runs NodePIDs' benchmarks (figuretest.Bench) on nodes of 4Mi PIDs
// with 50,000 in use, pods of 200 PIDs and an incoming pod of 300.
var bench = figuretest.Bench[config.NodePIDsArgs, pidstats.NodeStats]{
	Definition: Definition,
	Node: func(name string, sampledAt time.Time) *corev1.Node {
		return pidNode(name, 4194304, 1000, 50000, sampledAt)
	},
	Pod:      func(name string) *corev1.Pod { return pod(name, "200") },
	Incoming: pod("incoming", "300"),
	NoAmple:  func(args *config.NodePIDsArgs) { args.AmpleFreePIDs = 0 },
	MaxRaw:   4000000,
}

// now is the scheduler's clock in these tests.
var now = figuretest.Now

// newPlugin builds NodePIDs through New with a real framework handle, its
// clock at now (figuretest.New).
var newPlugin = figuretest.Builder(Definition)

// defaultArgs are the v1 defaults: DefaultPodPIDs 100, MinFreePIDs 512,
// MinFreePercent 5, MaxSampleAge 10m, UnknownNodeScore -1 (mean of known),
// AmpleFreePIDs 32768.
func defaultArgs() *config.NodePIDsArgs { return figuretest.DefaultArgs(Definition) }
