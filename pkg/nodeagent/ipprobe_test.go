package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/headroom-k8s/headroom/pkg/ciliumipam"
	"github.com/headroom-k8s/headroom/pkg/cniipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/test/cniruntime"
)

func TestIPThreshold(t *testing.T) {
	tests := []struct {
		capacity int64
		percent  float64
		want     int64
	}{
		{253, 5, 13}, // a /24: 12.65, rounded up
		{13, 5, 1},   // a /28: 0.65, rounded up
		{0, 5, 1},
		{253, 0, 1}, // every change counts
		{ipstats.MaxCount, 5, 838861},
		{-1, 5, 1},
	}
	for _, tc := range tests {
		if got := ipThreshold(tc.capacity, tc.percent); got != tc.want {
			t.Errorf("ipThreshold(%d, %v) = %d, want %d", tc.capacity, tc.percent, got, tc.want)
		}
	}
}

func TestIPSampleChanged(t *testing.T) {
	mk := func(capacity, used int64) ipSample {
		return ipSample{stats: ipstats.NewNodeStats(capacity, used, t0), hysteresisPercent: 5}
	}
	tests := []struct {
		name       string
		last, cur  ipSample
		want       bool
		wantReason string
	}{
		{"no change", mk(253, 100), mk(253, 100), false, ""},
		{"far from exhaustion, within the threshold", mk(253, 100), mk(253, 112), false, ""},
		{"far from exhaustion, the threshold reached", mk(253, 100), mk(253, 113), true, "moved by 13"},
		{"far from exhaustion, down by the threshold", mk(253, 100), mk(253, 87), true, "moved by 13"},
		{"into the last 13 free", mk(253, 239), mk(253, 240), true, "near exhaustion (13 free"},
		{"just outside the last 13", mk(253, 238), mk(253, 239), false, ""},
		{"out of the last 13", mk(253, 240), mk(253, 239), true, "near exhaustion"},
		{"exhausted", mk(253, 252), mk(253, 253), true, "near exhaustion (0 free"},
		{"a /28: every change", mk(13, 3), mk(13, 4), true, "at least the hysteresis of 1"},
		{"capacity changed", mk(253, 100), mk(509, 100), true, "capacity changed from 253 to 509"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := tc.cur.Changed(tc.last)
			if got != tc.want || !strings.Contains(reason, tc.wantReason) {
				t.Errorf("Changed = %v (%q), want %v (%q)", got, reason, tc.want, tc.wantReason)
			}
		})
	}
	if got, _ := mk(13, 0).Changed(pidSample{}); !got {
		t.Error("a sample of another probe counts as no pod-IP sample written")
	}
}

