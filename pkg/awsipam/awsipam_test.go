package awsipam

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"
)

var now = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

// enisV1 is /v1/enis of ipamd since v1.20 (one ENIInfos per network card),
// in the shape of the answers pkg/awsipam/testdata holds (made by
// test/awsipamd from ipamd's own datastore): a primary ENI with three
// secondary addresses (one assigned, one released 10 s ago, one released
// long ago), a second ENI with one assigned, an excluded ENI and a trunk.
const enisV1 = `{"0": {"TotalIPs": 5, "AssignedIPs": 2, "ENIs": {
  "eni-1": {"ID": "eni-1", "IsPrimary": true, "IsTrunk": false, "IsEFA": false, "DeviceNumber": 0,
    "AvailableIPv4Cidrs": {
      "10.0.0.11/32": {"Cidr": {"IP": "10.0.0.11", "Mask": "/////w=="}, "IPAddresses": {"10.0.0.11": {"Address": "10.0.0.11",
          "IPAMKey": {"networkName": "aws-cni", "containerID": "", "ifName": ""}, "IPAMMetadata": {"k8sPodNamespace": "default", "k8sPodName": "a"},
          "AssignedTime": "2026-12-03T11:00:00Z", "UnassignedTime": "0001-01-01T00:00:00Z"}}, "IsPrefix": false, "AddressFamily": ""},
      "10.0.0.12/32": {"Cidr": {"IP": "10.0.0.12", "Mask": "/////w=="}, "IPAddresses": {"10.0.0.12": {"Address": "10.0.0.12",
          "IPAMKey": {"networkName": "", "containerID": "", "ifName": ""}, "IPAMMetadata": {},
          "AssignedTime": "0001-01-01T00:00:00Z", "UnassignedTime": "2026-12-03T11:59:50Z"}}, "IsPrefix": false, "AddressFamily": ""},
      "10.0.0.13/32": {"Cidr": {"IP": "10.0.0.13", "Mask": "/////w=="}, "IPAddresses": {"10.0.0.13": {"Address": "10.0.0.13",
          "IPAMKey": {"networkName": "", "containerID": "", "ifName": ""}, "IPAMMetadata": {},
          "AssignedTime": "0001-01-01T00:00:00Z", "UnassignedTime": "2026-12-03T11:00:00Z"}}, "IsPrefix": false, "AddressFamily": ""}},
    "IPv6Cidrs": {}, "IsExcludedForPodIPs": false, "RouteTableID": 0, "SubnetID": "subnet-1"},
  "eni-2": {"ID": "eni-2", "IsPrimary": false, "IsTrunk": false, "IsEFA": false, "DeviceNumber": 1,
    "AvailableIPv4Cidrs": {
      "10.0.1.21/32": {"Cidr": {"IP": "10.0.1.21", "Mask": "/////w=="}, "IPAddresses": {"10.0.1.21": {"Address": "10.0.1.21",
          "IPAMKey": {"networkName": "aws-cni", "containerID": "", "ifName": ""}, "IPAMMetadata": {},
          "AssignedTime": "2026-12-03T11:00:00Z", "UnassignedTime": "0001-01-01T00:00:00Z"}}, "IsPrefix": false, "AddressFamily": ""},
      "10.0.1.22/32": {"Cidr": {"IP": "10.0.1.22", "Mask": "/////w=="}, "IPAddresses": {}, "IsPrefix": false, "AddressFamily": ""}},
    "IPv6Cidrs": {}, "IsExcludedForPodIPs": false, "RouteTableID": 3, "SubnetID": "subnet-1"},
  "eni-3": {"ID": "eni-3", "IsPrimary": false, "IsTrunk": false, "DeviceNumber": 2,
    "AvailableIPv4Cidrs": {"10.0.2.5/32": {"IPAddresses": {}, "IsPrefix": false}}, "IPv6Cidrs": {}, "IsExcludedForPodIPs": true},
  "eni-4": {"ID": "eni-4", "IsTrunk": true, "DeviceNumber": 3, "AvailableIPv4Cidrs": {}, "IPv6Cidrs": {}}}}}`

