package relievenodepressure

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/ptr"
)

// The room check's floor and NodePIDs' must agree: the plugin refuses to
// start otherwise, naming both; the shipped scheduler configuration and
// policy agree.
func TestFloorMustAgreeWithTheScheduler(t *testing.T) {
	shipped, err := os.ReadFile(filepath.Join("..", "..", "manifests", "scheduler", "scheduler-config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	other := write("other.yaml", `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: headroom-scheduler
  plugins:
    multiPoint:
      enabled: [{name: NodePIDs}]
  pluginConfig:
  - name: NodePIDs
    args: {minFreePIDs: 1024}
`)
	for _, tc := range []struct {
		name    string
		file    string
		args    RelieveNodePressureArgs
		wantErr string
	}{
		{name: "the shipped configuration and defaults agree", file: write("shipped.yaml", string(shipped))},
		{name: "no file: nothing to check", file: filepath.Join(dir, "missing.yaml")},
		{name: "a different floor is refused, naming both", file: other,
			wantErr: "pids.minFreePIDs 512 and pids.minFreePercent 5 differ from NodePIDs' minFreePIDs 1024 and minFreePercent 5 in profile headroom-scheduler"},
		{name: "set to the scheduler's", file: other, args: RelieveNodePressureArgs{PIDs: &PIDsTrigger{MinFreePIDs: ptr.To[int64](1024)}}},
		{name: "another scheduler's profile is not compared", file: other, args: RelieveNodePressureArgs{SchedulerNames: []string{"mine"}}},
		{name: "not a scheduler configuration", file: write("bad.yaml", "kind: Pod\napiVersion: v1\n"), wantErr: "schedulerConfigFile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			args.SchedulerConfigFile = tc.file
			args.PressureSamples = ptr.To[int32](1)
			_, err := newPlugin(t.Context(), &args, newEnv(t, setup{}).plugin.handle, nil)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("New: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("New: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