// TestIPProbeRealHostLocal fills a /28 with the real host-local plugin and
// checks the probe's figures after every ADD and DEL, and with a leaked
// allocation.
func TestIPProbeRealHostLocal(t *testing.T) {
	n := cniruntime.HostLocalNetwork(t, "headroom-pods", `[[{"subnet": "10.88.0.0/28"}]]`)
	p := &IPProbe{ConfDir: n.ConfDir, HysteresisPercent: DefaultIPHysteresisPercent}
	_, ctx := ktesting.NewTestContext(t)
	want := func(used int64) {
		t.Helper()
		s, err := p.Sample(ctx, t0)
		if err != nil {
			t.Fatalf("Sample: %v", err)
		}
		got := s.(ipSample).stats
		if got.Capacity != 13 || got.Used != used || !got.SampledAt.Equal(t0) {
			t.Fatalf("sample %+v, want capacity 13, used %d", got, used)
		}
		if a := s.Annotations(); a[ipstats.AnnotationCapacity] != "13" || a[ipstats.AnnotationUsed] != fmt.Sprint(used) {
			t.Fatalf("annotations %v", a)
		}
	}
	want(0)
	for i := 1; i <= 13; i++ {
		if _, err := n.Add(ctx, fmt.Sprintf("c%d", i)); err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
		want(int64(i))
	}
	if err := n.Del(ctx, "c5"); err != nil {
		t.Fatal(err)
	}
	want(12)
	// A leaked allocation: a state file without a container still blocks
	// the address, and counts.
	entries, err := os.ReadDir(n.StateDir)
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for _, e := range entries {
		held = append(held, e.Name())
	}
	leak := "10.88.0.6" // c5's, the first address after c1..c4 (host-local starts at .2)
	if _, err := os.Stat(filepath.Join(n.StateDir, leak)); err == nil {
		t.Fatalf("%s still allocated after DEL c5 (state: %v)", leak, held)
	}
	if err := os.WriteFile(filepath.Join(n.StateDir, leak), []byte("gone\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	want(13)
}

// An IPAM the probe cannot read, or no network at all, publishes nothing,
// is no error, and is logged once, not on every tick.
func TestIPProbeUnknownLogsOnce(t *testing.T) {
	confDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "10-calico.conflist"), []byte(`{"name": "k8s-pod-network", "cniVersion": "1.0.0",
		"plugins": [{"type": "calico", "ipam": {"type": "calico-ipam"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	logged := func() int {
		return strings.Count(logger.GetSink().(ktesting.Underlier).GetBuffer().String(), "Pod-IP headroom is unknown")
	}
	for _, dir := range []string{confDir, filepath.Join(confDir, "missing")} {
		p := &IPProbe{ConfDir: dir}
		before := logged()
		for range 3 {
			s, err := p.Sample(ctx, t0)
			if s != nil || err != nil {
				t.Fatalf("%s: Sample = %v, %v; want nothing and no error", dir, s, err)
			}
		}
		if got := logged() - before; got != 1 {
			t.Errorf("%s: logged %d times in 3 samples, want once", dir, got)
		}
	}
	if buf := logger.GetSink().(ktesting.Underlier).GetBuffer().String(); !strings.Contains(buf, `calico-ipam`) {
		t.Errorf("the log does not name the IPAM type:\n%s", buf)
	}
}

// The agent writes the pod-IP figures with the PID figures, every change
// near exhaustion, and leaves them alone when the probe fails.
func TestTickWritesPodIPs(t *testing.T) {
	n := cniruntime.HostLocalNetwork(t, "headroom-pods", `[[{"subnet": "10.88.0.0/28"}]]`)
	cfg := testConfig()
	cfg.CNIConfDir = n.ConfDir
	h := newHarness(t, cfg, nil)
	wantIPs := func(used string) {
		t.Helper()
		a := h.node().Annotations
		if a[ipstats.AnnotationCapacity] != "13" || a[ipstats.AnnotationUsed] != used {
			t.Fatalf("node's pod-IP annotations %v, want capacity 13, used %s", a, used)
		}
	}
	if err := h.r.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(1)
	wantIPs("0")
	if p := h.patched(0); p[ipstats.AnnotationUsed] != "0" || p["headroom.dev/pid-used"] != "5000" {
		t.Fatalf("first patch %v should carry the pod-IP and PID figures together", p)
	}
	// A /28's hysteresis is one address: every ADD is written.
	for i := 1; i <= 3; i++ {
		if _, err := n.Add(h.ctx, fmt.Sprintf("c%d", i)); err != nil {
			t.Fatal(err)
		}
		if err := h.tick(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		h.wantPatches(1 + i)
		wantIPs(fmt.Sprint(i))
	}
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(4) // nothing changed

	// The state becomes unreadable: the probe fails, its figures stay as
	// written while the PID figures move on.
	if err := os.WriteFile(filepath.Join(n.ConfDir, "10-headroom-pods.conflist"), []byte(`{"name": "headroom-pods", "plugins": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	h.proc.sample.Used = 9000
	err := h.tick(10 * time.Second)
	if err == nil || !strings.Contains(err.Error(), "probe ips") {
		t.Fatalf("Tick = %v, want the pod-IP probe's error", err)
	}
	h.wantPatches(5)
	if p := h.patched(4); p[ipstats.AnnotationUsed] != "" || p["headroom.dev/pid-used"] != "9000" {
		t.Fatalf("patch with a failed pod-IP probe: %v", p)
	}
	wantIPs("3")
	if cniipam.IsUnsupported(err) || cniipam.IsNoNetwork(err) {
		t.Fatalf("an invalid configuration is a failure, not an unsupported IPAM: %v", err)
	}
}

// On start the agent takes a fresh, valid pod-IP sample on the node as its
// last write; a stale, invalid or missing one is written anew.
func TestIPProbeAdopt(t *testing.T) {
	p := &IPProbe{MaxAge: DefaultMaxInterval, HysteresisPercent: 5}
	fresh := ipstats.NewNodeStats(253, 40, t0.Add(-time.Minute))
	s, err := p.Adopt(fresh.Annotations(), t0)
	if err != nil || s.(ipSample).stats != fresh {
		t.Fatalf("Adopt(fresh) = %v, %v", s, err)
	}
	next := ipSample{stats: ipstats.NewNodeStats(253, 41, t0), hysteresisPercent: 5}
	if changed, _ := next.Changed(s); changed {
		t.Error("one more address in use, far from exhaustion, should not be written after adopting")
	}
	stale := ipstats.NewNodeStats(253, 40, t0.Add(-time.Hour))
	invalid := fresh.Annotations()
	invalid[ipstats.AnnotationUsed] = "300"
	for name, a := range map[string]map[string]string{"stale": stale.Annotations(), "invalid": invalid, "missing": nil} {
		if s, err := p.Adopt(a, t0); err == nil {
			t.Errorf("%s: adopted %v", name, s)
		}
	}
}

// fakeCiliumNode is a CiliumNodeSource that returns obj, err, and counts
// Stop calls while its watch would run.
type fakeCiliumNode struct {
	obj     map[string]any
	err     error
	running bool
	stops   int
}

func (f *fakeCiliumNode) Get(context.Context) (map[string]any, error) {
	f.running = true
	return f.obj, f.err
}

func (f *fakeCiliumNode) Stop() {
	if f.running {
		f.stops++
	}
	f.running = false
}

// On a Cilium network (the first configuration's plugin is cilium-cni),
// the figures come from the node's CiliumNode; a node without one, or a
// mode that does not list its addresses in use, publishes nothing (logged
// once), as does a watch that has not listed it yet (not logged); a failed
// read is the probe's error. Once the network is another, the watch stops.
func TestIPProbeCilium(t *testing.T) {
	confDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "05-cilium.conflist"), []byte(`{"cniVersion": "0.3.1", "name": "cilium",
		"plugins": [{"type": "cilium-cni", "enable-debug": false}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	cn := &fakeCiliumNode{}
	p := &IPProbe{ConfDir: confDir, CiliumNode: cn}
	cn.obj = map[string]any{
		"spec":   map[string]any{"ipam": map[string]any{"podCIDRs": []any{"10.0.1.0/28"}}},
		"status": map[string]any{"ipam": map[string]any{"used": map[string]any{"10.0.1.1": map[string]any{"owner": "router"}, "10.0.1.2": map[string]any{}}}},
	}
	s, err := p.Sample(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.(ipSample).stats; st.Capacity != 14 || st.Used != 2 || st.LeakedKnown {
		t.Fatalf("sample %+v, want 2 of 14 used and no leak count", st)
	}
	cn.obj = map[string]any{"spec": map[string]any{"ipam": map[string]any{"podCIDRs": []any{"10.0.1.0/28"}}}}
	readErrs := []error{nil, nil, ciliumipam.ErrNotSynced, apierrors.NewNotFound(schema.GroupResource{Group: "cilium.io", Resource: "ciliumnodes"}, "n")}
	for _, e := range readErrs {
		cn.err = e
		if s, err := p.Sample(ctx, t0); s != nil || err != nil {
			t.Fatalf("Sample = %v, %v; want nothing and no error", s, err)
		}
	}
	buf := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if n := strings.Count(buf, "Pod-IP headroom is unknown"); n != 2 || !strings.Contains(buf, "status.ipam.used lists none") ||
		!strings.Contains(buf, "no CiliumNode") {
		t.Fatalf("logged %d times, want once per reason:\n%s", n, buf)
	}
	cn.err = errors.New("connection refused")
	if _, err := p.Sample(ctx, t0); err == nil || !strings.Contains(err.Error(), "reading the node's CiliumNode: connection refused") {
		t.Fatalf("Sample with a failing read: %v", err)
	}
	if cn.stops != 0 {
		t.Fatalf("the watch stopped %d times on a Cilium network", cn.stops)
	}
	// Another network stops the watch; an unreadable configuration does not.
	if err := os.WriteFile(filepath.Join(confDir, "05-cilium.conflist"), []byte(`{"cniVersion": "0.3.1", "name": "cilium", "plugins": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sample(ctx, t0); err == nil || cn.stops != 0 {
		t.Fatalf("Sample of an unreadable configuration: %v; watch stopped %d times", err, cn.stops)
	}
	if err := os.WriteFile(filepath.Join(confDir, "05-cilium.conflist"), []byte(`{"cniVersion": "0.3.1", "name": "flannel",
		"plugins": [{"type": "flannel"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := p.Sample(ctx, t0); s != nil || err != nil || cn.stops != 1 || cn.running {
		t.Fatalf("Sample of another network = %v, %v; watch stopped %d times, running %v", s, err, cn.stops, cn.running)
	}
	// Without a way to read CiliumNodes, the network is one more unknown IPAM.
	p.CiliumNode = nil
	if s, err := p.Sample(ctx, t0); s != nil || err != nil {
		t.Fatalf("Sample = %v, %v", s, err)
	}
}
