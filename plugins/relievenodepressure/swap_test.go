package relievenodepressure

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/headroom-k8s/headroom/pkg/memstats"
)

// A malformed swap figure on a node the OOM trigger relieves is ignored
// (the model counts no swap, the relief goes on as without it) and
// reported with a Warning Event on the Node.
func TestMalformedSwapIsReported(t *testing.T) {
	n1, n2 := memoryNode("n1"), spareNode("n2")
	for k, v := range memorySample(4<<30, now.Add(-time.Minute), nil) {
		n1.Annotations[k] = v
	}
	n1.Annotations[memstats.AnnotationSwapTotal] = "lots"
	var pods []*v1.Pod
	for i, name := range []string{"m1", "m2", "m3", "m4", "m5"} {
		pods = append(pods, testPod(name, "n1", pids(0), memoryLimit(3<<30), restarts(int32(5-i))))
	}
	e := newEnv(t, setup{args: RelieveNodePressureArgs{OOM: &OOMTrigger{}}}, objects([]*v1.Node{n1, n2}, pods)...)
	if got, want := e.run(t, n1, n2), []string{"m1", "m2"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
	var found bool
	for _, ev := range e.warningEvents() {
		found = found || (strings.Contains(ev, ReasonMalformedSwap) && strings.Contains(ev, memstats.AnnotationSwapTotal))
	}
	if !found {
		t.Error("no Warning Event about the malformed swap figure")
	}
}
