// Package azureipam reads how many pod IPs Azure CNI's dynamic allocation
// (Azure CNS, "dynamic pod IP allocation" with a pod subnet) can give a
// node and which it has, from the node's NodeNetworkConfig
// (acn.azure.com/v1alpha, namespace kube-system, named as the node), read
// as an unstructured object through the API server: Azure's Go module
// stays out of the binaries.
//
// The NodeNetworkConfig holds the addresses the subnet gave the node
// (status.networkContainers[].ipAssignments, batches of
// status.scaler.batchSize that CNS asks for through spec.requestedIPCount)
// and how far CNS may grow that (status.scaler.maxIPCount), and an
// exhausted subnet (a network container's status
// NCUpdateSubnetFullError). It does not hold which of them CNS assigned
// to pods: that is CNS's own state on the node. The pods' addresses are
// those of the node's pods (status.podIPs) that lie in the allocation;
// see docs/cnis.md ("Azure CNI").
package azureipam

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// NodeNetworkConfigs is the resource of Azure CNS's NodeNetworkConfig
// objects.
var NodeNetworkConfigs = schema.GroupVersionResource{Group: "acn.azure.com", Version: "v1alpha", Resource: "nodenetworkconfigs"}

// Namespace is where each node's NodeNetworkConfig is.
const Namespace = "kube-system"

// CNIType is the type of Azure CNI's plugin in a network configuration;
// CNSIPAMType the IPAM type with which it asks CNS for addresses.
const (
	CNIType     = "azure-vnet"
	CNSIPAMType = "azure-cns"
)

// NCSubnetFull is the network container status of an exhausted subnet.
const NCSubnetFull = "NCUpdateSubnetFullError"

// MaxEntries bounds the network containers and addresses read from one
// object: far above a node's pods (CNS's maxIPCount is 250 by default).
const MaxEntries = 1 << 16

const maxCount = 1 << 24

// ErrUnsupported is what every *UnsupportedError matches with errors.Is.
var ErrUnsupported = errors.New("Azure CNI's pod-IP figures cannot be read from the NodeNetworkConfig")

// UnsupportedError says why a NodeNetworkConfig's figures cannot be told.
type UnsupportedError struct{ Reason string }

func (e *UnsupportedError) Error() string { return "NodeNetworkConfig: " + e.Reason }

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

type nodeNetworkConfig struct {
	Spec struct {
		RequestedIPCount int64    `json:"requestedIPCount"`
		IPsNotInUse      []string `json:"ipsNotInUse"`
	} `json:"spec"`
	Status struct {
		Status string `json:"status"`
		Scaler struct {
			BatchSize               int64 `json:"batchSize"`
			ReleaseThresholdPercent int64 `json:"releaseThresholdPercent"`
			RequestThresholdPercent int64 `json:"requestThresholdPercent"`
			MaxIPCount              int64 `json:"maxIPCount"`
		} `json:"scaler"`
		NetworkContainers []struct {
			ID             string `json:"id"`
			AssignmentMode string `json:"assignmentMode"`
			Type           string `json:"type"`
			Status         string `json:"status"`
			IPAssignments  []struct {
				Name string `json:"name"`
				IP   string `json:"ip"`
			} `json:"ipAssignments"`
		} `json:"networkContainers"`
	} `json:"status"`
}

// Allocation is what a NodeNetworkConfig says of the node's addresses.
type Allocation struct {
	// Addresses are the addresses the subnet gave the node
	// (ipAssignments), Releasing those of spec.ipsNotInUse among them:
	// CNS is giving them back and hands them to no pod.
	Addresses map[netip.Addr]bool
	Releasing int64
	// Requested is spec.requestedIPCount, MaxIPCount and BatchSize the
	// scaler's.
	Requested, MaxIPCount, BatchSize int64
	// SubnetFull is true when a network container reports
	// NCUpdateSubnetFullError: the allocation cannot grow.
	SubnetFull bool
}

