package nodeagent

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"k8s.io/kubernetes/pkg/kubelet/stats/pidlimit"
)

// absent leaves a fixture file out.
const absent = "\x00absent"

func procTree(t *testing.T, pidMax, threadsMax, loadavg string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "sys", "kernel"), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, content := range map[string]string{
		filepath.Join(root, "sys", "kernel", "pid_max"):     pidMax,
		filepath.Join(root, "sys", "kernel", "threads-max"): threadsMax,
		filepath.Join(root, "loadavg"):                      loadavg,
	} {
		if content == absent {
			continue
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestReadProc(t *testing.T) {
	const goodLoad = "0.52 0.58 0.59 3/1186 2046851\n"
	tests := []struct {
		name                string
		pidMax, threadsMax  string
		loadavg             string
		want                ProcSample
		wantErrIn, wantFile string
	}{
		{name: "threads-max smaller", pidMax: "4194304\n", threadsMax: "514542\n", loadavg: goodLoad,
			want: ProcSample{PIDMax: 4194304, ThreadsMax: 514542, Capacity: 514542, Used: 1186}},
		{name: "pid_max smaller", pidMax: "32768\n", threadsMax: "192729\n", loadavg: goodLoad,
			want: ProcSample{PIDMax: 32768, ThreadsMax: 192729, Capacity: 32768, Used: 1186}},
		{name: "equal", pidMax: "65536\n", threadsMax: "65536\n", loadavg: "1.00 2.00 3.00 10/65000 99\n",
			want: ProcSample{PIDMax: 65536, ThreadsMax: 65536, Capacity: 65536, Used: 65000}},
		{name: "no trailing newline", pidMax: "32768", threadsMax: "40000", loadavg: "0 0 0 1/5 7",
			want: ProcSample{PIDMax: 32768, ThreadsMax: 40000, Capacity: 32768, Used: 5}},
		{name: "extra loadavg fields are ignored", pidMax: "100\n", threadsMax: "200\n", loadavg: "0 0 0 1/50 7 extra\n",
			want: ProcSample{PIDMax: 100, ThreadsMax: 200, Capacity: 100, Used: 50}},

		{name: "pid_max missing", pidMax: absent, threadsMax: "1\n", loadavg: goodLoad, wantFile: "pid_max", wantErrIn: "no such file"},
		{name: "threads-max missing", pidMax: "1\n", threadsMax: absent, loadavg: goodLoad, wantFile: "threads-max", wantErrIn: "no such file"},
		{name: "loadavg missing", pidMax: "1\n", threadsMax: "1\n", loadavg: absent, wantFile: "loadavg", wantErrIn: "no such file"},
		{name: "pid_max empty", pidMax: "", threadsMax: "1\n", loadavg: goodLoad, wantFile: "pid_max", wantErrIn: "not a non-negative integer"},
		{name: "pid_max garbage", pidMax: "lots\n", threadsMax: "1\n", loadavg: goodLoad, wantFile: "pid_max", wantErrIn: `"lots"`},
		{name: "threads-max negative", pidMax: "1\n", threadsMax: "-1\n", loadavg: goodLoad, wantFile: "threads-max", wantErrIn: "not a non-negative integer"},
		{name: "threads-max two lines", pidMax: "1\n", threadsMax: "1\n2\n", loadavg: goodLoad, wantFile: "threads-max", wantErrIn: "not a non-negative integer"},
		{name: "loadavg empty", pidMax: "1\n", threadsMax: "1\n", loadavg: "", wantFile: "loadavg", wantErrIn: "0 fields"},
		{name: "loadavg too few fields", pidMax: "1\n", threadsMax: "1\n", loadavg: "0.52 0.58 0.59 3/1186\n", wantFile: "loadavg", wantErrIn: "4 fields"},
		{name: "loadavg no slash", pidMax: "1\n", threadsMax: "1\n", loadavg: "0.52 0.58 0.59 1186 2046851\n", wantFile: "loadavg", wantErrIn: "not running/total"},
		{name: "loadavg two slashes", pidMax: "1\n", threadsMax: "1\n", loadavg: "0.52 0.58 0.59 3/11/86 2046851\n", wantFile: "loadavg", wantErrIn: "not running/total"},
		{name: "loadavg total not a number", pidMax: "1\n", threadsMax: "1\n", loadavg: "0.52 0.58 0.59 3/x 2046851\n", wantFile: "loadavg", wantErrIn: `"x"`},
		{name: "loadavg total negative", pidMax: "1\n", threadsMax: "1\n", loadavg: "0.52 0.58 0.59 3/-4 2046851\n", wantFile: "loadavg", wantErrIn: `"-4"`},
		{name: "loadavg total empty", pidMax: "1\n", threadsMax: "1\n", loadavg: "0.52 0.58 0.59 3/ 2046851\n", wantFile: "loadavg", wantErrIn: `""`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := procTree(t, tc.pidMax, tc.threadsMax, tc.loadavg)
			got, err := ReadProc(root)
			if tc.wantErrIn == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.want {
					t.Errorf("ReadProc = %+v, want %+v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("want error, got %+v", got)
			}
			if !strings.Contains(err.Error(), tc.wantErrIn) || !strings.Contains(err.Error(), tc.wantFile) {
				t.Errorf("error %q should name %s and contain %q", err, tc.wantFile, tc.wantErrIn)
			}
			if got != (ProcSample{}) {
				t.Errorf("failed read returned %+v", got)
			}
		})
	}
}

// On the real /proc, ReadProc must agree with the kubelet's own reader.
func TestReadProcMatchesKubeletPidlimit(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("pidlimit reads /proc only on Linux")
	}
	before, err := ReadProc("/proc")
	if err != nil {
		t.Fatal(err)
	}
	kubelet, err := pidlimit.Stats()
	if err != nil {
		t.Fatal(err)
	}
	after, err := ReadProc("/proc")
	if err != nil {
		t.Fatal(err)
	}
	if kubelet.MaxPID == nil || kubelet.NumOfRunningProcesses == nil {
		t.Fatalf("pidlimit.Stats() returned %+v", kubelet)
	}
	if before.Capacity != *kubelet.MaxPID || after.Capacity != *kubelet.MaxPID {
		t.Errorf("capacity %d/%d, kubelet MaxPID %d", before.Capacity, after.Capacity, *kubelet.MaxPID)
	}
	// Tasks come and go between the reads (the test runner's own threads
	// among them), so the kubelet's count must lie near the two samples.
	const slack = 64
	lo, hi := min(before.Used, after.Used)-slack, max(before.Used, after.Used)+slack
	if n := *kubelet.NumOfRunningProcesses; n < lo || n > hi {
		t.Errorf("kubelet counts %d tasks, ReadProc %d and %d", n, before.Used, after.Used)
	}
	if before.Used <= 0 {
		t.Errorf("used = %d on a running system", before.Used)
	}
}
