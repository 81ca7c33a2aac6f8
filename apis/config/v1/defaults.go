package v1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
)

// Defaults of NodeIPsArgs. MaxSampleAge and UnknownNodeScore are
// NodePIDsArgs' (DefaultMaxSampleAge, from pkg/pidstats, and
// DefaultUnknownNodeScore): the node agent writes both samples in the same
// patch, so they age alike.
const DefaultMinFreeIPs int64 = 0

// Defaults of OOMRiskArgs.
const (
	DefaultOwnRiskWeight    int64 = 3
	DefaultCollateralWeight int64 = 1
	// The no-limit estimate's defaults are pkg/oomkill's, shared with
	// RelieveNodePressure.
	DefaultNoLimitRequestPercent      = oomkill.DefaultRequestMultiplierPercent
	DefaultNoLimitAllocatablePermille = oomkill.DefaultFractionOfAllocatablePermille
)

func setDefault(p **int64, v int64) {
	if *p == nil {
		*p = &v
	}
}

func setDefaultDuration(p **metav1.Duration, v time.Duration) {
	if *p == nil {
		*p = &metav1.Duration{Duration: v}
	}
}

// SetDefaults_NodePIDsArgs fills unset NodePIDsArgs fields.
func SetDefaults_NodePIDsArgs(obj *NodePIDsArgs) {
	setDefault(&obj.DefaultPodPIDs, DefaultPodPIDs)
	setDefault(&obj.MinFreePIDs, DefaultMinFreePIDs)
	setDefault(&obj.MinFreePercent, DefaultMinFreePercent)
	setDefault(&obj.UnknownNodeScore, DefaultUnknownNodeScore)
	setDefaultDuration(&obj.MaxSampleAge, DefaultMaxSampleAge)
}

// SetDefaults_NodeIPsArgs fills unset NodeIPsArgs fields.
func SetDefaults_NodeIPsArgs(obj *NodeIPsArgs) {
	setDefault(&obj.MinFreeIPs, DefaultMinFreeIPs)
	setDefault(&obj.UnknownNodeScore, DefaultUnknownNodeScore)
	setDefaultDuration(&obj.MaxSampleAge, DefaultMaxSampleAge)
}

// SetDefaults_OOMRiskArgs fills unset OOMRiskArgs fields.
func SetDefaults_OOMRiskArgs(obj *OOMRiskArgs) {
	setDefault(&obj.OwnRiskWeight, DefaultOwnRiskWeight)
	setDefault(&obj.CollateralWeight, DefaultCollateralWeight)
	setDefault(&obj.NoLimitRequestPercent, DefaultNoLimitRequestPercent)
	setDefault(&obj.NoLimitAllocatablePermille, DefaultNoLimitAllocatablePermille)
}
