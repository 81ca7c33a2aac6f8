package cniipam

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFile writes content to dir/name, making dir.
func writeFile(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// conflist is a network configuration whose only plugin uses host-local
// with the given ranges JSON and data directory.
func conflist(name, dataDir, ranges string) string {
	return `{"cniVersion": "1.0.0", "name": "` + name + `", "plugins": [
	  {"type": "bridge", "bridge": "cni0", "isGateway": true,
	   "ipam": {"type": "host-local", "dataDir": "` + dataDir + `", "ranges": ` + ranges + `}},
	  {"type": "portmap", "capabilities": {"portMappings": true}}]}`
}

func TestRead(t *testing.T) {
	type want struct {
		capacity, used int64
		sets           []RangeSetUsage
	}
	tests := []struct {
		name   string
		ranges string
		state  map[string]string // file name → content in <dataDir>/<network>
		want   want
	}{
		{
			name:   "a /28: 16 less network, broadcast and gateway",
			ranges: `[[{"subnet": "10.88.0.0/28"}]]`,
			want:   want{13, 0, []RangeSetUsage{{RangeSet: "10.88.0.1-10.88.0.14", Capacity: 13}}},
		},
		{
			name:   "rangeStart and rangeEnd, gateway outside them",
			ranges: `[[{"subnet": "10.88.0.0/24", "rangeStart": "10.88.0.10", "rangeEnd": "10.88.0.20"}]]`,
			state:  map[string]string{"10.88.0.10": "c1\neth0", "10.88.0.20": "c2\neth0", "10.88.0.21": "old\neth0", "10.88.0.9": "old\neth0"},
			want:   want{11, 2, []RangeSetUsage{{RangeSet: "10.88.0.10-10.88.0.20", Capacity: 11, Used: 2}}},
		},
		{
			name:   "gateway inside the range is not handed out",
			ranges: `[[{"subnet": "10.88.0.0/24", "rangeStart": "10.88.0.1", "rangeEnd": "10.88.0.10", "gateway": "10.88.0.5"}]]`,
			// A file for the gateway cannot come from host-local: not counted.
			state: map[string]string{"10.88.0.5": "x\neth0", "10.88.0.1": "c\neth0"},
			want:  want{9, 1, []RangeSetUsage{{RangeSet: "10.88.0.1-10.88.0.10", Capacity: 9, Used: 1}}},
		},
		{
			name:   "several ranges in one set",
			ranges: `[[{"subnet": "10.88.0.0/28"}, {"subnet": "10.88.1.0/29"}]]`,
			state:  map[string]string{"10.88.0.2": "a\neth0", "10.88.1.6": "b\neth0", "10.88.1.7": "broadcast\neth0"},
			want:   want{13 + 5, 2, []RangeSetUsage{{RangeSet: "10.88.0.1-10.88.0.14,10.88.1.1-10.88.1.6", Capacity: 18, Used: 2}}},
		},
		{
			name:   "dual stack: the IPv4 family has the fewest free",
			ranges: `[[{"subnet": "10.88.0.0/28"}], [{"subnet": "fd00:88::/120"}]]`,
			state: map[string]string{
				"10.88.0.2": "a\neth0", "10.88.0.3": "b\neth0", "fd00:88::2": "a\neth0", "fd00:88::3": "b\neth0",
			},
			want: want{13, 2, []RangeSetUsage{
				{RangeSet: "10.88.0.1-10.88.0.14", Capacity: 13, Used: 2},
				// IPv6 has no broadcast address: ::1 is the gateway, ::ff is handed out.
				{RangeSet: "fd00:88::1-fd00:88::ff", IPv6: true, Capacity: 254, Used: 2},
			}},
		},
		{
			name:   "dual stack: the IPv6 family has the fewest free",
			ranges: `[[{"subnet": "10.88.0.0/28"}], [{"subnet": "fd00:88::/125"}]]`,
			state:  map[string]string{"fd00:88::7": "leaked\neth0"},
			want: want{6, 1, []RangeSetUsage{
				{RangeSet: "10.88.0.1-10.88.0.14", Capacity: 13},
				{RangeSet: "fd00:88::1-fd00:88::7", IPv6: true, Capacity: 6, Used: 1},
			}},
		},
		{
			name:   "an IPv6 /64 saturates",
			ranges: `[[{"subnet": "fd00:88::/64"}]]`,
			want:   want{math.MaxInt64, 0, []RangeSetUsage{{RangeSet: "fd00:88::1-fd00:88::ffff:ffff:ffff:ffff", IPv6: true, Capacity: math.MaxInt64}}},
		},
		{
			name:   "host-local's own files and directories are not allocations",
			ranges: `[[{"subnet": "10.88.0.0/28"}]]`,
			state: map[string]string{
				"lock": "", "last_reserved_ip.0": "10.88.0.4", "10.88.0.4": "c\neth0", "not-an-ip": "",
				"10.88.0.5": "leaked-container\neth0",
			},
			want: want{13, 2, []RangeSetUsage{{RangeSet: "10.88.0.1-10.88.0.14", Capacity: 13, Used: 2}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			confDir, dataDir := t.TempDir(), t.TempDir()
			writeFile(t, confDir, "10-test.conflist", conflist("testnet", dataDir, tc.ranges))
			for name, content := range tc.state {
				writeFile(t, filepath.Join(dataDir, "testnet"), name, content)
			}
			if err := os.Mkdir(filepath.Join(dataDir, "testnet", "10.88.0.6"), 0o755); err != nil && !errors.Is(err, fs.ErrNotExist) {
				t.Fatal(err) // a directory named like an address is not an allocation
			}
			n, u, err := Read(confDir)
			if err != nil {
				t.Fatalf("Read: %v", err)
			}
			if n.Name != "testnet" || n.Plugin != "bridge" || n.StateDir != filepath.Join(dataDir, "testnet") ||
				n.File != filepath.Join(confDir, "10-test.conflist") {
				t.Errorf("network = %+v", n)
			}
			if u.Capacity != tc.want.capacity || u.Used != tc.want.used {
				t.Errorf("capacity %d, used %d; want %d, %d", u.Capacity, u.Used, tc.want.capacity, tc.want.used)
			}
			if len(u.RangeSets) != len(tc.want.sets) {
				t.Fatalf("range sets %+v, want %+v", u.RangeSets, tc.want.sets)
			}
			for i := range u.RangeSets {
				if u.RangeSets[i] != tc.want.sets[i] {
					t.Errorf("range set %d = %+v, want %+v", i, u.RangeSets[i], tc.want.sets[i])
				}
			}
		})
	}
}

func TestLoadChoosesTheRuntimesNetwork(t *testing.T) {
	confDir, dataDir := t.TempDir(), t.TempDir()
	// Lexical order: the .conf file comes first; .txt and directories are not networks.
	writeFile(t, confDir, "10-first.conf", `{"cniVersion": "0.4.0", "name": "first", "type": "ptp",
		"ipam": {"type": "host-local", "dataDir": "`+dataDir+`", "subnet": "10.1.0.0/29"}}`)
	writeFile(t, confDir, "20-second.conflist", `{"cniVersion": "1.0.0", "name": "second",
		"plugins": [{"type": "calico", "ipam": {"type": "calico-ipam"}}]}`)
	writeFile(t, confDir, "00-notes.txt", "not a network")
	if err := os.Mkdir(filepath.Join(confDir, "05-dir.conflist"), 0o755); err != nil {
		t.Fatal(err)
	}
	n, u, err := Read(confDir)
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	// A .conf file with the old single-range form: a /29 is 8 − network − broadcast − gateway.
	if n.Name != "first" || n.Plugin != "ptp" || u.Capacity != 5 || u.Used != 0 {
		t.Fatalf("network %+v usage %+v", n, u)
	}

	// Without the first file, the calico network is the runtime's: unsupported.
	if err := os.Remove(filepath.Join(confDir, "10-first.conf")); err != nil {
		t.Fatal(err)
	}
	_, _, err = Read(confDir)
	var ue *UnsupportedError
	if !errors.As(err, &ue) || !IsUnsupported(err) || !errors.Is(err, ErrUnsupported) || ue.IPAMType != "calico-ipam" ||
		ue.Network != "second" || !strings.Contains(err.Error(), "20-second.conflist") {
		t.Fatalf("calico-ipam: %v", err)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name        string
		files       map[string]string // nil: the directory does not exist
		unsupported string            // IPAM type of an expected UnsupportedError ("-" for none expected)
		contains    []string
	}{
		{name: "missing directory", contains: []string{"reading CNI configuration directory", "no such file or directory"}, unsupported: "-"},
		{name: "no configuration", files: map[string]string{"README": "x", "99-old.conf.bak": "{}"}, contains: []string{"no CNI network configuration"}, unsupported: "-"},
		{name: "no IPAM section (flannel delegates at run time)", unsupported: "",
			files:    map[string]string{"10-flannel.conflist": `{"name": "cbr0", "cniVersion": "0.3.1", "plugins": [{"type": "flannel", "delegate": {"isDefaultGateway": true}}, {"type": "portmap"}]}`},
			contains: []string{`network "cbr0" has no IPAM section`}},
		{name: "cloud IPAM in a chained plugin", unsupported: "aws-ipam",
			files:    map[string]string{"10-aws.conflist": `{"name": "aws", "cniVersion": "1.0.0", "plugins": [{"type": "egress"}, {"type": "vpc", "ipam": {"type": "aws-ipam"}}]}`},
			contains: []string{`uses IPAM type "aws-ipam"`}},
		{name: "host-local of a chained plugin (aws-cni's egress-cni)", unsupported: "",
			files: map[string]string{"10-aws.conflist": `{"name": "aws-cni", "cniVersion": "0.4.0", "plugins": [{"name": "aws-cni", "type": "aws-cni"},
				{"name": "egress-cni", "type": "egress-cni", "ipam": {"type": "host-local", "ranges": [[{"subnet": "169.254.172.0/22"}]], "dataDir": "/run/cni/v4pd/egress-v4-ipam"}}, {"type": "portmap"}]}`},
			contains: []string{`first plugin "aws-cni" has no IPAM section`, `chained plugin "egress-cni"`}},
		{name: "malformed JSON", unsupported: "-",
			files:    map[string]string{"10-bad.conflist": `{"name": "bad", "plugins": [`},
			contains: []string{"10-bad.conflist", "error parsing configuration list"}},
		{name: "host bits set", unsupported: "-",
			files:    map[string]string{"10-net.conflist": conflist("net", "/tmp/x", `[[{"subnet": "10.88.0.1/28"}]]`)},
			contains: []string{"10-net.conflist", "plugin bridge", "host-local IPAM", "host bits set"}},
		{name: "range too small", unsupported: "-",
			files:    map[string]string{"10-net.conflist": conflist("net", "/tmp/x", `[[{"subnet": "10.88.0.0/31"}]]`)},
			contains: []string{"too small to allocate from"}},
		{name: "overlapping range sets", unsupported: "-",
			files:    map[string]string{"10-net.conflist": conflist("net", "/tmp/x", `[[{"subnet": "10.88.0.0/24"}], [{"subnet": "10.88.0.0/28"}]]`)},
			contains: []string{"overlaps"}},
		{name: "no ranges", unsupported: "-",
			files:    map[string]string{"10-net.conflist": conflist("net", "/tmp/x", `[]`)},
			contains: []string{"no IP ranges specified"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "net.d")
			for name, content := range tc.files {
				writeFile(t, dir, name, content)
			}
			if tc.files != nil {
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			n, err := Load(dir)
			if err == nil {
				t.Fatalf("Load = %+v, want an error", n)
			}
			var ue *UnsupportedError
			if isU := errors.As(err, &ue); isU != (tc.unsupported != "-") || (isU && ue.IPAMType != tc.unsupported) {
				t.Fatalf("error %v: unsupported = %v, want IPAM type %q", err, isU, tc.unsupported)
			}
			if none := tc.files == nil || tc.name == "no configuration"; IsNoNetwork(err) != none {
				t.Errorf("error %v: IsNoNetwork = %v, want %v", err, IsNoNetwork(err), none)
			}
			for _, s := range tc.contains {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
		})
	}
}

func TestDefaultDataDirAndMissingState(t *testing.T) {
	confDir := t.TempDir()
	writeFile(t, confDir, "10.conflist", `{"cniVersion": "1.0.0", "name": "k8s-pod-network", "plugins": [
		{"type": "bridge", "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.3.0/24"}]]}}]}`)
	n, err := Load(confDir)
	if err != nil {
		t.Fatal(err)
	}
	if n.StateDir != filepath.Join(DefaultDataDir, "k8s-pod-network") {
		t.Fatalf("state dir %s", n.StateDir)
	}
	// No add has happened yet: host-local has not made its directory.
	n.StateDir = filepath.Join(t.TempDir(), "absent")
	u, err := n.Usage()
	if err != nil || u.Capacity != 253 || u.Used != 0 {
		t.Fatalf("usage %+v, %v", u, err)
	}
	// A state directory that cannot be read is an error, not zero use.
	n.StateDir = filepath.Join(confDir, "10.conflist")
	if _, err := n.Usage(); err == nil || !strings.Contains(err.Error(), "reading host-local state") {
		t.Fatalf("unreadable state: %v", err)
	}
}
