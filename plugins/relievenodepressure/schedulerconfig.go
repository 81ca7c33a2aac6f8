package relievenodepressure

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/headroom-k8s/headroom/apis/config"
	configscheme "github.com/headroom-k8s/headroom/apis/config/scheme"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
)

// nodePIDsPlugin is the NodePIDs scheduler plugin's name.
const nodePIDsPlugin = "NodePIDs"

// checkFloorAgrees reads the KubeSchedulerConfiguration at path and checks
// that NodePIDs' floor in the profiles of the args' schedulerNames is the
// room check's (pids.minFreePIDs, pids.minFreePercent): a replacement
// counted as fitting above one floor would be refused by the other, or
// placed where the descheduler thinks there is no room. A missing file is
// no error (a descheduler installed without Headroom's scheduler); what it
// found is returned for the log.
func checkFloorAgrees(path string, args *RelieveNodePressureArgs) (string, error) {
	if args.PIDs == nil {
		return "the PID trigger is off", nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Sprintf("no scheduler configuration at %s: NodePIDs' floor is not checked against pids.minFreePIDs and pids.minFreePercent", path), nil
	}
	if err != nil {
		return "", fmt.Errorf("schedulerConfigFile: %w", err)
	}
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return "", fmt.Errorf("schedulerConfigFile %s: %w", path, err)
	}
	cfg, ok := obj.(*schedconfig.KubeSchedulerConfiguration)
	if !ok {
		return "", fmt.Errorf("schedulerConfigFile %s: a %T, not a KubeSchedulerConfiguration", path, obj)
	}
	checked := 0
	for _, profile := range cfg.Profiles {
		if !slices.Contains(args.SchedulerNames, profile.SchedulerName) || !enables(profile, nodePIDsPlugin) {
			continue
		}
		var raw runtime.Object
		for _, pc := range profile.PluginConfig {
			if pc.Name == nodePIDsPlugin {
				raw = pc.Args
			}
		}
		sched, err := configscheme.PluginArgs[config.NodePIDsArgs](nodePIDsPlugin, raw, &configv1.NodePIDsArgs{})
		if err != nil {
			return "", fmt.Errorf("schedulerConfigFile %s, profile %s: %w", path, profile.SchedulerName, err)
		}
		if sched.MinFreePIDs != *args.PIDs.MinFreePIDs || sched.MinFreePercent != *args.PIDs.MinFreePercent {
			return "", fmt.Errorf("pids.minFreePIDs %d and pids.minFreePercent %d differ from NodePIDs' minFreePIDs %d and minFreePercent %d in profile %s of %s: set them to the scheduler's",
				*args.PIDs.MinFreePIDs, *args.PIDs.MinFreePercent, sched.MinFreePIDs, sched.MinFreePercent, profile.SchedulerName, path)
		}
		checked++
	}
	if checked == 0 {
		return fmt.Sprintf("%s has no profile of schedulerNames %v that enables NodePIDs: no floor to check", path, args.SchedulerNames), nil
	}
	return fmt.Sprintf("NodePIDs' floor in %s agrees with pids.minFreePIDs %d and pids.minFreePercent %d", path, *args.PIDs.MinFreePIDs, *args.PIDs.MinFreePercent), nil
}

// enables reports whether the profile runs plugin at Filter, directly or
// through multiPoint, and does not disable it there.
func enables(profile schedconfig.KubeSchedulerProfile, plugin string) bool {
	if profile.Plugins == nil {
		return false
	}
	has := func(set schedconfig.PluginSet) bool {
		return slices.ContainsFunc(set.Enabled, func(p schedconfig.Plugin) bool { return p.Name == plugin })
	}
	disabled := func(set schedconfig.PluginSet) bool {
		return slices.ContainsFunc(set.Disabled, func(p schedconfig.Plugin) bool { return p.Name == plugin || p.Name == "*" })
	}
	return (has(profile.Plugins.Filter) || has(profile.Plugins.MultiPoint)) && !disabled(profile.Plugins.Filter)
}