func TestParseENIs(t *testing.T) {
	p, err := ParseENIs([]byte(enisV1), now, DefaultCooldown)
	if err != nil {
		t.Fatal(err)
	}
	if p.Attached != 5 || p.Assigned != 2 || p.Cooling != 1 || len(p.PoolENIs) != 2 || p.TrunkENIs != 1 || p.ExcludedENIs != 1 ||
		p.ReportedAssigned != 2 || p.PrefixDelegation || p.IPv6 {
		t.Fatalf("ParseENIs = %+v", p)
	}
	// The older answer: one ENIInfos.
	old := `{"TotalIPs": 16, "AssignedIPs": 1, "ENIs": {"eni-1": {"ID": "eni-1", "IsPrimary": true, "AvailableIPv4Cidrs": {
		"10.0.0.16/28": {"IPAddresses": {"10.0.0.17": {"Address": "10.0.0.17", "IPAMKey": {"networkName": "aws-cni", "containerID": "c1", "ifName": "eth0"}}},
		"IsPrefix": true}}}}}`
	if p, err := ParseENIs([]byte(old), now, DefaultCooldown); err != nil || p.Attached != 16 || p.Assigned != 1 || !p.PrefixDelegation {
		t.Fatalf("ParseENIs(single) = %+v, %v", p, err)
	}
	for _, bad := range []struct{ in, want string }{
		{`[]`, "ipamd /v1/enis"},
		{`{"0": {"ENIs": {"eni-1": {"AvailableIPv4Cidrs": {"10.0.0.300/32": {}}}}}}`, `CIDR "10.0.0.300/32"`},
		{`{"0": {"ENIs": {"eni-1": {"AvailableIPv4Cidrs": {"10.0.0.3/32": {"IPAddresses": {"x": {}}}}}}}}`, `address "x"`},
		{`{"0": {"ENIs": "none"}}`, `network card "0"`},
	} {
		if _, err := ParseENIs([]byte(bad.in), now, DefaultCooldown); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("ParseENIs(%s) = %v, want an error naming %s", bad.in, err, bad.want)
		}
	}
}

func TestFigures(t *testing.T) {
	p, err := ParseENIs([]byte(enisV1), now, DefaultCooldown)
	if err != nil {
		t.Fatal(err)
	}
	// 4 ENIs of 9 pod addresses each (an instance of 10 per ENI): the two
	// pool ENIs can take 9 each; of the 2 ENI slots left, the excluded and
	// the trunk ENI take both.
	if u := Figures(p, Limits{MaxENIs: 4, IPsPerENI: 9}, false); u.Capacity != 18 || u.Used != 3 || u.PodsAssigned != 2 {
		t.Fatalf("Figures = %+v", u)
	}
	// 6 ENIs: two more can be attached.
	if u := Figures(p, Limits{MaxENIs: 6, IPsPerENI: 9}, false); u.Capacity != 36 {
		t.Fatalf("Figures(6 ENIs) = %+v", u)
	}
	// The subnet is exhausted: only what is attached.
	if u := Figures(p, Limits{MaxENIs: 6, IPsPerENI: 9}, true); u.Capacity != 5 || u.Used != 3 {
		t.Fatalf("Figures(subnet full) = %+v", u)
	}
	// Limits far too large are clamped.
	if u := Figures(p, Limits{MaxENIs: 1 << 24, IPsPerENI: 1 << 24}, false); u.Capacity != maxCount {
		t.Fatalf("Figures(huge) = %+v", u)
	}
}

const metricsText = `# HELP awscni_eni_max The maximum number of ENIs that can be attached to the instance, accounting for unmanaged ENIs
# TYPE awscni_eni_max gauge
awscni_eni_max 4
# HELP awscni_ip_max The maximum number of IP addresses that can be allocated to the instance
# TYPE awscni_ip_max gauge
awscni_ip_max 36
# HELP awscni_aws_api_error_count The number of times AWS API returns an error
# TYPE awscni_aws_api_error_count counter
awscni_aws_api_error_count{api="AssignPrivateIpAddresses",error="InsufficientFreeAddressesInSubnet"} %d
awscni_aws_api_error_count{api="AssignPrivateIpAddresses",error="RequestLimitExceeded"} 7
`

