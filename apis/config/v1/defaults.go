package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/headroom-k8s/headroom/apis/config"
	"github.com/headroom-k8s/headroom/pkg/oomkill"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

// Defaults of NodePIDsArgs.
const (
	// The PID model's defaults are declared once, in pkg/pidstats, for
	// NodePIDs and RelieveNodePressure alike.
	DefaultPodPIDs          = pidstats.DefaultPodPIDs
	DefaultMinFreePIDs      = pidstats.DefaultMinFreePIDs
	DefaultMinFreePercent   = pidstats.DefaultMinFreePercent
	DefaultMaxSampleAge     = pidstats.DefaultMaxSampleAge
	DefaultUnknownNodeScore = config.UnknownNodeScoreMeanOfKnown
	// DefaultAmpleFreePIDs is Linux's default pid_max.
	DefaultAmpleFreePIDs int64 = 32768
)

// Defaults of NodeIPsArgs. MaxSampleAge and UnknownNodeScore are
// NodePIDsArgs' (DefaultMaxSampleAge, from pkg/pidstats, and
// DefaultUnknownNodeScore): the node agent writes both samples in the same
// patch, so they age alike.
const (
	DefaultMinFreeIPs int64 = 0
	// DefaultAmpleFreeIPs is the kubelet's default maxPods.
	DefaultAmpleFreeIPs int64 = 110
)

// Defaults of OOMRiskArgs.
const (
	DefaultOwnRiskWeight    int64 = 3
	DefaultCollateralWeight int64 = 1
	// The no-limit estimate's defaults are pkg/oomkill's, shared with
	// RelieveNodePressure.
	DefaultNoLimitRequestPercent      = oomkill.DefaultRequestMultiplierPercent
	DefaultNoLimitAllocatablePermille = oomkill.DefaultFractionOfAllocatablePermille
)

// SetDefaults_NodePIDsArgs fills unset NodePIDsArgs fields.
func SetDefaults_NodePIDsArgs(obj *NodePIDsArgs) {
	if obj.DefaultPodPIDs == nil {
		obj.DefaultPodPIDs = ptr.To[int64](DefaultPodPIDs)
	}
	if obj.MinFreePIDs == nil {
		obj.MinFreePIDs = ptr.To[int64](DefaultMinFreePIDs)
	}
	if obj.MinFreePercent == nil {
		obj.MinFreePercent = ptr.To[int64](DefaultMinFreePercent)
	}
	if obj.UnknownNodeScore == nil {
		obj.UnknownNodeScore = ptr.To[int64](DefaultUnknownNodeScore)
	}
	if obj.MaxSampleAge == nil {
		obj.MaxSampleAge = &metav1.Duration{Duration: DefaultMaxSampleAge}
	}
	if obj.AmpleFreePIDs == nil {
		obj.AmpleFreePIDs = ptr.To(DefaultAmpleFreePIDs)
	}
}

// SetDefaults_NodeIPsArgs fills unset NodeIPsArgs fields.
func SetDefaults_NodeIPsArgs(obj *NodeIPsArgs) {
	if obj.MinFreeIPs == nil {
		obj.MinFreeIPs = ptr.To[int64](DefaultMinFreeIPs)
	}
	if obj.UnknownNodeScore == nil {
		obj.UnknownNodeScore = ptr.To[int64](DefaultUnknownNodeScore)
	}
	if obj.MaxSampleAge == nil {
		obj.MaxSampleAge = &metav1.Duration{Duration: DefaultMaxSampleAge}
	}
	if obj.IPSource == nil {
		obj.IPSource = ptr.To(config.IPSourceAnnotations)
	}
	if obj.AmpleFreeIPs == nil {
		obj.AmpleFreeIPs = ptr.To(DefaultAmpleFreeIPs)
	}
}

// SetDefaults_OOMRiskArgs fills unset OOMRiskArgs fields.
func SetDefaults_OOMRiskArgs(obj *OOMRiskArgs) {
	if obj.OwnRiskWeight == nil {
		obj.OwnRiskWeight = ptr.To[int64](DefaultOwnRiskWeight)
	}
	if obj.CollateralWeight == nil {
		obj.CollateralWeight = ptr.To[int64](DefaultCollateralWeight)
	}
	if obj.NoLimitRequestPercent == nil {
		obj.NoLimitRequestPercent = ptr.To[int64](DefaultNoLimitRequestPercent)
	}
	if obj.NoLimitAllocatablePermille == nil {
		obj.NoLimitAllocatablePermille = ptr.To[int64](DefaultNoLimitAllocatablePermille)
	}
	if obj.MaxSampleAge == nil {
		obj.MaxSampleAge = &metav1.Duration{Duration: DefaultMaxSampleAge}
	}
}
