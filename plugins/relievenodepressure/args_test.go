package relievenodepressure

import (
	"strings"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/api"
	"sigs.k8s.io/yaml"
)

func TestDefaults(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   RelieveNodePressureArgs
		want RelieveNodePressureArgs
	}{{
		name: "no trigger given: the PID trigger alone, with defaults",
		in:   RelieveNodePressureArgs{},
		want: RelieveNodePressureArgs{
			PIDs: &PIDsTrigger{ThresholdPercent: ptr.To[int64](95), TargetPercent: ptr.To[int64](90),
				DefaultPodPIDs: ptr.To[int64](100), MaxSampleAge: &metav1.Duration{Duration: 10 * time.Minute},
				MinPodPIDsPercent: ptr.To[int64](1), MinFreePIDs: ptr.To[int64](512), MinFreePercent: ptr.To[int64](5)},
			SchedulerNames: []string{"headroom-scheduler"}, LowerPriorityFirst: ptr.To(true),
			PressureSamples: ptr.To[int32](2), StateConfigMap: "headroom-system/headroom-descheduler-state",
			SchedulerConfigFile:      "/etc/headroom/scheduler/scheduler-config.yaml",
			DeletePriorityAnnotation: "controller.alpha.kubernetes.io/delete-priority",
			IPSource:                 "Annotations",
		},
	}, {
		name: "an empty oom given: the OOM trigger alone, with defaults",
		in:   RelieveNodePressureArgs{OOM: &OOMTrigger{}},
		want: RelieveNodePressureArgs{
			OOM: &OOMTrigger{ThresholdPercent: ptr.To[int64](20), TargetPercent: ptr.To[int64](15),
				NoLimitRequestPercent: ptr.To[int64](200), NoLimitAllocatablePermille: ptr.To[int64](100),
				MaxSampleAge: &metav1.Duration{Duration: 10 * time.Minute}},
			SchedulerNames: []string{"headroom-scheduler"}, LowerPriorityFirst: ptr.To(true),
			PressureSamples: ptr.To[int32](2), StateConfigMap: "headroom-system/headroom-descheduler-state",
			SchedulerConfigFile:      "/etc/headroom/scheduler/scheduler-config.yaml",
			DeletePriorityAnnotation: "controller.alpha.kubernetes.io/delete-priority",
			IPSource:                 "Annotations",
		},
	}, {
		name: "an empty memory given: the memory trigger alone, with defaults",
		in:   RelieveNodePressureArgs{Memory: &MemoryTrigger{}},
		want: RelieveNodePressureArgs{
			Memory: &MemoryTrigger{ThresholdPercent: ptr.To[int64](90), TargetPercent: ptr.To[int64](85),
				MaxSampleAge: &metav1.Duration{Duration: 10 * time.Minute}, MinPodBytesPercent: ptr.To[int64](1)},
			SchedulerNames: []string{"headroom-scheduler"}, LowerPriorityFirst: ptr.To(true),
			PressureSamples: ptr.To[int32](2), StateConfigMap: "headroom-system/headroom-descheduler-state",
			SchedulerConfigFile:      "/etc/headroom/scheduler/scheduler-config.yaml",
			DeletePriorityAnnotation: "controller.alpha.kubernetes.io/delete-priority",
			IPSource:                 "Annotations",
		},
	}, {
		name: "memory and OOM given: both on, the PID trigger off; set values stay",
		in: RelieveNodePressureArgs{Memory: &MemoryTrigger{ThresholdPercent: ptr.To[int64](100), MinPodBytesPercent: ptr.To[int64](0),
			MaxSampleAge: &metav1.Duration{}}, OOM: &OOMTrigger{}},
		want: RelieveNodePressureArgs{
			OOM: &OOMTrigger{ThresholdPercent: ptr.To[int64](20), TargetPercent: ptr.To[int64](15),
				NoLimitRequestPercent: ptr.To[int64](200), NoLimitAllocatablePermille: ptr.To[int64](100),
				MaxSampleAge: &metav1.Duration{Duration: 10 * time.Minute}},
			Memory: &MemoryTrigger{ThresholdPercent: ptr.To[int64](100), TargetPercent: ptr.To[int64](95),
				MaxSampleAge: &metav1.Duration{}, MinPodBytesPercent: ptr.To[int64](0)},
			SchedulerNames: []string{"headroom-scheduler"}, LowerPriorityFirst: ptr.To(true),
			PressureSamples: ptr.To[int32](2), StateConfigMap: "headroom-system/headroom-descheduler-state",
			SchedulerConfigFile:      "/etc/headroom/scheduler/scheduler-config.yaml",
			DeletePriorityAnnotation: "controller.alpha.kubernetes.io/delete-priority",
			IPSource:                 "Annotations",
		},
	}, {
		name: "one trigger given: the other stays off; an unset target is 5 below the threshold",
		in:   RelieveNodePressureArgs{PIDs: &PIDsTrigger{ThresholdPercent: ptr.To[int64](80)}, DeletePriorityAnnotation: "example.com/p"},
		want: RelieveNodePressureArgs{
			PIDs: &PIDsTrigger{ThresholdPercent: ptr.To[int64](80), TargetPercent: ptr.To[int64](75),
				DefaultPodPIDs: ptr.To[int64](100), MaxSampleAge: &metav1.Duration{Duration: 10 * time.Minute},
				MinPodPIDsPercent: ptr.To[int64](1), MinFreePIDs: ptr.To[int64](512), MinFreePercent: ptr.To[int64](5)},
			SchedulerNames: []string{"headroom-scheduler"}, LowerPriorityFirst: ptr.To(true),
			PressureSamples: ptr.To[int32](2), StateConfigMap: "headroom-system/headroom-descheduler-state",
			SchedulerConfigFile:      "/etc/headroom/scheduler/scheduler-config.yaml",
			DeletePriorityAnnotation: "example.com/p",
			IPSource:                 "Annotations",
		},
	}, {
		name: "an eviction budget without a window gets 5m; its counts stay unset",
		in:   RelieveNodePressureArgs{PIDs: &PIDsTrigger{}, EvictionBudget: &EvictionBudget{Total: ptr.To[int32](20)}},
		want: RelieveNodePressureArgs{
			PIDs: &PIDsTrigger{ThresholdPercent: ptr.To[int64](95), TargetPercent: ptr.To[int64](90),
				DefaultPodPIDs: ptr.To[int64](100), MaxSampleAge: &metav1.Duration{Duration: 10 * time.Minute},
				MinPodPIDsPercent: ptr.To[int64](1), MinFreePIDs: ptr.To[int64](512), MinFreePercent: ptr.To[int64](5)},
			EvictionBudget: &EvictionBudget{Window: &metav1.Duration{Duration: 5 * time.Minute}, Total: ptr.To[int32](20)},
			SchedulerNames: []string{"headroom-scheduler"}, LowerPriorityFirst: ptr.To(true),
			PressureSamples: ptr.To[int32](2), StateConfigMap: "headroom-system/headroom-descheduler-state",
			SchedulerConfigFile:      "/etc/headroom/scheduler/scheduler-config.yaml",
			DeletePriorityAnnotation: "controller.alpha.kubernetes.io/delete-priority",
			IPSource:                 "Annotations",
		},
	}, {
		name: "set values stay, zeros included; the target never goes below 0",
		in: RelieveNodePressureArgs{OOM: &OOMTrigger{ThresholdPercent: ptr.To[int64](3),
			NoLimitRequestPercent: ptr.To[int64](100), NoLimitAllocatablePermille: ptr.To[int64](0),
			MaxSampleAge: &metav1.Duration{}}},
		want: RelieveNodePressureArgs{
			OOM: &OOMTrigger{ThresholdPercent: ptr.To[int64](3), TargetPercent: ptr.To[int64](0),
				NoLimitRequestPercent: ptr.To[int64](100), NoLimitAllocatablePermille: ptr.To[int64](0),
				MaxSampleAge: &metav1.Duration{}},
			SchedulerNames: []string{"headroom-scheduler"}, LowerPriorityFirst: ptr.To(true),
			PressureSamples: ptr.To[int32](2), StateConfigMap: "headroom-system/headroom-descheduler-state",
			SchedulerConfigFile:      "/etc/headroom/scheduler/scheduler-config.yaml",
			DeletePriorityAnnotation: "controller.alpha.kubernetes.io/delete-priority",
			IPSource:                 "Annotations",
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.DeepCopy()
			SetDefaults_RelieveNodePressureArgs(got)
			if !equalArgs(got, &tc.want) {
				t.Fatalf("defaulted to\n%s\nwant\n%s", dump(got), dump(&tc.want))
			}
		})
	}
}

