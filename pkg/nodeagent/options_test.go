package nodeagent

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

func parse(t *testing.T, nodeEnv string, args ...string) (Config, *Options, error) {
	t.Helper()
	o := NewOptions(nodeEnv, "")
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	cfg, err := o.Config(fs)
	return cfg, o, err
}

func TestOptionsDefaults(t *testing.T) {
	cfg, o, err := parse(t, "from-env")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeName != "from-env" || cfg.ProcRoot != "/proc" || cfg.ReservedPIDs != 0 ||
		cfg.Interval != 10*time.Second || cfg.MaxInterval != 5*time.Minute ||
		cfg.Hysteresis.PIDs != 500 || cfg.Hysteresis.Percent != 2 || cfg.MaxIntervalJitter != 0.1 ||
		cfg.RequestTimeout != 10*time.Second || o.Once || o.Kubeconfig != "" ||
		cfg.CgroupRoot != "/sys/fs/cgroup" || o.MetricsAddress != ":8080" ||
		cfg.CNIConfDir != "/etc/cni/net.d" || cfg.IPHysteresisPercent != 5 ||
		cfg.MemoryHysteresis != (MemoryHysteresis{Bytes: 100 << 20, Percent: 2}) {
		t.Errorf("defaults: %+v, once %v", cfg, o.Once)
	}
	if cfg.Backoff != DefaultBackoff() {
		t.Errorf("backoff %+v", cfg.Backoff)
	}
}

func TestOptionsFlags(t *testing.T) {
	cfg, o, err := parse(t, "from-env", "--node-name=n2", "--proc-root=/host/proc", "--reserved-pids=1500",
		"--interval=30s", "--max-interval=10m", "--hysteresis-pids=100", "--hysteresis-percent=0.5",
		"--request-timeout=3s", "--once", "--kubeconfig=/tmp/kc", "--cgroup-root=/host/cgroup", "--metrics-bind-address=127.0.0.1:9000",
		"--cni-conf-dir=/host/etc/cni/net.d", "--ip-hysteresis-percent=10",
		"--memory-hysteresis-bytes=64Mi", "--memory-hysteresis-percent=1.5")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.NodeName != "n2" || cfg.ProcRoot != "/host/proc" || cfg.ReservedPIDs != 1500 ||
		cfg.Interval != 30*time.Second || cfg.MaxInterval != 10*time.Minute ||
		cfg.Hysteresis.PIDs != 100 || cfg.Hysteresis.Percent != 0.5 || cfg.RequestTimeout != 3*time.Second ||
		!o.Once || o.Kubeconfig != "/tmp/kc" || cfg.CgroupRoot != "/host/cgroup" || o.MetricsAddress != "127.0.0.1:9000" ||
		cfg.CNIConfDir != "/host/etc/cni/net.d" || cfg.IPHysteresisPercent != 10 ||
		cfg.MemoryHysteresis != (MemoryHysteresis{Bytes: 64 << 20, Percent: 1.5}) {
		t.Errorf("parsed: %+v %+v", cfg, o)
	}
}

func TestOptionsMemoryHysteresisBytes(t *testing.T) {
	for v, want := range map[string]int64{"0": 0, "1048576": 1 << 20, "100Mi": 100 << 20, "1G": 1e9, "1.5Gi": 3 << 29} {
		cfg, _, err := parse(t, "n", "--memory-hysteresis-bytes="+v)
		if err != nil || cfg.MemoryHysteresis.Bytes != want {
			t.Errorf("%s: %d, %v; want %d", v, cfg.MemoryHysteresis.Bytes, err, want)
		}
	}
	for _, v := range []string{"-1", "1.5", "100m", "lots"} {
		o := NewOptions("n", "")
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.AddFlags(fs)
		if err := fs.Parse([]string{"--memory-hysteresis-bytes=" + v}); err == nil {
			t.Errorf("%s: accepted as %d bytes", v, o.MemoryHysteresisBytes)
		}
	}
	if _, _, err := parse(t, "n", "--memory-hysteresis-percent=101"); err == nil || !strings.Contains(err.Error(), "memory hysteresis percent") {
		t.Errorf("--memory-hysteresis-percent=101: err = %v", err)
	}
	if got := fmt.Sprint(NewOptions("n", "").flag(t, "memory-hysteresis-bytes").DefValue); got != "100Mi" {
		t.Errorf("default shown as %q", got)
	}
}

