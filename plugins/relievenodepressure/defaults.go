package relievenodepressure

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/headroom-k8s/headroom/pkg/deleteorder"
	"github.com/headroom-k8s/headroom/pkg/oomkill"
)

// Defaults. The PID sampling and the no-limit estimate match the defaults of
// the NodePIDs and OOMRisk scheduler plugins, so that both sides see the same
// figures unless configured otherwise.
const (
	DefaultPIDsThresholdPercent int64 = 95
	DefaultPodPIDs              int64 = 100
	DefaultMaxSampleAge               = 10 * time.Minute

	DefaultOOMThresholdPercent int64 = 20

	// DefaultTargetGap is how far below the threshold an unset target lies.
	DefaultTargetGap int64 = 5
)

var (
	DefaultNoLimitRequestPercent      = oomkill.DefaultEstimate.RequestMultiplierPercent
	DefaultNoLimitAllocatablePermille = oomkill.DefaultEstimate.FractionOfAllocatablePermille
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
	if args.DeletePriorityAnnotation == "" {
		args.DeletePriorityAnnotation = deleteorder.DefaultPriorityAnnotation
	}
}

func setDefault(p **int64, v int64) {
	if *p == nil {
		*p = &v
	}
}
