package azureipam

import (
	"errors"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// nnc is a NodeNetworkConfig as CNS's controller and DNC-RC write it
// (crd/nodenetworkconfig/api/v1alpha): 16 addresses in one dynamic
// network container of a pod subnet, batch 16, up to 250.
func nnc(ncStatus, ipsNotInUse string, ips ...string) string {
	var assignments []string
	for i, ip := range ips {
		assignments = append(assignments, `{"name": "`+string(rune('a'+i))+`-uuid", "ip": "`+ip+`"}`)
	}
	return `{"apiVersion": "acn.azure.com/v1alpha", "kind": "NodeNetworkConfig", "metadata": {"name": "aks-node-1", "namespace": "kube-system"},
		"spec": {"requestedIPCount": 16, "ipsNotInUse": [` + ipsNotInUse + `]},
		"status": {"assignedIPCount": ` + "16" + `, "status": "Updated",
			"scaler": {"batchSize": 16, "releaseThresholdPercent": 150, "requestThresholdPercent": 50, "maxIPCount": 250},
			"networkContainers": [{"id": "nc-1", "assignmentMode": "dynamic", "type": "vnet", "primaryIP": "10.241.0.4",
				"subnetName": "podsubnet", "subnetAddressSpace": "10.241.0.0/16", "defaultGateway": "10.241.0.1", "version": 3,
				"status": "` + ncStatus + `", "ipAssignments": [` + strings.Join(assignments, ",") + `]}]}}`
}

func TestFromJSON(t *testing.T) {
	ips := []string{"10.241.0.5", "10.241.0.6", "10.241.0.7", "10.241.0.8"}
	a, err := FromJSON([]byte(nnc("NCUpdateSuccess", "", ips...)))
	if err != nil || a.Capacity() != 250 || len(a.Addresses) != 4 || a.SubnetFull || a.BatchSize != 16 || a.Requested != 16 {
		t.Fatalf("FromJSON = %+v, %v", a, err)
	}
	if got := a.Used([]string{"10.241.0.5", "10.241.0.8", "10.9.9.9", "bad"}); got != 2 {
		t.Fatalf("Used = %d, want the 2 addresses of the allocation", got)
	}
	// The subnet is full: what the node holds, less what CNS releases.
	a, err = FromJSON([]byte(nnc(NCSubnetFull, `"b-uuid", "10.241.0.7", "10.0.0.1"`, ips...)))
	if err != nil || !a.SubnetFull || a.Releasing != 2 || a.Capacity() != 2 {
		t.Fatalf("FromJSON(subnet full) = %+v (capacity %d), %v", a, a.Capacity(), err)
	}
	for _, tc := range []struct{ in, unsupported, error string }{
		{in: strings.Replace(nnc("", "", ips...), `"maxIPCount": 250`, `"maxIPCount": 0`, 1), unsupported: "maxIPCount is not set"},
		{in: nnc("", ""), unsupported: "no network container has ipAssignments"},
		{in: strings.Replace(nnc("", "", ips...), `"dynamic"`, `"static"`, 1), unsupported: "assigned statically"},
		{in: nnc("", "", "10.241.0.300"), error: "status.networkContainers[0].ipAssignments[0].ip"},
		{in: strings.Replace(nnc("", "", ips...), `"requestedIPCount": 16`, `"requestedIPCount": -1`, 1), error: "spec.requestedIPCount"},
		{in: `{"status": {"networkContainers": {}}}`, error: "NodeNetworkConfig: json"},
	} {
		_, err := FromJSON([]byte(tc.in))
		switch {
		case tc.unsupported != "":
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.unsupported) {
				t.Errorf("FromJSON: %v, want unsupported (%s)", err, tc.unsupported)
			}
		case err == nil || errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.error):
			t.Errorf("FromJSON: %v, want an error naming %s", err, tc.error)
		}
	}
}

// The object the integration test creates validates against the CRD
// written from Azure's schema, and reads as above.
func TestTestdataObject(t *testing.T) {
	b, err := os.ReadFile("testdata/nodenetworkconfig.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		t.Fatal(err)
	}
	a, err := FromJSON(j)
	if err != nil || a.Capacity() != 250 || len(a.Addresses) != 16 {
		t.Fatalf("testdata: %+v, %v", a, err)
	}
}

func FuzzFromJSON(f *testing.F) {
	f.Add(nnc("NCUpdateSuccess", `"a-uuid"`, "10.241.0.5", "::ffff:10.241.0.6"))
	f.Add(nnc(NCSubnetFull, `"10.241.0.5"`, "10.241.0.5", "fd00::1"))
	f.Fuzz(func(t *testing.T, in string) {
		a, err := FromJSON([]byte(in))
		if err != nil {
			return
		}
		if c := a.Capacity(); c < 0 || c > maxCount || a.Releasing < 0 || a.Releasing > int64(len(a.Addresses)) {
			t.Fatalf("FromJSON(%s) = %+v, capacity %d", in, a, c)
		}
	})
}