func TestParseMetrics(t *testing.T) {
	l, err := ParseMetrics([]byte(strings.Replace(metricsText, "%d", "2", 1)))
	if err != nil || l.MaxENIs != 4 || l.IPsPerENI != 9 || l.SubnetFullErrors != 2 {
		t.Fatalf("ParseMetrics = %+v, %v", l, err)
	}
	if _, err := ParseMetrics([]byte("awscni_ip_max 36\n")); err == nil || !strings.Contains(err.Error(), "awscni_eni_max") {
		t.Fatalf("ParseMetrics without awscni_eni_max: %v", err)
	}
}

// Reader asks ipamd's two servers and tells an exhausted subnet from the
// growth of ipamd's error count, for DefaultSubnetFullFor.
func TestReader(t *testing.T) {
	errorsCount := "0"
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/enis", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte(enisV1)) })
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Replace(metricsText, "%d", errorsCount, 1)))
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	r := &Reader{IntrospectionAddress: addr, MetricsAddress: addr, Cooldown: DefaultCooldown, SubnetFullFor: DefaultSubnetFullFor}
	ctx := context.Background()
	read := func(at time.Time) Usage {
		t.Helper()
		u, err := r.Read(ctx, at)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	if u := read(now); u.Capacity != 18 || u.SubnetFull {
		t.Fatalf("%+v", u)
	}
	errorsCount = "1"
	if u := read(now.Add(10 * time.Second)); u.Capacity != 5 || !u.SubnetFull {
		t.Fatalf("after InsufficientFreeAddressesInSubnet: %+v", u)
	}
	if u := read(now.Add(2 * time.Minute)); !u.SubnetFull {
		t.Fatalf("within %s: %+v", DefaultSubnetFullFor, u)
	}
	if u := read(now.Add(10*time.Second + DefaultSubnetFullFor)); u.SubnetFull || u.Capacity != 18 {
		t.Fatalf("after %s without another error: %+v", DefaultSubnetFullFor, u)
	}
	srv.Close()
	if _, err := r.Read(ctx, now); err == nil || !strings.Contains(err.Error(), "asking ipamd") {
		t.Fatalf("ipamd down: %v", err)
	}
}

func FuzzParseENIs(f *testing.F) {
	f.Add(enisV1)
	f.Add(`{"TotalIPs": 16, "AssignedIPs": 1, "ENIs": {"eni-1": {"AvailableIPv4Cidrs": {"10.0.0.16/28": {"IPAddresses": {"10.0.0.17": {"IPAMKey": {"networkName": "x"}}}, "IsPrefix": true}}}}}`)
	f.Add(`{"0": {"ENIs": {"eni-1": {"IPv6Cidrs": {"2001:db8::/80": {"IsPrefix": true}}}}}}`)
	if b, err := os.ReadFile("testdata/enis-secondary-ips.json"); err == nil {
		f.Add(string(b))
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := ParseENIs([]byte(in), now, DefaultCooldown)
		if err != nil {
			return
		}
		for _, full := range []bool{false, true} {
			u := Figures(p, Limits{MaxENIs: 15, IPsPerENI: 49}, full)
			if u.Capacity < 0 || u.Used < 0 || u.Used > u.Capacity || u.Capacity > maxCount {
				t.Fatalf("Figures(%+v) = %+v", p, u)
			}
		}
	})
}

func FuzzParseMetrics(f *testing.F) {
	f.Add(strings.Replace(metricsText, "%d", "3", 1))
	f.Add("awscni_eni_max 1e300\nawscni_ip_max NaN\n")
	f.Fuzz(func(t *testing.T, in string) {
		l, err := ParseMetrics([]byte(in))
		if err != nil {
			return
		}
		if l.MaxENIs <= 0 || l.MaxENIs > maxCount || l.IPsPerENI < 0 || l.IPsPerENI > maxCount {
			t.Fatalf("ParseMetrics(%q) = %+v", in, l)
		}
	})
}
