// Package validation checks the args of Headroom's scheduler plugins at
// start-up, with errors that name the offending field.
package validation

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
)

// maxPIDs bounds every PID figure: Linux's pid_max cannot exceed 2^22.
const maxPIDs = 1 << 22

// ValidateNodePIDsArgs validates NodePIDsArgs; path is the args' field path.
func ValidateNodePIDsArgs(path *field.Path, args *config.NodePIDsArgs) error {
	var errs field.ErrorList
	errs = append(errs, inRange(path.Child("defaultPodPIDs"), args.DefaultPodPIDs, 0, maxPIDs)...)
	errs = append(errs, inRange(path.Child("minFreePIDs"), args.MinFreePIDs, 0, maxPIDs)...)
	errs = append(errs, inRange(path.Child("minFreePercent"), args.MinFreePercent, 0, 100)...)
	errs = append(errs, inRange(path.Child("unknownNodeScore"), args.UnknownNodeScore, config.UnknownNodeScoreMeanOfKnown, 100)...)
	errs = append(errs, notNegative(path.Child("maxSampleAge"), args.MaxSampleAge.Duration)...)
	errs = append(errs, inRange(path.Child("ampleFreePIDs"), args.AmpleFreePIDs, 0, maxPIDs)...)
	return errs.ToAggregate()
}

// ValidateNodeIPsArgs validates NodeIPsArgs; path is the args' field path.
func ValidateNodeIPsArgs(path *field.Path, args *config.NodeIPsArgs) error {
	var errs field.ErrorList
	errs = append(errs, inRange(path.Child("minFreeIPs"), args.MinFreeIPs, 0, ipstats.MaxCount)...)
	errs = append(errs, inRange(path.Child("ampleFreeIPs"), args.AmpleFreeIPs, 0, ipstats.MaxCount)...)
	errs = append(errs, inRange(path.Child("unknownNodeScore"), args.UnknownNodeScore, config.UnknownNodeScoreMeanOfKnown, 100)...)
	errs = append(errs, notNegative(path.Child("maxSampleAge"), args.MaxSampleAge.Duration)...)
	errs = append(errs, ValidateIPSource(path.Child("ipSource"), args.IPSource)...)
	return errs.ToAggregate()
}

// ValidateIPSource checks a plugin's ipSource.
func ValidateIPSource(path *field.Path, source string) field.ErrorList {
	switch source {
	case config.IPSourceAnnotations, config.IPSourceCalicoIPAM:
		return nil
	}
	return field.ErrorList{field.NotSupported(path, source, []string{config.IPSourceAnnotations, config.IPSourceCalicoIPAM})}
}

// ValidateOOMRiskArgs validates OOMRiskArgs; path is the args' field path.
func ValidateOOMRiskArgs(path *field.Path, args *config.OOMRiskArgs) error {
	var errs field.ErrorList
	// Weights are bounded so that weighted sums of parts-per-million figures
	// stay far from int64 overflow.
	const maxWeight = 1000
	errs = append(errs, inRange(path.Child("ownRiskWeight"), args.OwnRiskWeight, 0, maxWeight)...)
	errs = append(errs, inRange(path.Child("collateralWeight"), args.CollateralWeight, 0, maxWeight)...)
	if args.OwnRiskWeight == 0 && args.CollateralWeight == 0 {
		errs = append(errs, field.Invalid(path.Child("ownRiskWeight"), args.OwnRiskWeight, "ownRiskWeight and collateralWeight must not both be 0"))
	}
	errs = append(errs, inRange(path.Child("noLimitRequestPercent"), args.NoLimitRequestPercent, 100, 10000)...)
	errs = append(errs, inRange(path.Child("noLimitAllocatablePermille"), args.NoLimitAllocatablePermille, 0, 1000)...)
	errs = append(errs, notNegative(path.Child("maxSampleAge"), args.MaxSampleAge.Duration)...)
	return errs.ToAggregate()
}

func notNegative(path *field.Path, d time.Duration) field.ErrorList {
	if d < 0 {
		return field.ErrorList{field.Invalid(path, d.String(), "must not be negative")}
	}
	return nil
}

func inRange(path *field.Path, v, lo, hi int64) field.ErrorList {
	if v < lo || v > hi {
		return field.ErrorList{field.Invalid(path, v, fmt.Sprintf("must be in [%d, %d]", lo, hi))}
	}
	return nil
}
