package config

import (
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/manifests"
)

// TestSchedulerNameIsTheShippedProfile fails when the shipped
// KubeSchedulerConfiguration names its profile otherwise.
func TestSchedulerNameIsTheShippedProfile(t *testing.T) {
	var cfg struct {
		Profiles []struct {
			SchedulerName string `json:"schedulerName"`
		} `json:"profiles"`
	}
	if err := yaml.Unmarshal(manifests.SchedulerConfig, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != SchedulerName {
		t.Errorf("shipped profiles %+v, want one named %q", cfg.Profiles, SchedulerName)
	}
}
