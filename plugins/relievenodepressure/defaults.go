package relievenodepressure

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/pkg/deleteorder"
	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// Defaults. The PID model's and the no-limit estimate's come from
// pkg/pidstats and pkg/oomkill, where the NodePIDs and OOMRisk scheduler
// plugins take theirs, so that both sides see the same figures unless
// configured otherwise.
const (
	DefaultPIDsThresholdPercent int64 = 95
	DefaultPodPIDs                    = pidstats.DefaultPodPIDs
	DefaultMaxSampleAge               = pidstats.DefaultMaxSampleAge
	DefaultMinFreePIDs                = pidstats.DefaultMinFreePIDs
	DefaultMinFreePercent             = pidstats.DefaultMinFreePercent
	// DefaultMinPodPIDsPercent: a pod freeing less than 1 % of a node's
	// allocatable PIDs is not worth a restart for PIDs.
	DefaultMinPodPIDsPercent int64 = 1

	// DefaultMemoryThresholdPercent: a node whose working set is above
	// 90 % of its allocatable memory is within 10 % of the kubelet's hard
	// eviction threshold (see MemoryTrigger).
	DefaultMemoryThresholdPercent int64 = 90
	// DefaultMinPodBytesPercent: a pod freeing less than 1 % of a node's
	// allocatable memory is not worth a restart for memory.
	DefaultMinPodBytesPercent int64 = 1

	DefaultOOMThresholdPercent        int64 = 20
	DefaultNoLimitRequestPercent            = oomkill.DefaultRequestMultiplierPercent
	DefaultNoLimitAllocatablePermille       = oomkill.DefaultFractionOfAllocatablePermille

	// DefaultIPStarvedGrace: the kubelet retries a failed sandbox every
	// 10 s or so, and an address comes free when a pod of the node is torn
	// down (within its termination grace, 30 s by default) or when the
	// node agent's next sample (every minute) shows one. Two minutes lets
	// a failure that such a release ends pass, and moves a pod that would
	// otherwise wait for a pod to leave the node, which may never happen.
	DefaultIPStarvedGrace = 2 * time.Minute
	// DefaultMaxEventsPerNode bounds the Events read per node and run: a
	// starved pod has a few FailedCreatePodSandBox Events (the kubelet's
	// recorder aggregates similar ones after ten), so 100 covers tens of
	// pods.
	DefaultMaxEventsPerNode int64 = 100

	// DefaultTargetGap is how far below the threshold an unset target lies.
	DefaultTargetGap int64 = 5

	// DefaultPressureSamples: pressure must be seen in two consecutive
	// samples (see RelieveNodePressureArgs.PressureSamples).
	DefaultPressureSamples int32 = 2
	// DefaultStateConfigMap is in the namespace of the shipped manifests.
	DefaultStateConfigMap = config.Namespace + "/headroom-descheduler-state"

	// DefaultEvictionBudgetWindow is the eviction budget's window when
	// the block is given without one: longer than a few samples of the
	// node agent (1s to 1m) and than DefaultEvictor's usual minPodAge, so
	// that a bad sample is bounded for as long as it takes an alert to
	// reach someone, and short enough that a real pressure across many
	// nodes is relieved within minutes.
	DefaultEvictionBudgetWindow = 5 * time.Minute

	// DefaultSchedulerConfigFile is where the shipped manifests mount the
	// headroom-scheduler's configuration in the descheduler's pod.
	DefaultSchedulerConfigFile = "/etc/headroom/scheduler/scheduler-config.yaml"

	// DefaultSchedulerName is the only scheduler whose pods are evicted by
	// default: Headroom's, which places the replacement off the pressured
	// node.
	DefaultSchedulerName = config.SchedulerName
)

