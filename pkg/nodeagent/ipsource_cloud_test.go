package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/pkg/awsipam"
	"github.com/headroom-k8s/headroom/pkg/azureipam"
)

func writeConf(t *testing.T, name, conf string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const awsConf = `{"cniVersion": "0.4.0", "name": "aws-cni", "plugins": [{"name": "aws-cni", "type": "aws-cni"},
	{"name": "egress-cni", "type": "egress-cni", "ipam": {"type": "host-local", "ranges": [[{"subnet": "169.254.172.0/22"}]]}}]}`

// The IPProbe on an aws-cni network asks ipamd (answers made by ipamd's
// own datastore, pkg/awsipam/testdata), never the egress host-local range;
// without ipamd's limits the figures are unknown; ipamd down is an error.
func TestIPProbeAWS(t *testing.T) {
	testdata := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "awsipam", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	enis, metrics := testdata("enis-full.json"), testdata("ipamd-metrics.txt")
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/enis", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(enis) })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(metrics) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	cfg := AWSIPAMDConfig{IntrospectionAddress: addr, MetricsAddress: addr, Cooldown: awsipam.DefaultCooldown}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx := klog.NewContext(context.Background(), logger)
	p := &IPProbe{ConfDir: writeConf(t, "10-aws.conflist", awsConf), AWS: newAWSReader(cfg, time.Second)}
	s, err := p.Sample(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.(ipSample).stats; st.Capacity != 27 || st.Used != 27 || st.LeakedKnown {
		t.Fatalf("sample %+v, want 27 of 27 and no leak count", st)
	}
	metrics = []byte("# ipamd with DISABLE_METRICS\n")
	if s, err := p.Sample(ctx, t0); s != nil || err != nil {
		t.Fatalf("without ipamd's limits: %v, %v; want nothing and no error", s, err)
	}
	if buf := logger.GetSink().(ktesting.Underlier).GetBuffer().String(); !strings.Contains(buf, "awscni_eni_max") {
		t.Fatalf("the unknown figures' reason is not logged:\n%s", buf)
	}
	srv.Close()
	if _, err := p.Sample(ctx, t0); err == nil || !strings.Contains(err.Error(), "reading the AWS VPC CNI's ipamd") {
		t.Fatalf("ipamd down: %v", err)
	}
	// Without the source the network is one more unknown IPAM.
	p.AWS = nil
	if s, err := p.Sample(ctx, t0); s != nil || err != nil {
		t.Fatalf("Sample = %v, %v", s, err)
	}
}

// The IPProbe on an azure-vnet network with azure-cns IPAM reads the
// NodeNetworkConfig for capacity and counts the pods whose address lies in
// its allocation; another network stops the watch.
func TestIPProbeAzure(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "azureipam", "testdata", "nodenetworkconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var obj map[string]any
	if err := yaml.Unmarshal(b, &obj); err != nil {
		t.Fatal(err)
	}
	nnc := &fakeCiliumNode{obj: obj}
	pod := func(name, ip string, hostNetwork bool) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{HostNetwork: hostNetwork},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}}}}
	}
	pods := &staticPods{pods: []*corev1.Pod{pod("a", "10.241.0.5", false), pod("b", "10.241.0.6", false),
		pod("host", "10.240.0.4", true), pod("elsewhere", "10.9.0.1", false)}}
	conf := writeConf(t, "10-azure.conflist", `{"cniVersion": "0.3.0", "name": "azure", "plugins": [
		{"type": "azure-vnet", "mode": "transparent", "ipam": {"type": "`+azureipam.CNSIPAMType+`"}}]}`)
	p := &IPProbe{ConfDir: conf, AzureNNC: nnc, NodePods: pods}
	ctx := context.Background()
	s, err := p.Sample(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if st := s.(ipSample).stats; st.Capacity != 250 || st.Used != 2 {
		t.Fatalf("sample %+v, want 2 of 250", st)
	}
	pods.err = ErrPodsNotSynced
	if s, err := p.Sample(ctx, t0); s != nil || err != nil {
		t.Fatalf("pods not known: %v, %v", s, err)
	}
	// Without the azure-cni component's Role: unknown, not the probe's
	// failure.
	nnc.err = fmt.Errorf("watching the nodenetworkconfigs n: %w", apierrors.NewForbidden(azureipam.NodeNetworkConfigs.GroupResource(), "n", errors.New("no Role")))
	if s, err := p.Sample(ctx, t0); s != nil || err != nil {
		t.Fatalf("forbidden: %v, %v; want nothing and no error", s, err)
	}
	nnc.err = nil
	if err := os.WriteFile(filepath.Join(conf, "10-azure.conflist"), []byte(awsConf), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _ = p.Sample(ctx, t0) // no ipamd to ask: only the watch matters
	if nnc.stops == 0 {
		t.Fatal("the NodeNetworkConfig's watch runs on a network that is not Azure's")
	}
}