// Capacity is what the node can reach: MaxIPCount (never less than what
// it holds), or, with the subnet full, what it holds less what it is
// releasing.
func (a Allocation) Capacity() int64 {
	held := int64(len(a.Addresses))
	if a.SubnetFull {
		return min(max(held-a.Releasing, 0), maxCount)
	}
	return min(max(a.MaxIPCount, held-a.Releasing), maxCount)
}

// Used counts the addresses of podIPs (one per pod) that lie in the
// allocation.
func (a Allocation) Used(podIPs []string) int64 {
	var n int64
	for _, s := range podIPs {
		if ip, err := netip.ParseAddr(s); err == nil && a.Addresses[ip.Unmap()] {
			n++
		}
	}
	return n
}

// FromObject reads a NodeNetworkConfig given as its unstructured content.
func FromObject(obj map[string]any) (Allocation, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return Allocation{}, fmt.Errorf("NodeNetworkConfig: %w", err)
	}
	return FromJSON(b)
}

// FromJSON reads a NodeNetworkConfig's JSON. A malformed object is an
// error naming the field; one whose figures cannot be told (static
// assignment, no scaler yet) an *UnsupportedError.
func FromJSON(b []byte) (Allocation, error) {
	var n nodeNetworkConfig
	if err := json.Unmarshal(b, &n); err != nil {
		return Allocation{}, fmt.Errorf("NodeNetworkConfig: %w", err)
	}
	if len(n.Status.NetworkContainers) > MaxEntries || len(n.Spec.IPsNotInUse) > MaxEntries {
		return Allocation{}, fmt.Errorf("NodeNetworkConfig: more than %d network containers or spec.ipsNotInUse", MaxEntries)
	}
	s := n.Status.Scaler
	for field, v := range map[string]int64{"spec.requestedIPCount": n.Spec.RequestedIPCount, "status.scaler.maxIPCount": s.MaxIPCount, "status.scaler.batchSize": s.BatchSize} {
		if v < 0 || v > maxCount {
			return Allocation{}, fmt.Errorf("NodeNetworkConfig: %s %d is out of range [0, %d]", field, v, maxCount)
		}
	}
	a := Allocation{Addresses: map[netip.Addr]bool{}, Requested: n.Spec.RequestedIPCount, MaxIPCount: s.MaxIPCount, BatchSize: s.BatchSize}
	entries := 0
	for i, nc := range n.Status.NetworkContainers {
		if nc.AssignmentMode == "static" {
			return Allocation{}, &UnsupportedError{Reason: fmt.Sprintf("network container %s is assigned statically (%s): not dynamic pod IP allocation", nc.ID, nc.Type)}
		}
		if nc.Status == NCSubnetFull {
			a.SubnetFull = true
		}
		entries += len(nc.IPAssignments)
		if entries > MaxEntries {
			return Allocation{}, fmt.Errorf("NodeNetworkConfig: more than %d ipAssignments", MaxEntries)
		}
		for j, ipa := range nc.IPAssignments {
			ip, err := netip.ParseAddr(ipa.IP)
			if err != nil {
				return Allocation{}, fmt.Errorf("NodeNetworkConfig: status.networkContainers[%d].ipAssignments[%d].ip %q is not an IP address", i, j, ipa.IP)
			}
			a.Addresses[ip.Unmap()] = true
		}
	}
	names := map[string]bool{}
	for _, nc := range n.Status.NetworkContainers {
		for _, ipa := range nc.IPAssignments {
			if ipa.Name != "" {
				names[ipa.Name] = true
			}
		}
	}
	releasing := map[string]bool{}
	for _, id := range n.Spec.IPsNotInUse {
		// CNS names an address by its ipAssignments name (a UUID); only
		// those of the allocation count, each once.
		if ip, err := netip.ParseAddr(id); (err == nil && a.Addresses[ip.Unmap()]) || names[id] {
			releasing[id] = true
		}
	}
	a.Releasing = int64(len(releasing))
	if s.MaxIPCount == 0 {
		return Allocation{}, &UnsupportedError{Reason: "status.scaler.maxIPCount is not set (CNS has not configured the node's scaler yet)"}
	}
	if len(a.Addresses) == 0 {
		return Allocation{}, &UnsupportedError{Reason: "no network container has ipAssignments yet"}
	}
	return a, nil
}
