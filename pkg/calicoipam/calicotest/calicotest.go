// Package calicotest builds Calico IPAM objects as Calico's IPAM writes them
// (crd.projectcalico.org/v1), for the tests of calicoipam and of the node
// agent against a real API server.
package calicotest

import (
	"fmt"
	"net/netip"
	"strings"
)

// Holder is who holds an allocated address: a pod on a node, or, with Pod
// empty, the node itself (its IPIP or VXLAN tunnel address).
type Holder struct{ Node, Pod string }

// Block is an IPAMBlock's content: one entry of spec.allocations per
// address of cidr, the index of its spec.attributes entry or nil; the free
// ordinals, in order, in spec.unallocated. affinity "" is none.
func Block(cidr, affinity string, allocated map[int]Holder) map[string]any {
	p := netip.MustParsePrefix(cidr)
	size := 1 << (p.Addr().BitLen() - p.Bits())
	allocs := make([]any, size)
	attrs := []any{}
	unalloc := []any{}
	for i := range size {
		h, ok := allocated[i]
		if !ok {
			allocs[i] = nil
			unalloc = append(unalloc, int64(i))
			continue
		}
		allocs[i] = int64(len(attrs))
		secondary := map[string]any{"node": h.Node}
		handle := "ipip-tunnel-addr-" + h.Node
		if h.Pod != "" {
			secondary["namespace"], secondary["pod"] = "default", h.Pod
			secondary["timestamp"] = "2026-12-03 16:00:00.000000000 +0000 UTC"
			handle = "k8s-pod-network." + strings.Repeat(fmt.Sprintf("%02x", i), 32)
		} else {
			secondary["type"] = "ipipTunnelAddress"
		}
		attrs = append(attrs, map[string]any{"handle_id": handle, "secondary": secondary})
	}
	spec := map[string]any{"cidr": p.String(), "allocations": allocs, "unallocated": unalloc, "attributes": attrs,
		"strictAffinity": false, "sequenceNumber": int64(1), "deleted": false}
	if affinity != "" {
		spec["affinity"] = affinity
	}
	return map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMBlock",
		"metadata": map[string]any{"name": Name(p)}, "spec": spec}
}

// Name is the name Calico gives a block: its CIDR with '.', ':' and '/'
// replaced by '-'.
func Name(p netip.Prefix) string {
	return strings.NewReplacer(".", "-", ":", "-", "/", "-").Replace(p.String())
}

// Pods is n addresses, from ordinal first on, held by pods of node.
func Pods(node string, first, n int) map[int]Holder {
	m := map[int]Holder{}
	for i := range n {
		m[first+i] = Holder{Node: node, Pod: fmt.Sprintf("%s-pod-%d", node, first+i)}
	}
	return m
}

// IPPool is an IPPool's content.
func IPPool(name, cidr string, blockSize int) map[string]any {
	return map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "IPPool", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"cidr": cidr, "blockSize": int64(blockSize), "ipipMode": "Never", "vxlanMode": "Always",
			"natOutgoing": true, "nodeSelector": "all()", "allowedUses": []any{"Workload", "Tunnel"}}}
}

// IPAMConfig is the IPAMConfig "default".
func IPAMConfig(strictAffinity bool, maxBlocksPerHost int) map[string]any {
	return map[string]any{"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMConfig", "metadata": map[string]any{"name": "default"},
		"spec": map[string]any{"strictAffinity": strictAffinity, "autoAllocateBlocks": true, "maxBlocksPerHost": int64(maxBlocksPerHost)}}
}
