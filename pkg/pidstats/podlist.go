package pidstats

import (
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// AnnotationPIDPods lists the PIDs the node's biggest PID users held at the
// sample of AnnotationSampledAt, measured from each pod's cgroup:
// comma-separated <pod UID>=<PIDs>, largest first.
const AnnotationPIDPods = "headroom.dev/pid-pods"

// Bounds of AnnotationPIDPods (see sample.PodListFormat): at most
// MaxListedPods entries of at most 36+1+7+1 bytes, MaxPodListBytes in all.
const (
	// MaxListedPods is the most pods the annotation lists. The pods that
	// matter for the estimate are the big PID users; a pod not listed held
	// fewer PIDs than every listed one.
	MaxListedPods = 32
	// MaxPodPIDs is the largest figure of one pod, listed or declared in
	// headroom.dev/pids: all of a node's PIDs.
	MaxPodPIDs = MaxNodePIDs
	// MaxPodListBytes is the longest value ParsePodList accepts.
	MaxPodListBytes = MaxListedPods*(36+len("=")+len("4194304")+len(",")) - len(",")
)

// PodListFormat is AnnotationPIDPods' format.
var PodListFormat = sample.PodListFormat{Key: AnnotationPIDPods, Unit: "PIDs", MaxEntries: MaxListedPods, MaxValue: MaxPodPIDs}

// PodUsage is one entry of AnnotationPIDPods: a pod's PIDs.
type PodUsage = sample.PodFigure

// PodList is a parsed AnnotationPIDPods value (sample.PodList: Complete,
// Smallest and Lookup are the rules every reader applies).
type PodList = sample.PodList

// ParsePodList parses an AnnotationPIDPods value strictly (sample.PodListFormat.Parse).
func ParsePodList(v string) (PodList, error) { return PodListFormat.Parse(v) }

// NewPodList returns the list the agent publishes from its measurements:
// the MaxListedPods pods with the most PIDs, largest first.
func NewPodList(usage []PodUsage) PodList { return PodListFormat.New(usage) }

// IsPodUID reports whether s is a pod UID as the API server writes it.
func IsPodUID(s string) bool { return sample.IsPodUID(s) }
