package relievenodepressure

import (
	"fmt"
	configvalidation "github.com/headroom-k8s/headroom/apis/config/validation"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ValidateRelieveNodePressureArgs validates a *RelieveNodePressureArgs. The
// descheduler validates plugin args before it defaults them, so this checks
// the args as they will be after SetDefaults_RelieveNodePressureArgs; each
// error names its field, e.g. pids.targetPercent.
func ValidateRelieveNodePressureArgs(obj runtime.Object) error {
	in, ok := obj.(*RelieveNodePressureArgs)
	if !ok {
		return fmt.Errorf("want args of type RelieveNodePressureArgs, got %T", obj)
	}
	args := in.DeepCopy()
	SetDefaults_RelieveNodePressureArgs(args)

	var errs field.ErrorList
	if p := args.PIDs; p != nil {
		path := field.NewPath("pids")
		errs = append(errs, validateThresholds(path, *p.ThresholdPercent, *p.TargetPercent, 100)...)
		if *p.DefaultPodPIDs < 0 {
			errs = append(errs, field.Invalid(path.Child("defaultPodPIDs"), *p.DefaultPodPIDs, "must not be negative"))
		}
		if v := *p.MinPodPIDsPercent; v < 0 || v > 100 {
			errs = append(errs, field.Invalid(path.Child("minPodPIDsPercent"), v, "must be within [0, 100]"))
		}
		if *p.MinFreePIDs < 0 {
			errs = append(errs, field.Invalid(path.Child("minFreePIDs"), *p.MinFreePIDs, "must not be negative"))
		}
		if v := *p.MinFreePercent; v < 0 || v > 100 {
			errs = append(errs, field.Invalid(path.Child("minFreePercent"), v, "must be within [0, 100]"))
		}
		if p.MaxSampleAge.Duration < 0 {
			errs = append(errs, field.Invalid(path.Child("maxSampleAge"), p.MaxSampleAge.Duration.String(), "must not be negative"))
		}
	}
	if o := args.OOM; o != nil {
		path := field.NewPath("oom")
		// A shortfall can exceed the allocatable memory, so the OOM
		// threshold has no upper bound.
		errs = append(errs, validateThresholds(path, *o.ThresholdPercent, *o.TargetPercent, 0)...)
		if *o.NoLimitRequestPercent < 100 {
			errs = append(errs, field.Invalid(path.Child("noLimitRequestPercent"), *o.NoLimitRequestPercent,
				"must be at least 100: a container is entitled to its request"))
		}
		if v := *o.NoLimitAllocatablePermille; v < 0 || v > 1000 {
			errs = append(errs, field.Invalid(path.Child("noLimitAllocatablePermille"), v, "must be within [0, 1000]"))
		}
		if o.MaxSampleAge.Duration < 0 {
			errs = append(errs, field.Invalid(path.Child("maxSampleAge"), o.MaxSampleAge.Duration.String(), "must not be negative"))
		}
	}
	if m := args.Memory; m != nil {
		path := field.NewPath("memory")
		// A working set above allocatable is past the kubelet's hard
		// eviction threshold: a threshold there would act after it.
		errs = append(errs, validateThresholds(path, *m.ThresholdPercent, *m.TargetPercent, 100)...)
		if v := *m.MinPodBytesPercent; v < 0 || v > 100 {
			errs = append(errs, field.Invalid(path.Child("minPodBytesPercent"), v, "must be within [0, 100]"))
		}
		if m.MaxSampleAge.Duration < 0 {
			errs = append(errs, field.Invalid(path.Child("maxSampleAge"), m.MaxSampleAge.Duration.String(), "must not be negative"))
		}
	}
	if t := args.IPStarved; t != nil {
		path := field.NewPath("ipStarved")
		if g := t.Grace.Duration; g < minIPStarvedGrace || g > maxIPStarvedGrace {
			errs = append(errs, field.Invalid(path.Child("grace"), g.String(), fmt.Sprintf("must be within [%s, %s]", minIPStarvedGrace, maxIPStarvedGrace)))
		}
		if t.MaxSampleAge.Duration < 0 {
			errs = append(errs, field.Invalid(path.Child("maxSampleAge"), t.MaxSampleAge.Duration.String(), "must not be negative"))
		}
		if v := *t.MaxEventsPerNode; v < 1 || v > maxEventsPerNode {
			errs = append(errs, field.Invalid(path.Child("maxEventsPerNode"), v, fmt.Sprintf("must be within [1, %d]", maxEventsPerNode)))
		}
	}

	if v := *args.PressureSamples; v < 1 || v > maxPressureSamples {
		errs = append(errs, field.Invalid(field.NewPath("pressureSamples"), v, fmt.Sprintf("must be within [1, %d]", maxPressureSamples)))
	}
	if ns, name, ok := parseStateConfigMap(args.StateConfigMap); !ok {
		errs = append(errs, field.Invalid(field.NewPath("stateConfigMap"), args.StateConfigMap, "must be namespace/name"))
	} else {
		for _, msg := range append(utilvalidation.IsDNS1123Label(ns), utilvalidation.IsDNS1123Subdomain(name)...) {
			errs = append(errs, field.Invalid(field.NewPath("stateConfigMap"), args.StateConfigMap, msg))
		}
	}

	if !filepath.IsAbs(args.SchedulerConfigFile) {
		errs = append(errs, field.Invalid(field.NewPath("schedulerConfigFile"), args.SchedulerConfigFile, "must be an absolute path"))
	}

	keyPath := field.NewPath("deletePriorityAnnotation")
	for _, msg := range utilvalidation.IsQualifiedName(strings.ToLower(args.DeletePriorityAnnotation)) {
		errs = append(errs, field.Invalid(keyPath, args.DeletePriorityAnnotation, msg))
	}
	for i, name := range args.SchedulerNames {
		if name == "" {
			errs = append(errs, field.Invalid(field.NewPath("schedulerNames").Index(i), name, "must not be empty"))
		}
	}
	if ns := args.Namespaces; ns != nil && len(ns.Include) > 0 && len(ns.Exclude) > 0 {
		errs = append(errs, field.Invalid(field.NewPath("namespaces"), fmt.Sprintf("include %v, exclude %v", ns.Include, ns.Exclude),
			"only one of include and exclude may be set"))
	}
	if args.LabelSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(args.LabelSelector); err != nil {
			errs = append(errs, field.Invalid(field.NewPath("labelSelector"), args.LabelSelector.String(), err.Error()))
		}
	}
	if b := args.EvictionBudget; b != nil {
		errs = append(errs, validateEvictionBudget(field.NewPath("evictionBudget"), b)...)
	}
	errs = append(errs, configvalidation.ValidateIPSource(field.NewPath("ipSource"), args.IPSource)...)
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%s args: %w", PluginName, errs.ToAggregate())
}

