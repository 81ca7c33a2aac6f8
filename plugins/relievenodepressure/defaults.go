package relievenodepressure

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

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

	DefaultOOMThresholdPercent        int64 = 20
	DefaultNoLimitRequestPercent            = oomkill.DefaultRequestMultiplierPercent
	DefaultNoLimitAllocatablePermille       = oomkill.DefaultFractionOfAllocatablePermille

	// DefaultTargetGap is how far below the threshold an unset target lies.
	DefaultTargetGap int64 = 5

	// DefaultSchedulerName is the only scheduler whose pods are evicted by
	// default: Headroom's, which places the replacement off the pressured
	// node.
	DefaultSchedulerName = "headroom-scheduler"
)

// SetDefaults_RelieveNodePressureArgs fills unset fields of a
// *RelieveNodePressureArgs. It has the descheduler registry's defaulter
// signature.
func SetDefaults_RelieveNodePressureArgs(obj runtime.Object) {
	args := obj.(*RelieveNodePressureArgs)
	// Only the PID trigger is on unless oom is given: the OOM figure counts
	// every container without a memory limit at an estimate, so on a cluster
	// of unlimited pods it can sit above any fixed threshold on most nodes,
	// and an operator should choose to evict for it.
	if args.PIDs == nil && args.OOM == nil {
		args.PIDs = &PIDsTrigger{}
	}
	if p := args.PIDs; p != nil {
		setDefault(&p.ThresholdPercent, DefaultPIDsThresholdPercent)
		setDefault(&p.TargetPercent, max(*p.ThresholdPercent-DefaultTargetGap, 0))
		setDefault(&p.DefaultPodPIDs, DefaultPodPIDs)
		setDefault(&p.MinPodPIDsPercent, DefaultMinPodPIDsPercent)
		setDefault(&p.MinFreePIDs, DefaultMinFreePIDs)
		setDefault(&p.MinFreePercent, DefaultMinFreePercent)
		if p.MaxSampleAge == nil {
			p.MaxSampleAge = &metav1.Duration{Duration: DefaultMaxSampleAge}
		}
	}
	if o := args.OOM; o != nil {
		setDefault(&o.ThresholdPercent, DefaultOOMThresholdPercent)
		setDefault(&o.TargetPercent, max(*o.ThresholdPercent-DefaultTargetGap, 0))
		setDefault(&o.NoLimitRequestPercent, DefaultNoLimitRequestPercent)
		setDefault(&o.NoLimitAllocatablePermille, DefaultNoLimitAllocatablePermille)
	}
	if len(args.SchedulerNames) == 0 {
		args.SchedulerNames = []string{DefaultSchedulerName}
	}
	if args.LowerPriorityFirst == nil {
		args.LowerPriorityFirst = ptr.To(true)
	}
	if args.DeletePriorityAnnotation == "" {
		args.DeletePriorityAnnotation = deleteorder.DefaultPriorityAnnotation
	}
}

func setDefault(p **int64, v int64) {
	if *p == nil {
		*p = &v
	}
}
