package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
)

// On a calico-ipam network the agent reads nothing of Calico's and
// publishes no pod-IP figures, saying why once: headroom-scheduler counts
// them from one watch for the cluster.
func TestIPProbeCalicoPublishesNothing(t *testing.T) {
	confDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(confDir, "10-calico.conflist"), []byte(`{"cniVersion": "0.3.1", "name": "k8s-pod-network", "plugins": [
		{"type": "calico", "ipam": {"type": "calico-ipam"}}, {"type": "portmap"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	p := &IPProbe{ConfDir: confDir}
	for range 3 {
		if s, err := p.Sample(ctx, t0); s != nil || err != nil {
			t.Fatalf("Sample = %v, %v; want nothing and no error", s, err)
		}
	}
	buf := logger.GetSink().(ktesting.Underlier).GetBuffer().String()
	if n := strings.Count(buf, "Pod-IP headroom is unknown"); n != 1 || !strings.Contains(buf, "ipSource: CalicoIPAM") {
		t.Fatalf("logged %d times, want once, naming NodeIPs' ipSource:\n%s", n, buf)
	}
}
