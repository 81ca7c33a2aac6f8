package cniipam_test

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/headroom-k8s/headroom/pkg/cniipam"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
)

// A node's pod-IP sample from its CNI configuration: what a probe publishes.
func ExampleRead() {
	root, _ := os.MkdirTemp("", "cniipam-example")
	defer os.RemoveAll(root)
	confDir, dataDir := filepath.Join(root, "net.d"), filepath.Join(root, "networks")
	_ = os.MkdirAll(confDir, 0o755)
	_ = os.WriteFile(filepath.Join(confDir, "10-containerd-net.conflist"), []byte(`{
	  "cniVersion": "1.0.0", "name": "containerd-net",
	  "plugins": [
	    {"type": "bridge", "bridge": "cni0", "isGateway": true,
	     "ipam": {"type": "host-local", "dataDir": "`+dataDir+`",
	              "ranges": [[{"subnet": "10.88.0.0/28"}], [{"subnet": "fd00:88::/64"}]]}},
	    {"type": "portmap", "capabilities": {"portMappings": true}}]}`), 0o644)
	// Two pods and a leaked allocation, as host-local records them.
	_ = os.MkdirAll(filepath.Join(dataDir, "containerd-net"), 0o755)
	for _, ip := range []string{"10.88.0.2", "10.88.0.3", "10.88.0.4", "fd00:88::2", "fd00:88::3", "fd00:88::4"} {
		_ = os.WriteFile(filepath.Join(dataDir, "containerd-net", ip), []byte("id\r\neth0"), 0o644)
	}

	_, u, err := cniipam.Read(confDir)
	if cniipam.IsUnsupported(err) {
		return // headroom unknown: publish nothing
	}
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, r := range u.RangeSets {
		fmt.Printf("%s: capacity %d, used %d\n", r.RangeSet, r.Capacity, r.Used)
	}
	s := ipstats.NewNodeStats(u.Capacity, u.Used, time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC))
	a := s.Annotations()
	fmt.Println(ipstats.AnnotationCapacity, a[ipstats.AnnotationCapacity])
	fmt.Println(ipstats.AnnotationUsed, a[ipstats.AnnotationUsed])
	// Output:
	// 10.88.0.1-10.88.0.14: capacity 13, used 3
	// fd00:88::1-fd00:88::ffff:ffff:ffff:ffff: capacity 9223372036854775807, used 3
	// headroom.dev/ip-capacity 13
	// headroom.dev/ip-used 3
}
