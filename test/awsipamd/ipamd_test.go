// Package awsipamd tests pkg/awsipam against ipamd's own datastore
// (github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore) and metrics
// (utils/prometheusmetrics): the datastore is filled, assigned and
// released as ipamd does for pods, /v1/enis is its GetENIInfos encoded as
// ipamd's introspection handler encodes it (one ENIInfos per network
// card), and /metrics is ipamd's registry served by its own metrics
// server's handler.
//
// HEADROOM_UPDATE_TESTDATA=1 rewrites pkg/awsipam/testdata from them, the
// answers the main module's tests serve.
package awsipamd

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/amazon-vpc-cni-k8s/pkg/ipamd/datastore"
	"github.com/aws/amazon-vpc-cni-k8s/pkg/utils/logger"
	"github.com/aws/amazon-vpc-cni-k8s/utils/prometheusmetrics"

	"github.com/headroom-k8s/headroom/pkg/awsipam"
)

var registerOnce sync.Once

var log = logger.New(&logger.Configuration{LogLevel: "error", LogLocation: "stdout"})

func cidr(t *testing.T, s string) net.IPNet {
	t.Helper()
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		t.Fatal(err)
	}
	return *n
}

// node is ipamd's state of one node, served as ipamd serves it.
type node struct {
	ds  *datastore.DataStore
	srv *httptest.Server
}

func serve(t *testing.T, ds *datastore.DataStore) *node {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/enis", func(w http.ResponseWriter, _ *http.Request) {
		b, err := json.Marshal(map[int]*datastore.ENIInfos{ds.GetNetworkCard(): ds.GetENIInfos()})
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_, _ = w.Write(b)
	})
	mux.Handle("/metrics", prometheusmetrics.SetupMetricsServer(0).Handler)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &node{ds: ds, srv: srv}
}

func (n *node) reader() *awsipam.Reader {
	addr := strings.TrimPrefix(n.srv.URL, "http://")
	return &awsipam.Reader{IntrospectionAddress: addr, MetricsAddress: addr, Cooldown: awsipam.DefaultCooldown, SubnetFullFor: awsipam.DefaultSubnetFullFor}
}

