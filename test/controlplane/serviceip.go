package controlplane

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ServiceIP is the ClusterIP of the default/kubernetes Service: the first
// address of --service-cluster-ip-range. The kubelet gives every pod
// KUBERNETES_SERVICE_HOST=ServiceIP and KUBERNETES_SERVICE_PORT=443, which is
// what in-cluster configuration dials.
const ServiceIP = "10.96.0.1"

// addServiceIP puts ServiceIP on lo, so that the API server can serve there
// and a host-network pod (the node agent) reaches it in-cluster without a
// kube-proxy. An address left by a run that was killed is taken over.
func (cp *ControlPlane) addServiceIP() error {
	out, err := exec.Command("ip", "addr", "add", ServiceIP+"/32", "dev", "lo").CombinedOutput()
	// iproute2 says "File exists" or, in newer releases, "Address already
	// assigned" for an address lo already has.
	if err != nil && !strings.Contains(string(out), "File exists") && !strings.Contains(string(out), "Address already assigned") {
		return fmt.Errorf("ip addr add %s/32 dev lo: %v: %s (a real node needs root)", ServiceIP, err, out)
	}
	cp.serviceIPAdded = true
	// StopDetached finds this and takes the address away again.
	return os.WriteFile(filepath.Join(cp.Dir, serviceIPMarker), []byte(ServiceIP+"\n"), 0o644)
}

// serviceIPMarker, in the control plane's directory, records that
// ServiceIP was put on lo.
const serviceIPMarker = "service-ip"

func removeServiceIP() error {
	out, err := exec.Command("ip", "addr", "del", ServiceIP+"/32", "dev", "lo").CombinedOutput()
	if err != nil && !strings.Contains(string(out), "Cannot assign requested address") {
		return fmt.Errorf("ip addr del %s/32 dev lo: %v: %s", ServiceIP, err, out)
	}
	return nil
}
