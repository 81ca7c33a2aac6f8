package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/headroom-k8s/headroom/test/controlplane"
)

// The evictor's log line, as headroom-descheduler writes it (klog's text
// format), is what the demo reads the evictions from.
func TestDescheduledSoFarReadsTheEvictorsLog(t *testing.T) {
	dir := t.TempDir()
	log := `I1130 15:05:19.263012    6796 relievenodepressure.go:215] "Relief planned" plugin="RelieveNodePressure" node="kwok-node-0" pods=["default/a","default/b"]
I1130 15:05:19.270989    6796 evictions.go:589] "Evicted pod" pod="default/a" reason="RelieveNodePressure: node kwok-node-0 PIDs 99.1% used > threshold 95%" strategy="RelieveNodePressure" node="kwok-node-0" profile="headroom"
I1130 15:05:19.271055    6796 plan.go:196] "Evicted pod to relieve node" plugin="RelieveNodePressure" node="kwok-node-0" pod="default/a"
I1130 15:05:19.288712    6796 evictions.go:589] "Evicted pod" pod="default/b" reason="RelieveNodePressure: node kwok-node-0 PIDs 99.1% used > threshold 95%" strategy="RelieveNodePressure" node="kwok-node-0" profile="headroom"
`
	if err := os.WriteFile(filepath.Join(dir, "headroom-descheduler.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got := descheduledSoFar(&controlplane.ControlPlane{Dir: dir})
	want := []eviction{
		{pod: "default/a", node: "kwok-node-0", reason: "RelieveNodePressure: node kwok-node-0 PIDs 99.1% used > threshold 95%"},
		{pod: "default/b", node: "kwok-node-0", reason: "RelieveNodePressure: node kwok-node-0 PIDs 99.1% used > threshold 95%"},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}
