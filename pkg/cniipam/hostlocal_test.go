package cniipam

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestRealHostLocalOwnersAndRelease reads whom the real host-local
// allocated each address to, counts a predicate's leaks in the figures, and
// releases one container's addresses with host-local's own DEL code: the
// state files are gone, the addresses are handed out again, a later real
// DEL of the same container is a no-op and other containers keep theirs.
func TestRealHostLocalOwnersAndRelease(t *testing.T) {
	confDir, stateDir, rt := hostLocalNetwork(t, `[[{"subnet": "10.88.0.0/28"}], [{"subnet": "fd00:88::/124"}]]`)
	ctx := context.Background()
	before := time.Now().Add(-time.Second)
	owners := map[string]string{}
	for _, id := range []string{"keep-1", "leak-2", "keep-3"} {
		res, err := rt.Add(ctx, id)
		if err != nil {
			t.Fatalf("ADD %s: %v", id, err)
		}
		r, _ := types100.NewResultFromResult(res)
		for _, ip := range r.IPs {
			owners[ip.Address.IP.String()] = id
		}
	}
	n, err := Load(confDir)
	if err != nil {
		t.Fatal(err)
	}
	allocs, err := n.Allocations()
	if err != nil || len(allocs) != 6 {
		t.Fatalf("Allocations: %v, %v; want 6 (3 containers, 2 families)", allocs, err)
	}
	for _, a := range allocs {
		if a.ModTime.Before(before) || a.ModTime.After(time.Now()) {
			t.Errorf("%s: modification time %s is not the time of the ADD", a.IP, a.ModTime)
		}
		id, ifName, err := n.Owner(a.IP)
		if err != nil || id != owners[a.IP.String()] || ifName != "eth0" {
			t.Errorf("Owner(%s) = %q, %q, %v; want %q, eth0", a.IP, id, ifName, err, owners[a.IP.String()])
		}
	}
	leaked := func(a Allocation) bool { id, _, _ := n.Owner(a.IP); return id == "leak-2" }
	if u := n.Count(allocs, leaked); u.Capacity != 13 || u.Used != 3 || u.Leaked != 1 || u.RangeSets[1].Leaked != 1 {
		t.Fatalf("Count with one leaked container: %+v", u)
	}

	var leak2 Allocation
	for _, a := range allocs {
		if a.IP.To4() != nil && owners[a.IP.String()] == "leak-2" {
			leak2 = a
		}
	}
	// Seen as another allocation (another file, or another container's):
	// nothing is released.
	if _, err := n.ReleaseIfUnchanged(Allocation{IP: leak2.IP, ModTime: leak2.ModTime, Inode: leak2.Inode + 1}, "leak-2", "eth0"); !errors.Is(err, ErrChanged) {
		t.Fatalf("ReleaseIfUnchanged of another file: %v, want ErrChanged", err)
	}
	if _, err := n.ReleaseIfUnchanged(leak2, "c1", "eth0"); !errors.Is(err, ErrChanged) {
		t.Fatalf("ReleaseIfUnchanged naming another container: %v, want ErrChanged", err)
	}
	if u := readUsage(t, confDir); u.Used != 3 {
		t.Fatalf("after refused releases: %+v, want 3 used", u)
	}
	released, err := n.ReleaseIfUnchanged(leak2, "leak-2", "eth0")
	if err != nil || len(released) != 2 {
		t.Fatalf("ReleaseIfUnchanged: %v, %v; want both families' addresses", released, err)
	}
	for ip, id := range owners {
		_, err := os.Stat(filepath.Join(stateDir, ip))
		if gone := os.IsNotExist(err); gone != (id == "leak-2") {
			t.Errorf("after ReleaseIfUnchanged: %s of %s gone=%v (%v)", ip, id, gone, err)
		}
		if id == "leak-2" {
			if _, _, err := n.Owner(net.ParseIP(ip)); !errors.Is(err, ErrReleased) {
				t.Errorf("Owner of released %s: %v, want ErrReleased", ip, err)
			}
		}
	}
	if u := readUsage(t, confDir); u.Used != 2 {
		t.Fatalf("after ReleaseIfUnchanged: %+v, want 2 used", u)
	}
	if _, err := n.ReleaseIfUnchanged(leak2, "leak-2", "eth0"); !errors.Is(err, ErrReleased) {
		t.Fatalf("ReleaseIfUnchanged of a released allocation: %v, want ErrReleased", err)
	}
	if err := rt.Del(ctx, "leak-2"); err != nil {
		t.Fatalf("real DEL after ReleaseIfUnchanged: %v", err)
	}
	if u := readUsage(t, confDir); u.Used != 2 {
		t.Fatalf("after a second DEL: %+v, want 2 used", u)
	}
	// The released addresses are handed out again.
	for i := 4; i <= 14; i++ {
		if _, err := rt.Add(ctx, fmt.Sprintf("c%d", i)); err != nil {
			t.Fatalf("ADD %d after ReleaseIfUnchangedIfUnchanged: %v", i, err)
		}
	}
	if u := readUsage(t, confDir); u.Used != 13 || u.Capacity != 13 {
		t.Fatalf("full: %+v", u)
	}
}

// TestOwnerBadFiles: a state file that is not host-local's is an error
// naming it, never a guess.
func TestOwnerBadFiles(t *testing.T) {
	dir := t.TempDir()
	n := &Network{Name: "n", StateDir: filepath.Join(dir, "n"), DataDir: dir}
	writeFile(t, n.StateDir, "10.0.0.2", "  \r\neth0")
	writeFile(t, n.StateDir, "10.0.0.3", strings.Repeat("a", 2000))
	writeFile(t, n.StateDir, "10.0.0.4", "old-format-id\n")
	for ip, want := range map[string]string{"10.0.0.2": "names no container", "10.0.0.3": "larger than 1024 bytes", "10.0.0.5": "allocation released"} {
		if _, _, err := n.Owner(net.ParseIP(ip)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Owner(%s): %v, want %q", ip, err, want)
		}
	}
	if id, ifName, err := n.Owner(net.ParseIP("10.0.0.4")); id != "old-format-id" || ifName != "" || err != nil {
		t.Errorf("Owner of an old-format file: %q, %q, %v", id, ifName, err)
	}
}
