package relievenodepressure

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"

	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
)

// TestDefaultsMatchTheSchedulerPlugins fails when the descheduler's defaults
// and the scheduler plugins' defaults, as their KubeSchedulerConfiguration
// args are defaulted, ever count a node differently.
func TestDefaultsMatchTheSchedulerPlugins(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := configv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	nodePIDs, oomRisk := &configv1.NodePIDsArgs{}, &configv1.OOMRiskArgs{}
	scheme.Default(nodePIDs)
	scheme.Default(oomRisk)
	if nodePIDs.DefaultPodPIDs == nil || oomRisk.NoLimitRequestPercent == nil {
		t.Fatal("the scheduler args' defaulters did not run")
	}

	args := &RelieveNodePressureArgs{PIDs: &PIDsTrigger{}, OOM: &OOMTrigger{}, Memory: &MemoryTrigger{}}
	SetDefaults_RelieveNodePressureArgs(args)
	for _, c := range []struct {
		field               string
		scheduler, deschedr any
	}{
		{"defaultPodPIDs", *nodePIDs.DefaultPodPIDs, *args.PIDs.DefaultPodPIDs},
		{"maxSampleAge", nodePIDs.MaxSampleAge.Duration, args.PIDs.MaxSampleAge.Duration},
		{"minFreePIDs", *nodePIDs.MinFreePIDs, *args.PIDs.MinFreePIDs},
		{"minFreePercent", *nodePIDs.MinFreePercent, *args.PIDs.MinFreePercent},
		{"noLimitRequestPercent", *oomRisk.NoLimitRequestPercent, *args.OOM.NoLimitRequestPercent},
		{"noLimitAllocatablePermille", *oomRisk.NoLimitAllocatablePermille, *args.OOM.NoLimitAllocatablePermille},
		{"oom.maxSampleAge", oomRisk.MaxSampleAge.Duration, args.OOM.MaxSampleAge.Duration},
		{"memory.maxSampleAge", oomRisk.MaxSampleAge.Duration, args.Memory.MaxSampleAge.Duration},
	} {
		if c.scheduler != c.deschedr {
			t.Errorf("%s: the scheduler plugins default to %v, RelieveNodePressure to %v", c.field, c.scheduler, c.deschedr)
		}
	}
}