// The bounds of ipStarved's fields: one failed attempt (the kubelet retries
// about every 10 s) is not starvation; a day is longer than anyone would
// let a pod wait; a thousand Events is a large List already.
const (
	minIPStarvedGrace       = 10 * time.Second
	maxIPStarvedGrace       = 24 * time.Hour
	maxEventsPerNode  int64 = 1000
)

// The bounds of evictionBudget's fields: a window shorter than a second is
// the descheduler's own per-run limit; one longer than a day outlives any
// incident. maxBudgetTotal bounds the record: each eviction in the window
// is at most one entry of about 100 bytes (see budgetLedger).
const (
	minBudgetWindow       = time.Second
	maxBudgetWindow       = 24 * time.Hour
	maxBudgetTotal  int32 = 500
)

// validateEvictionBudget checks the budget's window and counts.
func validateEvictionBudget(path *field.Path, b *EvictionBudget) field.ErrorList {
	var errs field.ErrorList
	if w := b.Window.Duration; w < minBudgetWindow || w > maxBudgetWindow {
		errs = append(errs, field.Invalid(path.Child("window"), w.String(), fmt.Sprintf("must be within [%s, %s]", minBudgetWindow, maxBudgetWindow)))
	}
	total := maxBudgetTotal
	switch {
	case b.Total == nil:
		errs = append(errs, field.Required(path.Child("total"), "bounds the evictions across the cluster and what the record stores"))
	case *b.Total < 1 || *b.Total > maxBudgetTotal:
		errs = append(errs, field.Invalid(path.Child("total"), *b.Total, fmt.Sprintf("must be within [1, %d]", maxBudgetTotal)))
	default:
		total = *b.Total
	}
	for _, f := range []struct {
		name string
		v    *int32
	}{{"perNode", b.PerNode}, {"perNamespace", b.PerNamespace}} {
		if f.v != nil && (*f.v < 1 || *f.v > total) {
			errs = append(errs, field.Invalid(path.Child(f.name), *f.v, fmt.Sprintf("must be within [1, total %d]", total)))
		}
	}
	return errs
}

// maxPressureSamples bounds the debounce: ten samples are minutes of
// pressure at the node agent's pace, and the plugin's record of a node
// holds that many times.
const maxPressureSamples = 10

// validateThresholds checks 1 ≤ threshold (≤ upper when upper > 0) and
// 0 ≤ target < threshold.
func validateThresholds(path *field.Path, threshold, target, upper int64) field.ErrorList {
	var errs field.ErrorList
	thresholdPath, targetPath := path.Child("thresholdPercent"), path.Child("targetPercent")
	switch {
	case threshold < 1:
		errs = append(errs, field.Invalid(thresholdPath, threshold, "must be at least 1"))
	case upper > 0 && threshold > upper:
		errs = append(errs, field.Invalid(thresholdPath, threshold, fmt.Sprintf("must be at most %d", upper)))
	}
	switch {
	case target < 0:
		errs = append(errs, field.Invalid(targetPath, target, "must not be negative"))
	case target >= threshold:
		errs = append(errs, field.Invalid(targetPath, target, fmt.Sprintf("must be below %s (%d)", thresholdPath, threshold)))
	}
	return errs
}
