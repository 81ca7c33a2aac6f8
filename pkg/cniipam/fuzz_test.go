package cniipam

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzRead feeds arbitrary network configurations and state file names to
// Read: it must return an error or figures with 0 ≤ used ≤ capacity, never
// panic.
func FuzzRead(f *testing.F) {
	f.Add(".conflist", conflist("n", "DATADIR", `[[{"subnet": "10.88.0.0/28"}]]`), "10.88.0.2")
	f.Add(".conflist", conflist("n", "DATADIR", `[[{"subnet": "10.88.0.0/28", "rangeStart": "10.88.0.9", "rangeEnd": "10.88.0.3"}]]`), "10.88.0.4")
	f.Add(".conflist", conflist("n", "DATADIR", `[[{"subnet": "10.88.0.0/24", "gateway": "10.88.0.7", "rangeEnd": "10.88.0.8"}], [{"subnet": "fd00::/120"}]]`), "fd00::7")
	f.Add(".conf", `{"cniVersion": "0.3.1", "name": "n", "type": "ptp", "ipam": {"type": "host-local", "dataDir": "DATADIR", "subnet": "::ffff:10.0.0.0/120"}}`, "10.0.0.5")
	f.Add(".json", `{"name": "n", "type": "x", "ipam": {"type": "calico-ipam"}}`, "lock")
	f.Add(".conflist", `{"name": "n", "plugins": [{"type": "x", "ipam": {"type": "host-local", "ranges": [[{"subnet": "1.2.3.4/0"}]]}}]}`, "last_reserved_ip.0")
	f.Fuzz(func(t *testing.T, ext, conf, stateFile string) {
		if ext != ".conflist" && ext != ".conf" && ext != ".json" {
			ext = ".conflist"
		}
		confDir, dataDir := t.TempDir(), t.TempDir()
		// Keep the data directory inside the test's temporary directory.
		conf = strings.ReplaceAll(conf, "DATADIR", dataDir)
		if err := os.WriteFile(filepath.Join(confDir, "10-net"+ext), []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		n, err := Load(confDir)
		if err != nil {
			return
		}
		if filepath.Dir(n.StateDir) != dataDir {
			return // the configuration names another data directory: do not touch it
		}
		if filepath.Base(stateFile) == stateFile && stateFile != "" && stateFile != "." && stateFile != ".." {
			if err := os.MkdirAll(n.StateDir, 0o755); err == nil {
				_ = os.WriteFile(filepath.Join(n.StateDir, stateFile), []byte("c\r\neth0"), 0o644)
			}
		}
		if ip := net.ParseIP(stateFile); ip != nil {
			if id, _, err := n.Owner(ip); err == nil && id != "c" {
				t.Fatalf("Owner(%s) = %q, want c", ip, id)
			}
		}
		u, err := n.Usage()
		if err != nil {
			return
		}
		if len(u.RangeSets) == 0 || u.Capacity < 0 || u.Used < 0 || u.Used > u.Capacity || u.Used > 1 {
			t.Fatalf("usage %+v for %s", u, conf)
		}
		for _, r := range u.RangeSets {
			if r.Used < 0 || r.Used > r.Capacity || r.Free() < u.Capacity-u.Used {
				t.Fatalf("range set %+v inconsistent with %+v", r, u)
			}
		}
	})
}