// SetDefaults_RelieveNodePressureArgs fills unset fields of a
// *RelieveNodePressureArgs. It has the descheduler registry's defaulter
// signature.
func SetDefaults_RelieveNodePressureArgs(obj runtime.Object) {
	args := obj.(*RelieveNodePressureArgs)
	if args.IPSource == "" {
		args.IPSource = config.IPSourceAnnotations
	}
	// Only the PID trigger is on unless another is given: the OOM figure
	// counts every container without a memory limit at an estimate, so on a
	// cluster of unlimited pods it can sit above any fixed threshold on most
	// nodes, and an operator should choose to evict for it; the memory
	// trigger needs the node agent's memory sample, and an operator should
	// choose its threshold against the kubelet's eviction settings.
	if args.PIDs == nil && args.OOM == nil && args.Memory == nil && args.IPStarved == nil {
		args.PIDs = &PIDsTrigger{}
	}
	if p := args.PIDs; p != nil {
		if p.ThresholdPercent == nil {
			p.ThresholdPercent = ptr.To[int64](DefaultPIDsThresholdPercent)
		}
		if p.TargetPercent == nil {
			p.TargetPercent = ptr.To[int64](max(*p.ThresholdPercent-DefaultTargetGap, 0))
		}
		if p.DefaultPodPIDs == nil {
			p.DefaultPodPIDs = ptr.To[int64](DefaultPodPIDs)
		}
		if p.MinPodPIDsPercent == nil {
			p.MinPodPIDsPercent = ptr.To[int64](DefaultMinPodPIDsPercent)
		}
		if p.MinFreePIDs == nil {
			p.MinFreePIDs = ptr.To[int64](DefaultMinFreePIDs)
		}
		if p.MinFreePercent == nil {
			p.MinFreePercent = ptr.To[int64](DefaultMinFreePercent)
		}
		if p.MaxSampleAge == nil {
			p.MaxSampleAge = &metav1.Duration{Duration: DefaultMaxSampleAge}
		}
	}
	if o := args.OOM; o != nil {
		if o.ThresholdPercent == nil {
			o.ThresholdPercent = ptr.To[int64](DefaultOOMThresholdPercent)
		}
		if o.TargetPercent == nil {
			o.TargetPercent = ptr.To[int64](max(*o.ThresholdPercent-DefaultTargetGap, 0))
		}
		if o.NoLimitRequestPercent == nil {
			o.NoLimitRequestPercent = ptr.To[int64](DefaultNoLimitRequestPercent)
		}
		if o.NoLimitAllocatablePermille == nil {
			o.NoLimitAllocatablePermille = ptr.To[int64](DefaultNoLimitAllocatablePermille)
		}
		if o.MaxSampleAge == nil {
			o.MaxSampleAge = &metav1.Duration{Duration: DefaultMaxSampleAge}
		}
	}
	if m := args.Memory; m != nil {
		if m.ThresholdPercent == nil {
			m.ThresholdPercent = ptr.To[int64](DefaultMemoryThresholdPercent)
		}
		if m.TargetPercent == nil {
			m.TargetPercent = ptr.To[int64](max(*m.ThresholdPercent-DefaultTargetGap, 0))
		}
		if m.MaxSampleAge == nil {
			m.MaxSampleAge = &metav1.Duration{Duration: DefaultMaxSampleAge}
		}
		if m.MinPodBytesPercent == nil {
			m.MinPodBytesPercent = ptr.To[int64](DefaultMinPodBytesPercent)
		}
	}
	if t := args.IPStarved; t != nil {
		if t.Grace == nil {
			t.Grace = &metav1.Duration{Duration: DefaultIPStarvedGrace}
		}
		if t.MaxSampleAge == nil {
			t.MaxSampleAge = &metav1.Duration{Duration: DefaultMaxSampleAge}
		}
		if t.MaxEventsPerNode == nil {
			t.MaxEventsPerNode = ptr.To(DefaultMaxEventsPerNode)
		}
	}
	if b := args.EvictionBudget; b != nil && b.Window == nil {
		b.Window = &metav1.Duration{Duration: DefaultEvictionBudgetWindow}
	}
	if len(args.SchedulerNames) == 0 {
		args.SchedulerNames = []string{DefaultSchedulerName}
	}
	if args.LowerPriorityFirst == nil {
		args.LowerPriorityFirst = ptr.To(true)
	}
	if args.PressureSamples == nil {
		args.PressureSamples = ptr.To(DefaultPressureSamples)
	}
	if args.StateConfigMap == "" {
		args.StateConfigMap = DefaultStateConfigMap
	}
	if args.SchedulerConfigFile == "" {
		args.SchedulerConfigFile = DefaultSchedulerConfigFile
	}
	if args.DeletePriorityAnnotation == "" {
		args.DeletePriorityAnnotation = deleteorder.DefaultPriorityAnnotation
	}
}
