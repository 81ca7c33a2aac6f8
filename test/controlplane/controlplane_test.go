package controlplane

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func requireBinaries(t *testing.T) {
	t.Helper()
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(DefaultBinDir() + "/" + name); err != nil {
			t.Fatalf("%s not built: run make test (or hack/build-tools.sh) first", name)
		}
	}
}

func TestStartServesAndStopLeavesNothing(t *testing.T) {
	requireBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cp, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := cp.Dir
	var pids []int
	for _, p := range cp.Processes() {
		pids = append(pids, p.cmd.Process.Pid)
	}
	if _, err := cp.Client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{}); err != nil {
		t.Errorf("API server does not serve: %v", err)
	}
	cp.Stop()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d still runs after Stop", pid)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temporary dir %s not removed: %v", dir, err)
	}
}

// The helper below runs in a child test process, prints the pids of its
// control plane and then dies the way a test binary can: panic or SIGKILL.
func TestHelperProcessDies(t *testing.T) {
	mode := os.Getenv("HEADROOM_HELPER_DIE")
	if mode == "" {
		t.Skip("helper process for TestNoProcessLeftBehind")
	}
	cp := StartForTest(t, Options{})
	for _, p := range cp.Processes() {
		os.Stdout.WriteString("PID " + strconv.Itoa(p.cmd.Process.Pid) + "\n")
	}
	os.Stdout.WriteString("READY\n")
	if mode == "panic" {
		panic("test panics with a control plane running")
	}
	time.Sleep(time.Minute) // killed by the parent
}

func TestNoProcessLeftBehind(t *testing.T) {
	requireBinaries(t)
	for _, mode := range []string{"panic", "sigkill"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcessDies$", "-test.v")
			// The child's own t.TempDir survives its SIGKILL: give it a TMPDIR
			// inside this test's, which this test removes.
			cmd.Env = append(os.Environ(), "HEADROOM_HELPER_DIE="+mode, "TMPDIR="+t.TempDir())
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var pids []int
			scanner := bufio.NewScanner(out)
			for scanner.Scan() {
				line := scanner.Text()
				if pid, ok := strings.CutPrefix(line, "PID "); ok {
					n, _ := strconv.Atoi(pid)
					pids = append(pids, n)
				}
				if line == "READY" {
					break
				}
			}
			if len(pids) < 2 {
				t.Fatalf("helper reported pids %v, want etcd and kube-apiserver", pids)
			}
			if mode == "sigkill" {
				_ = cmd.Process.Signal(syscall.SIGKILL)
			}
			go func() { _, _ = bufioDrain(scanner) }()
			_ = cmd.Wait()
			deadline := time.Now().Add(30 * time.Second)
			for _, pid := range pids {
				for alive(pid) && time.Now().Before(deadline) {
					time.Sleep(100 * time.Millisecond)
				}
				if alive(pid) {
					syscall.Kill(pid, syscall.SIGKILL)
					t.Errorf("%s: control-plane pid %d outlived the test process", mode, pid)
				}
			}
		})
	}
}

func bufioDrain(s *bufio.Scanner) (int, error) {
	n := 0
	for s.Scan() {
		n++
	}
	return n, s.Err()
}
