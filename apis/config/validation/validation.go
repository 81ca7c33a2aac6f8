// Package validation checks the args of Headroom's scheduler plugins at
// start-up, with errors that name the offending field.
package validation

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/headroom-k8s/headroom/apis/config"
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
	if args.MaxSampleAge.Duration < 0 {
		errs = append(errs, field.Invalid(path.Child("maxSampleAge"), args.MaxSampleAge.Duration.String(), "must not be negative"))
	}
	return errs.ToAggregate()
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
	return errs.ToAggregate()
}

func inRange(path *field.Path, v, lo, hi int64) field.ErrorList {
	if v < lo || v > hi {
		return field.ErrorList{field.Invalid(path, v, fmt.Sprintf("must be in [%d, %d]", lo, hi))}
	}
	return nil
}
