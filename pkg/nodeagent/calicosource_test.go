package nodeagent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/headroom-k8s/headroom/pkg/calicoipam"
)

// fakeCalico is a CalicoSource that returns u, err, and records the
// families asked for and Stop calls while its watch would run.
type fakeCalico struct {
	u       calicoipam.Usage
	err     error
	fams    calicoipam.Families
	running bool
	stops   int
}

func (f *fakeCalico) Usage(_ context.Context, fams calicoipam.Families) (calicoipam.Usage, error) {
	f.running, f.fams = true, fams
	return f.u, f.err
}

func (f *fakeCalico) Stop() {
	if f.running {
		f.stops++
	}
	f.running = false
}

// On a calico-ipam network the figures come from the Calico source, with
// the families of the conflist's ipam section; refused reads and figures
// that cannot be told publish nothing (logged once per reason), a watch not
// synced yet publishes nothing silently, another failure is the probe's
// error; another network stops the watch.
func TestIPProbeCalico(t *testing.T) {
	confDir := t.TempDir()
	conf := filepath.Join(confDir, "10-calico.conflist")
	if err := os.WriteFile(conf, []byte(`{"cniVersion": "0.3.1", "name": "k8s-pod-network", "plugins": [
		{"type": "calico", "ipam": {"type": "calico-ipam", "assign_ipv4": "true", "assign_ipv6": "true"}}, {"type": "portmap"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	src := &fakeCalico{u: calicoipam.Usage{Capacity: 80, Used: 17, Pods: 16}}
	p := &IPProbe{ConfDir: confDir, Calico: src}
	s, err := p.Sample(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.(ipSample).stats; st.Capacity != 80 || st.Used != 17 || st.LeakedKnown {
		t.Fatalf("sample %+v, want 17 of 80 and no leak count", st)
	}
	if src.fams != (calicoipam.Families{IPv4: true, IPv6: true}) {
		t.Fatalf("families %+v, want both", src.fams)
	}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Group: "crd.projectcalico.org", Resource: "ipamblocks"}, "", errors.New("no rights"))
	for _, e := range []error{calicoipam.ErrNotSynced, forbidden, forbidden, &calicoipam.UnsupportedError{Reason: "selector"}} {
		src.err = e
		if s, err := p.Sample(ctx, t0); s != nil || err != nil {
			t.Fatalf("Sample with %v = %v, %v; want nothing and no error", e, s, err)
		}
	}
	buf := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if n := strings.Count(buf, "Pod-IP headroom is unknown"); n != 2 || !strings.Contains(buf, "manifests/node-agent/calico-ipam") {
		t.Fatalf("logged %d times, want once per reason:\n%s", n, buf)
	}
	src.err = errors.New("IPAMBlock x: spec.cidr: bad")
	if _, err := p.Sample(ctx, t0); err == nil || !strings.Contains(err.Error(), "spec.cidr") {
		t.Fatalf("Sample with a malformed block: %v", err)
	}
	// An invalid assign_ipv6 names the file and the field.
	if err := os.WriteFile(conf, []byte(`{"cniVersion": "0.3.1", "name": "k8s-pod-network", "plugins": [
		{"type": "calico", "ipam": {"type": "calico-ipam", "assign_ipv6": "yes"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Sample(ctx, t0); err == nil || !strings.Contains(err.Error(), "assign_ipv6") || !strings.Contains(err.Error(), conf) {
		t.Fatalf("Sample with a bad assign_ipv6: %v", err)
	}
	if src.stops != 0 {
		t.Fatalf("the watch stopped %d times on a Calico network", src.stops)
	}
	if err := os.WriteFile(conf, []byte(`{"cniVersion": "0.3.1", "name": "flannel", "plugins": [{"type": "flannel"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if s, err := p.Sample(ctx, t0); s != nil || err != nil || src.stops != 1 {
		t.Fatalf("Sample of another network = %v, %v; watch stopped %d times", s, err, src.stops)
	}
}

// The Calico source's pods (its tunnel address left out) go through the
// cross-check: a block that says 2 pods while the node runs 8 is reported
// with the source "calico", and the published use raised by the 6.
func TestIPProbeCalicoCrossChecked(t *testing.T) {
	confDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "10-calico.conflist"), []byte(`{"cniVersion": "0.3.1", "name": "k8s-pod-network",
		"plugins": [{"type": "calico", "ipam": {"type": "calico-ipam"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var events []recordedEvent
	p := &IPProbe{ConfDir: confDir, Calico: &fakeCalico{u: calicoipam.Usage{Capacity: 64, Used: 3, Pods: 2}},
		CrossCheck: &PodIPCrossCheck{Pods: &staticPods{pods: podsWithIPs(8)}, Tolerance: DefaultIPCrossCheckTolerance, Samples: 1,
			Event: func(_ context.Context, eventType, reason, message string) {
				events = append(events, recordedEvent{eventType, reason, message})
			}}}
	s, err := p.Sample(context.Background(), t0)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.(ipSample).stats; st.Capacity != 64 || st.Used != 3+6 {
		t.Fatalf("sample %+v, want 9 of 64 used", st)
	}
	if len(events) != 1 || events[0].reason != "PodIPFiguresDisagree" || !strings.Contains(events[0].message, "source calico counts 2") {
		t.Fatalf("events %+v", events)
	}
}