func TestValidation(t *testing.T) {
	for _, tc := range []struct {
		name  string
		args  RelieveNodePressureArgs
		field string // "" means valid
	}{
		{"defaults", RelieveNodePressureArgs{}, ""},
		{"PID target 0", RelieveNodePressureArgs{PIDs: &PIDsTrigger{TargetPercent: ptr.To[int64](0)}}, ""},
		{"PID threshold above 100", RelieveNodePressureArgs{PIDs: &PIDsTrigger{ThresholdPercent: ptr.To[int64](101), TargetPercent: ptr.To[int64](90)}}, "pids.thresholdPercent"},
		{"PID threshold 0", RelieveNodePressureArgs{PIDs: &PIDsTrigger{ThresholdPercent: ptr.To[int64](0)}}, "pids.thresholdPercent"},
		{"PID target at threshold", RelieveNodePressureArgs{PIDs: &PIDsTrigger{TargetPercent: ptr.To[int64](95)}}, "pids.targetPercent"},
		{"PID target above threshold", RelieveNodePressureArgs{PIDs: &PIDsTrigger{ThresholdPercent: ptr.To[int64](50), TargetPercent: ptr.To[int64](60)}}, "pids.targetPercent"},
		{"PID target negative", RelieveNodePressureArgs{PIDs: &PIDsTrigger{TargetPercent: ptr.To[int64](-1)}}, "pids.targetPercent"},
		{"negative default PIDs", RelieveNodePressureArgs{PIDs: &PIDsTrigger{DefaultPodPIDs: ptr.To[int64](-1)}}, "pids.defaultPodPIDs"},
		{"negative sample age", RelieveNodePressureArgs{PIDs: &PIDsTrigger{MaxSampleAge: &metav1.Duration{Duration: -time.Second}}}, "pids.maxSampleAge"},
		{"OOM threshold above 100 is fine", RelieveNodePressureArgs{OOM: &OOMTrigger{ThresholdPercent: ptr.To[int64](150)}}, ""},
		{"OOM target at threshold", RelieveNodePressureArgs{OOM: &OOMTrigger{ThresholdPercent: ptr.To[int64](10), TargetPercent: ptr.To[int64](10)}}, "oom.targetPercent"},
		{"OOM threshold 0", RelieveNodePressureArgs{OOM: &OOMTrigger{ThresholdPercent: ptr.To[int64](0), TargetPercent: ptr.To[int64](0)}}, "oom.thresholdPercent"},
		{"request multiplier below 100", RelieveNodePressureArgs{OOM: &OOMTrigger{NoLimitRequestPercent: ptr.To[int64](99)}}, "oom.noLimitRequestPercent"},
		{"allocatable share above 1000", RelieveNodePressureArgs{OOM: &OOMTrigger{NoLimitAllocatablePermille: ptr.To[int64](1001)}}, "oom.noLimitAllocatablePermille"},
		{"negative memory sample age", RelieveNodePressureArgs{OOM: &OOMTrigger{MaxSampleAge: &metav1.Duration{Duration: -time.Second}}}, "oom.maxSampleAge"},
		{"memory defaults", RelieveNodePressureArgs{Memory: &MemoryTrigger{}}, ""},
		{"memory threshold 100, target 0", RelieveNodePressureArgs{Memory: &MemoryTrigger{ThresholdPercent: ptr.To[int64](100), TargetPercent: ptr.To[int64](0)}}, ""},
		{"memory threshold above 100", RelieveNodePressureArgs{Memory: &MemoryTrigger{ThresholdPercent: ptr.To[int64](101), TargetPercent: ptr.To[int64](90)}}, "memory.thresholdPercent"},
		{"memory threshold 0", RelieveNodePressureArgs{Memory: &MemoryTrigger{ThresholdPercent: ptr.To[int64](0)}}, "memory.thresholdPercent"},
		{"memory target at threshold", RelieveNodePressureArgs{Memory: &MemoryTrigger{TargetPercent: ptr.To[int64](90)}}, "memory.targetPercent"},
		{"memory target negative", RelieveNodePressureArgs{Memory: &MemoryTrigger{TargetPercent: ptr.To[int64](-1)}}, "memory.targetPercent"},
		{"memory floor above 100 %", RelieveNodePressureArgs{Memory: &MemoryTrigger{MinPodBytesPercent: ptr.To[int64](101)}}, "memory.minPodBytesPercent"},
		{"memory floor negative", RelieveNodePressureArgs{Memory: &MemoryTrigger{MinPodBytesPercent: ptr.To[int64](-1)}}, "memory.minPodBytesPercent"},
		{"negative memory trigger sample age", RelieveNodePressureArgs{Memory: &MemoryTrigger{MaxSampleAge: &metav1.Duration{Duration: -time.Second}}}, "memory.maxSampleAge"},
		{"annotation key", RelieveNodePressureArgs{DeletePriorityAnnotation: "not a key!"}, "deletePriorityAnnotation"},
		{"ip source", RelieveNodePressureArgs{IPSource: "Calico"}, "ipSource"},
		{"include and exclude", RelieveNodePressureArgs{Namespaces: &api.Namespaces{Include: []string{"a"}, Exclude: []string{"b"}}}, "namespaces"},
		{"floor above 100 %", RelieveNodePressureArgs{PIDs: &PIDsTrigger{MinPodPIDsPercent: ptr.To[int64](101)}}, "pids.minPodPIDsPercent"},
		{"negative NodePIDs floor", RelieveNodePressureArgs{PIDs: &PIDsTrigger{MinFreePIDs: ptr.To[int64](-1)}}, "pids.minFreePIDs"},
		{"NodePIDs floor above 100 %", RelieveNodePressureArgs{PIDs: &PIDsTrigger{MinFreePercent: ptr.To[int64](101)}}, "pids.minFreePercent"},
		{"empty scheduler name", RelieveNodePressureArgs{SchedulerNames: []string{"a", ""}}, "schedulerNames[1]"},
		{"budget", RelieveNodePressureArgs{EvictionBudget: &EvictionBudget{Total: ptr.To[int32](20), PerNode: ptr.To[int32](5), PerNamespace: ptr.To[int32](20)}}, ""},
		{"budget without total", RelieveNodePressureArgs{EvictionBudget: &EvictionBudget{PerNode: ptr.To[int32](5)}}, "evictionBudget.total"},
		{"budget total 0", RelieveNodePressureArgs{EvictionBudget: &EvictionBudget{Total: ptr.To[int32](0)}}, "evictionBudget.total"},
		{"budget total above 500", RelieveNodePressureArgs{EvictionBudget: &EvictionBudget{Total: ptr.To[int32](501)}}, "evictionBudget.total"},
		{"budget window below 1s", RelieveNodePressureArgs{EvictionBudget: &EvictionBudget{Total: ptr.To[int32](1), Window: &metav1.Duration{Duration: time.Millisecond}}}, "evictionBudget.window"},
		{"budget window above 24h", RelieveNodePressureArgs{EvictionBudget: &EvictionBudget{Total: ptr.To[int32](1), Window: &metav1.Duration{Duration: 25 * time.Hour}}}, "evictionBudget.window"},
		{"budget per node above total", RelieveNodePressureArgs{EvictionBudget: &EvictionBudget{Total: ptr.To[int32](5), PerNode: ptr.To[int32](6)}}, "evictionBudget.perNode"},
		{"budget per namespace 0", RelieveNodePressureArgs{EvictionBudget: &EvictionBudget{Total: ptr.To[int32](5), PerNamespace: ptr.To[int32](0)}}, "evictionBudget.perNamespace"},
		{"bad selector", RelieveNodePressureArgs{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k", Operator: "Near"}}}}, "labelSelector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := dump(&tc.args)
			err := ValidateRelieveNodePressureArgs(&tc.args)
			if dump(&tc.args) != before {
				t.Fatal("validation changed the args")
			}
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("want valid, got %v", err)
			case tc.field != "" && err == nil:
				t.Fatalf("want an error naming %s, got none", tc.field)
			case tc.field != "" && !strings.Contains(err.Error(), tc.field+":"):
				t.Fatalf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

func TestNewRejectsInvalidArgs(t *testing.T) {
	_, err := newPlugin(t.Context(), &RelieveNodePressureArgs{PIDs: &PIDsTrigger{TargetPercent: ptr.To[int64](99)}}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "pids.targetPercent") {
		t.Fatalf("newPlugin with target above threshold: %v", err)
	}
	if _, err := newPlugin(t.Context(), &metav1.Status{}, nil, nil); err == nil {
		t.Fatal("newPlugin accepted args of another type")
	}
}

func equalArgs(a, b *RelieveNodePressureArgs) bool { return apiequality.Semantic.DeepEqual(a, b) }

func dump(a *RelieveNodePressureArgs) string {
	out, err := yaml.Marshal(a)
	if err != nil {
		return err.Error()
	}
	return string(out)
}
