package ciliumipam

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"testing"
	"time"
)

// agentStatus is the ipam section as Cilium's agent writes it (its
// status collector's dumpIPAM): every address in ipv4/ipv6, owners in
// allocations.
const agentStatus = `{"cilium": {"state": "Ok"}, "ipam": {
  "allocations": {"10.0.1.1": "router", "10.0.1.17": "health", "10.0.1.30": "default/web-0", "10.0.1.31": "kube-system/coredns-1 [0123abcd]"},
  "ipv4": ["10.0.1.1", "10.0.1.17", "10.0.1.30", "10.0.1.31"],
  "status": "IPv4: 4/256 allocated from 10.0.1.0/24, "}}`

func TestParseAgentStatus(t *testing.T) {
	a, err := ParseAgentStatus([]byte(agentStatus))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Addrs) != 4 || a.Owners[netip.MustParseAddr("10.0.1.30")] != "default/web-0" {
		t.Fatalf("%+v", a)
	}
	for _, bad := range []string{`{"ipam": {"ipv4": ["10.0.1.x"]}}`, `{"ipam": {"allocations": {"x": "router"}}}`, `{"ipam": []}`} {
		if _, err := ParseAgentStatus([]byte(bad)); err == nil || errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: %v, want an error", bad, err)
		}
	}
	if _, err := ParseAgentStatus([]byte(`{"cilium": {"state": "Ok"}}`)); !errors.Is(err, ErrUnsupported) {
		t.Errorf("no ipam section: %v", err)
	}
	// A non-default pool's addresses are listed as <pool>/<address>.
	if a, err := ParseAgentStatus([]byte(`{"ipam": {"ipv6": ["blue/fd00::5"]}}`)); err != nil || a.Addrs[0] != netip.MustParseAddr("fd00::5") {
		t.Errorf("%+v %v", a, err)
	}
}

// TestFromObjectWithAgent: cluster-pool's CiliumNode lists no addresses in
// use; the agent's list counts, the router's and health's addresses as in
// use, only its pods' as pods.
func TestFromObjectWithAgent(t *testing.T) {
	cn := map[string]any{"spec": map[string]any{"ipam": map[string]any{"podCIDRs": []any{"10.0.1.0/24"}}}}
	if _, err := FromObject(cn); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("without the agent: %v", err)
	}
	a, err := ParseAgentStatus([]byte(agentStatus))
	if err != nil {
		t.Fatal(err)
	}
	u, err := FromObjectWithAgent(cn, &a)
	if err != nil || u.Capacity != 254 || u.Used != 4 || u.Pods != 2 || !u.FromAgent {
		t.Fatalf("%+v %v", u, err)
	}
	if _, err := FromObjectWithAgent(cn, &AgentIPAM{}); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("an agent that lists nothing: %v", err)
	}
}

// TestAgentClient: the request the agent's API takes (GET /v1/healthz,
// brief false) over a unix socket.
func TestAgentClient(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "cilium.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/healthz" || r.Header.Get("brief") != "false" {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte(agentStatus))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	a, err := NewAgentClient(sock, 5*time.Second).IPAM(context.Background())
	if err != nil || len(a.Addrs) != 4 {
		t.Fatalf("%+v %v", a, err)
	}
	if _, err := NewAgentClient(filepath.Join(t.TempDir(), "none.sock"), time.Second).IPAM(context.Background()); err == nil {
		t.Fatal("no socket: no error")
	}
}

// FuzzParseAgentStatus: an error or addresses, never a panic; with a pod
// CIDR, 0 ≤ pods ≤ used ≤ capacity.
func FuzzParseAgentStatus(f *testing.F) {
	f.Add([]byte(agentStatus), "10.0.1.0/24")
	f.Add([]byte(`{"ipam": {"ipv6": ["p/fd00::1", "fd00::1"], "allocations": {"fd00::1": "a/b"}}}`), "fd00::/120")
	f.Fuzz(func(t *testing.T, status []byte, cidr string) {
		a, err := ParseAgentStatus(status)
		if err != nil {
			return
		}
		cn := map[string]any{"spec": map[string]any{"ipam": map[string]any{"podCIDRs": []any{cidr}}}}
		u, err := FromObjectWithAgent(cn, &a)
		if err != nil {
			return
		}
		if u.Pods < 0 || u.Pods > u.Used || u.Used > u.Capacity {
			t.Fatalf("%+v", u)
		}
	})
}