func (n *node) get(t *testing.T, path string) []byte {
	t.Helper()
	resp, err := http.Get(n.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func pod(i int) (datastore.IPAMKey, datastore.IPAMMetadata) {
	return datastore.IPAMKey{NetworkName: "aws-cni", ContainerID: "sandbox-" + string(rune('a'+i)), IfName: "eth0"},
		datastore.IPAMMetadata{K8SPodNamespace: "default", K8SPodName: "pod-" + string(rune('a'+i))}
}

// Limits of an m5.large as ipamd sets its gauges (updateIPStats): 3 ENIs
// of 10 addresses, less each ENI's primary: 9 pod addresses per ENI.
// Each test is a new ipamd: no API errors yet.
func setLimits(maxENI, ipsPerENI int) {
	registerOnce.Do(prometheusmetrics.PrometheusRegister)
	prometheusmetrics.AwsAPIErr.Reset()
	prometheusmetrics.EnisMax.Set(float64(maxENI))
	prometheusmetrics.IpMax.Set(float64(ipsPerENI * maxENI))
}

// TestSecondaryIPs: an m5.large in secondary-IP mode with its primary ENI
// of 9 addresses and a second ENI of 3 attached; 4 pods started, one of
// them stopped (cooling). The pool can reach 3 × 9 = 27; used is the 3
// assigned and the cooling one, as ipamd's own GetIPStats counts them.
// Once ipamd meets InsufficientFreeAddressesInSubnet, the pool is what is
// attached.
func TestSecondaryIPs(t *testing.T) {
	setLimits(3, 9)
	ds := datastore.NewDataStore(log, datastore.NewTestCheckpoint(datastore.CheckpointData{Version: datastore.CheckpointFormatVersion}), false, 0)
	if err := ds.AddENI("eni-primary", 0, true, false, false, 0, "subnet-a"); err != nil {
		t.Fatal(err)
	}
	if err := ds.AddENI("eni-second", 1, false, false, false, 2, "subnet-a"); err != nil {
		t.Fatal(err)
	}
	for i := range 9 {
		if err := ds.AddIPv4CidrToStore("eni-primary", cidr(t, "10.0.0."+itoa(10+i)+"/32"), false); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if err := ds.AddIPv4CidrToStore("eni-second", cidr(t, "10.0.1."+itoa(10+i)+"/32"), false); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if _, _, _, err := ds.AssignPodIPv4Address(pod(i)); err != nil {
			t.Fatal(err)
		}
	}
	key, _ := pod(2)
	if _, _, _, _, _, err := ds.UnassignPodIPAddress(key); err != nil {
		t.Fatal(err)
	}
	n := serve(t, ds)
	stats := ds.GetIPStats("4")
	r := n.reader()
	ctx := context.Background()
	u, err := r.Read(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want := int64(stats.AssignedIPs + stats.CooldownIPs); u.Used != want || u.PodsAssigned != int64(stats.AssignedIPs) || u.Pool.Cooling != int64(stats.CooldownIPs) {
		t.Errorf("used %d (assigned %d, cooling %d), ipamd's GetIPStats: %s", u.Used, u.PodsAssigned, u.Pool.Cooling, stats)
	}
	if u.Pool.Attached != int64(stats.TotalIPs) || u.Capacity != 27 || u.SubnetFull {
		t.Errorf("capacity %d, attached %d; want 27 of ipamd's limits, %d attached (%s)", u.Capacity, u.Pool.Attached, stats.TotalIPs, stats)
	}
	t.Logf("ipamd: %s; Headroom: capacity %d, used %d", stats, u.Capacity, u.Used)
	updateTestdata(t, "enis-secondary-ips.json", n.get(t, "/v1/enis"))
	updateTestdata(t, "ipamd-metrics.txt", n.get(t, "/metrics"))

	// ipamd meets an exhausted subnet (awsAPIErrInc's labels).
	prometheusmetrics.AwsAPIErr.WithLabelValues("AssignPrivateIpAddresses", "InsufficientFreeAddressesInSubnet").Inc()
	u, err = r.Read(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !u.SubnetFull || u.Capacity != int64(stats.TotalIPs) {
		t.Errorf("after InsufficientFreeAddressesInSubnet: capacity %d, subnet full %v; want the %d attached", u.Capacity, u.SubnetFull, stats.TotalIPs)
	}
	updateTestdata(t, "ipamd-metrics-subnet-full.txt", n.get(t, "/metrics"))
}

// TestPrefixDelegation: with ENABLE_PREFIX_DELEGATION each ENI holds /28
// prefixes; ipamd's per-ENI limit is 9 prefixes of 16 (144), and an ENI
// that is excluded from pods (node.k8s.amazonaws.com/no_manage) and a
// trunk ENI (security groups for pods) take ENI slots but hand out none.
func TestPrefixDelegation(t *testing.T) {
	setLimits(4, 9*16)
	ds := datastore.NewDataStore(log, datastore.NewTestCheckpoint(datastore.CheckpointData{Version: datastore.CheckpointFormatVersion}), true, 0)
	for i, id := range []string{"eni-primary", "eni-trunk", "eni-excluded"} {
		if err := ds.AddENI(id, i, i == 0, id == "eni-trunk", false, i, "subnet-a"); err != nil {
			t.Fatal(err)
		}
	}
	if err := ds.SetENIExcludedForPodIPs("eni-excluded", true); err != nil {
		t.Fatal(err)
	}
	if err := ds.AddIPv4CidrToStore("eni-primary", cidr(t, "10.0.4.16/28"), true); err != nil {
		t.Fatal(err)
	}
	if err := ds.AddIPv4CidrToStore("eni-excluded", cidr(t, "10.0.5.16/28"), true); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, _, _, err := ds.AssignPodIPv4Address(pod(i)); err != nil {
			t.Fatal(err)
		}
	}
	n := serve(t, ds)
	stats := ds.GetIPStats("4")
	u, err := n.reader().Read(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// The primary ENI can take 144, the fourth ENI slot 144 more; the
	// trunk's and the excluded ENI's slots give none.
	if !u.Pool.PrefixDelegation || u.Pool.Attached != int64(stats.TotalIPs) || u.Used != int64(stats.AssignedIPs) || u.Capacity != 288 ||
		u.Pool.TrunkENIs != 1 || u.Pool.ExcludedENIs != 1 {
		t.Errorf("%+v; ipamd's GetIPStats: %s", u, stats)
	}
	t.Logf("ipamd: %s; Headroom: capacity %d, used %d", stats, u.Capacity, u.Used)
	updateTestdata(t, "enis-prefix-delegation.json", n.get(t, "/v1/enis"))
}

func updateTestdata(t *testing.T, name string, b []byte) {
	if os.Getenv("HEADROOM_UPDATE_TESTDATA") == "" {
		return
	}
	if err := os.WriteFile(filepath.Join("..", "..", "pkg", "awsipam", "testdata", name), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}

// TestFullNode: an m5.large whose 3 ENIs hold 9 pod addresses each, every
// one assigned: ipamd can attach no more, and the node is full (its
// max-pods of the VPC CNI's formula, 3 × 9 + 2 host-network pods).
func TestFullNode(t *testing.T) {
	setLimits(3, 9)
	ds := datastore.NewDataStore(log, datastore.NewTestCheckpoint(datastore.CheckpointData{Version: datastore.CheckpointFormatVersion}), false, 0)
	for e := range 3 {
		id := "eni-" + itoa(e)
		if err := ds.AddENI(id, e, e == 0, false, false, e, "subnet-a"); err != nil {
			t.Fatal(err)
		}
		for i := range 9 {
			if err := ds.AddIPv4CidrToStore(id, cidr(t, "10.0."+itoa(e)+"."+itoa(10+i)+"/32"), false); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 27 {
		if _, _, _, err := ds.AssignPodIPv4Address(pod(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, _, err := ds.AssignPodIPv4Address(pod(27)); err == nil {
		t.Fatal("ipamd's datastore assigned a 28th address of 27")
	}
	n := serve(t, ds)
	stats := ds.GetIPStats("4")
	u, err := n.reader().Read(context.Background(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if u.Capacity != 27 || u.Used != 27 || int64(stats.AssignedIPs) != u.Used {
		t.Errorf("capacity %d, used %d; want 27 and 27 (ipamd's GetIPStats: %s)", u.Capacity, u.Used, stats)
	}
	updateTestdata(t, "enis-full.json", n.get(t, "/v1/enis"))
}

// The answers in pkg/awsipam/testdata are this module's: they read as
// the live ones do (times aside: their cooling addresses cooled long ago).
func TestTestdataCurrent(t *testing.T) {
	for _, name := range []string{"enis-secondary-ips.json", "enis-prefix-delegation.json", "enis-full.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "pkg", "awsipam", "testdata", name))
		if err != nil {
			t.Fatalf("%v (HEADROOM_UPDATE_TESTDATA=1 go test . writes it)", err)
		}
		if _, err := awsipam.ParseENIs(b, time.Now(), awsipam.DefaultCooldown); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