func (o *Options) flag(t *testing.T, name string) *pflag.Flag {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	f := fs.Lookup(name)
	if f == nil {
		t.Fatalf("no --%s", name)
	}
	return f
}

func TestOptionsReservedSources(t *testing.T) {
	kc := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(kc, []byte(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
systemReserved:
  pid: "1000"
kubeReserved:
  pid: "24"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := parse(t, "n", "--kubelet-config="+kc)
	if err != nil || cfg.ReservedPIDs != 1024 {
		t.Errorf("from kubelet config: %d, %v", cfg.ReservedPIDs, err)
	}
	// Even an explicit 0 conflicts: the user gave two sources.
	for _, flagValue := range []string{"--reserved-pids=0", "--reserved-pids=10"} {
		if _, _, err := parse(t, "n", flagValue, "--kubelet-config="+kc); err == nil || !strings.Contains(err.Error(), "mutually exclusive") {
			t.Errorf("%s with --kubelet-config: err = %v", flagValue, err)
		}
	}
	if _, _, err := parse(t, "n", "--kubelet-config="+kc+".missing"); err == nil || !strings.Contains(err.Error(), ".missing") {
		t.Errorf("missing kubelet config: err = %v", err)
	}
}

func TestOptionsInvalid(t *testing.T) {
	for _, tc := range []struct {
		env       string
		args      []string
		wantErrIn string
	}{
		{"", nil, "NODE_NAME"},
		{"n", []string{"--reserved-pids=-1"}, "negative"},
		{"n", []string{"--interval=0"}, "interval"},
		{"n", []string{"--interval=1m", "--max-interval=30s"}, "max interval"},
		{"n", []string{"--hysteresis-percent=150"}, "percent"},
	} {
		if _, _, err := parse(t, tc.env, tc.args...); err == nil || !strings.Contains(err.Error(), tc.wantErrIn) {
			t.Errorf("%q %v: err = %v, want one containing %q", tc.env, tc.args, err, tc.wantErrIn)
		}
	}
}

func TestOptionsLeakedIPs(t *testing.T) {
	cfg, _, err := parse(t, "n")
	if err != nil {
		t.Fatal(err)
	}
	// No runtime is asked unless one is named: its socket is opt-in.
	if cfg.ContainerRuntimeEndpoint != "" || cfg.IPLeakGrace != 2*time.Minute ||
		cfg.ReclaimLeakedIPs || cfg.ReclaimLeakedIPsAfter != 10*time.Minute {
		t.Errorf("leak defaults: %+v", cfg)
	}
	cfg, _, err = parse(t, "n", "--container-runtime-endpoint=unix:///run/crio/crio.sock", "--ip-leak-grace=3m", "--pod-uid=u",
		"--reclaim-leaked-ips", "--reclaim-leaked-ips-after=1m")
	if err != nil || cfg.ContainerRuntimeEndpoint != "unix:///run/crio/crio.sock" || cfg.IPLeakGrace != 3*time.Minute ||
		!cfg.ReclaimLeakedIPs || cfg.ReclaimLeakedIPsAfter != time.Minute {
		t.Errorf("leak flags: %+v, %v", cfg, err)
	}
	for args, want := range map[string]string{
		"--ip-leak-grace=0":    "--ip-leak-grace 0s is below 1m0s",
		"--ip-leak-grace=1ns":  "--ip-leak-grace 1ns is below 1m0s",
		"--ip-leak-grace=59s":  "--ip-leak-grace 59s is below 1m0s",
		"--reclaim-leaked-ips": "--reclaim-leaked-ips needs --container-runtime-endpoint",
		"--reclaim-leaked-ips --container-runtime-endpoint=unix:///run/containerd/containerd.sock":                                  "--reclaim-leaked-ips needs --pod-uid",
		"--reclaim-leaked-ips --container-runtime-endpoint=unix:///c.sock --pod-uid=u --ip-leak-grace=1m":                           "--ip-leak-grace 1m0s is below 2m0s with --reclaim-leaked-ips",
		"--reclaim-leaked-ips --container-runtime-endpoint=unix:///c.sock --pod-uid=u --reclaim-leaked-ips-after=1ns":               "--reclaim-leaked-ips-after 1ns is below 1m0s",
		"--reclaim-leaked-ips --container-runtime-endpoint=unix:///c.sock --pod-uid=u --reclaim-leaked-ips-after=-1s":               "--reclaim-leaked-ips-after -1s is below 1m0s",
		"--reclaim-leaked-ips --container-runtime-endpoint=unix:///c.sock --pod-uid=u --interval=30s --reclaim-leaked-ips-after=1m": "--reclaim-leaked-ips-after 1m0s is below 1m30s (at least 1m0s and 3 intervals)",
	} {
		if _, _, err := parse(t, "n", strings.Fields(args)...); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
}

// Reclaiming with every floor met is accepted; the agent's own pod comes
// from --pod-uid or POD_UID.
func TestOptionsReclaim(t *testing.T) {
	cfg, _, err := parse(t, "n", "--reclaim-leaked-ips", "--container-runtime-endpoint=unix:///c.sock", "--pod-uid=u",
		"--ip-leak-grace=2m", "--reclaim-leaked-ips-after=1m")
	if err != nil || !cfg.ReclaimLeakedIPs || cfg.PodUID != "u" || cfg.ReclaimLeakedIPsAfter != time.Minute {
		t.Fatalf("%+v, %v", cfg, err)
	}
	o := NewOptions("n", "from-env")
	if cfg, err := o.Config(nil); err != nil || cfg.PodUID != "from-env" || cfg.ContainerRuntimeEndpoint != "" {
		t.Fatalf("POD_UID: %+v, %v; want the pod UID and no runtime endpoint by default", cfg, err)
	}
}

// The klog flags of headroom-pid-reporter still parse, deprecated.
func TestLegacyKlogFlagsParse(t *testing.T) {
	o := NewOptions("", "")
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	o.AddFlags(fs)
	for _, name := range []string{"logtostderr", "alsologtostderr", "log_file", "log_dir", "stderrthreshold", "one_output", "skip_headers"} {
		f := fs.Lookup(name)
		if f == nil || f.Deprecated == "" {
			t.Errorf("--%s: %+v, want a deprecated flag", name, f)
		}
	}
	if err := fs.Parse([]string{"--logtostderr=true", "--v=3", "--vmodule=agent=4"}); err != nil {
		t.Fatal(err)
	}
}

func TestOptionsPressureFlags(t *testing.T) {
	cfg, _, err := parse(t, "n")
	if err != nil || cfg.PIDThresholdPercent != 0 || cfg.PressureSamples != DefaultPressureSamples {
		t.Fatalf("defaults: threshold %d, samples %d, %v; want none and %d", cfg.PIDThresholdPercent, cfg.PressureSamples, err, DefaultPressureSamples)
	}
	cfg, _, err = parse(t, "n", "--pids-threshold-percent=95", "--pressure-samples=3")
	if err != nil || cfg.PIDThresholdPercent != 95 || cfg.PressureSamples != 3 {
		t.Fatalf("threshold %d, samples %d, %v; want 95 and 3", cfg.PIDThresholdPercent, cfg.PressureSamples, err)
	}
	for _, bad := range [][]string{{"--pids-threshold-percent=101"}, {"--pressure-samples=0"}} {
		if _, _, err := parse(t, "n", bad...); err == nil || !strings.Contains(err.Error(), strings.SplitN(bad[0], "=", 2)[0]) {
			t.Errorf("%s: %v, want an error naming the flag", bad[0], err)
		}
	}
}
