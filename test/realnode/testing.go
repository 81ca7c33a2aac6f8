package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/headroom-k8s/headroom/test/controlplane"
)

// lockFile serialises real nodes on a machine: test packages run in
// parallel, and a real node's host paths, ServiceIP:443 and bridge are one
// per machine.
const lockFile = "/run/headroom-real-node.lock"

// lock takes the machine's real-node lock, waiting for another holder
// until ctx ends. The lock goes with the process, so a test binary that
// dies frees it.
func lock(ctx context.Context) (unlock func(), err error) {
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("waiting for another real node of this machine to stop (%s): %w", lockFile, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// StartForTest starts a control plane ready for a real node (cpOpts with
// RealNode and ControllerManager set), the default scheduler
// (StartDefaultScheduler) and a real node in it, all stopped
// when t ends. On a machine that cannot run a real node the test is
// skipped with the reason, except under CI=true, where that fails it.
func StartForTest(t testing.TB, cpOpts controlplane.Options, opts Options) (*controlplane.ControlPlane, *Node) {
	t.Helper()
	cp, nodes := StartNodesForTest(t, cpOpts, opts)
	return cp, nodes[0]
}

// StartNodesForTest is StartForTest with a real node for each of opts
// (names of their own), started at once: each has its own containerd,
// kubelet, cgroup, bridge and pod range, and they share the machine's
// kernel, memory and host paths (docs/real-node.md).
func StartNodesForTest(t testing.TB, cpOpts controlplane.Options, opts ...Options) (*controlplane.ControlPlane, []*Node) {
	t.Helper()
	if cpOpts.BinDir == "" {
		cpOpts.BinDir = controlplane.DefaultBinDir()
	}
	if err := Supported(cpOpts.BinDir); err != nil {
		if errors.Is(err, ErrUnsupported) && os.Getenv("CI") != "true" {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	unlock, err := lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
	cpOpts.RealNode, cpOpts.ControllerManager = true, true
	cp := controlplane.StartForTest(t, cpOpts)
	// DaemonSet pods, the node agent's among them, are placed by the
	// cluster's default scheduler.
	if _, err := cp.StartDefaultScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	nodes, err := StartNodes(ctx, cp, opts...)
	if err != nil {
		t.Fatalf("starting the real nodes: %v", err)
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			if t.Failed() {
				t.Log(n.logTails())
			}
		}
		StopNodes(nodes)
	})
	return cp, nodes
}
