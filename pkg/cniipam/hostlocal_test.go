package cniipam

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/headroom-k8s/headroom/test/cniruntime"
)

// hostLocalNetwork is a network of the real host-local with the given
// ranges: its configuration directory, state directory and runtime.
func hostLocalNetwork(t *testing.T, ranges string) (string, string, *cniruntime.Runtime) {
	t.Helper()
	n := cniruntime.HostLocalNetwork(t, "headroom-test", ranges)
	return n.ConfDir, n.StateDir, n.Runtime
}

func readUsage(t *testing.T, confDir string) Usage {
	t.Helper()
	_, u, err := Read(confDir)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return u
}

// TestRealHostLocal drives the real host-local plugin through libcni on a
// /28 (13 addresses) until it runs out, and checks the figures after every
// ADD and DEL, and with a leaked allocation.
func TestRealHostLocal(t *testing.T) {
	confDir, stateDir, rt := hostLocalNetwork(t, `[[{"subnet": "10.88.0.0/28"}]]`)
	ctx := context.Background()

	if u := readUsage(t, confDir); u.Capacity != 13 || u.Used != 0 {
		t.Fatalf("before any ADD: %+v", u)
	}
	for i := 1; i <= 13; i++ {
		res, err := rt.Add(ctx, fmt.Sprintf("container-%d", i))
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		r, err := types100.NewResultFromResult(res)
		if err != nil || len(r.IPs) != 1 {
			t.Fatalf("ADD %d result %v: %v", i, res, err)
		}
		if u := readUsage(t, confDir); u.Capacity != 13 || u.Used != int64(i) {
			t.Fatalf("after ADD %d (%s): capacity %d, used %d", i, r.IPs[0].Address.String(), u.Capacity, u.Used)
		}
	}
	_, err := rt.Add(ctx, "container-14")
	if err == nil || !strings.Contains(err.Error(), "no IP addresses available in range set") {
		t.Fatalf("ADD 14 on a full /28: %v, want host-local's exhaustion error", err)
	}
	if u := readUsage(t, confDir); u.Used != 13 {
		t.Fatalf("a failed ADD changed the figure: %+v", u)
	}

	for i, id := range []string{"container-3", "container-7"} {
		if err := rt.Del(ctx, id); err != nil {
			t.Fatalf("DEL %s: %v", id, err)
		}
		if u := readUsage(t, confDir); u.Used != int64(12-i) {
			t.Fatalf("after DEL %s: used %d, want %d", id, u.Used, 12-i)
		}
	}

	// A leaked allocation: a state file whose container is gone (a crash
	// between ADD and DEL). host-local keeps the address; so do the figures.
	free := freeAddresses(t, stateDir, "10.88.0.2", "10.88.0.14")
	if len(free) != 2 {
		t.Fatalf("free addresses after two DELs: %v", free)
	}
	writeFile(t, stateDir, free[0], "crashed-container\r\neth0")
	if u := readUsage(t, confDir); u.Used != 12 {
		t.Fatalf("with a leaked allocation: used %d, want 12", u.Used)
	}
	if _, err := rt.Add(ctx, "container-15"); err != nil {
		t.Fatalf("ADD into the last free address: %v", err)
	}
	if u := readUsage(t, confDir); u.Used != 13 || u.Capacity != 13 {
		t.Fatalf("full again: %+v", u)
	}
	// The leak blocks a new container exactly as the figure says.
	if _, err := rt.Add(ctx, "container-16"); err == nil || !strings.Contains(err.Error(), "no IP addresses available") {
		t.Fatalf("ADD with only a leaked address left: %v", err)
	}
}

// TestRealHostLocalDualStack: every ADD takes one address of each family;
// the figures are the IPv4 /28's, which has fewer free than the IPv6 /124.
func TestRealHostLocalDualStack(t *testing.T) {
	confDir, _, rt := hostLocalNetwork(t, `[[{"subnet": "10.88.0.0/28"}], [{"subnet": "fd00:88::/124"}]]`)
	ctx := context.Background()
	for i := 1; i <= 13; i++ {
		res, err := rt.Add(ctx, fmt.Sprintf("c%d", i))
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		if r, err := types100.NewResultFromResult(res); err != nil || len(r.IPs) != 2 {
			t.Fatalf("ADD %d: %v, %v; want an address of each family", i, res, err)
		}
		u := readUsage(t, confDir)
		if u.Capacity != 13 || u.Used != int64(i) || len(u.RangeSets) != 2 ||
			u.RangeSets[1].Capacity != 14 || u.RangeSets[1].Used != int64(i) {
			t.Fatalf("after ADD %d: %+v", i, u)
		}
	}
	if _, err := rt.Add(ctx, "c14"); err == nil || !strings.Contains(err.Error(), "no IP addresses available in range set") {
		t.Fatalf("ADD 14: %v, want exhaustion of the IPv4 range set", err)
	}
}

// freeAddresses lists the IPv4 addresses from first to last that have no
// state file.
func freeAddresses(t *testing.T, stateDir, first, last string) []string {
	t.Helper()
	var free []string
	for a := net.ParseIP(first).To4(); ; a[3]++ {
		if _, err := os.Stat(filepath.Join(stateDir, a.String())); os.IsNotExist(err) {
			free = append(free, a.String())
		}
		if a.String() == last {
			return free
		}
	}
}
