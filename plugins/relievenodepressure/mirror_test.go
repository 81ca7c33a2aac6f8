package relievenodepressure

import (
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// A static pod's mirror pod holds what the node agent lists under the
// static pod's UID (the hash in its kubernetes.io/config.mirror
// annotation): it counts in the node's figure, so the node's 9700 PIDs
// stay 9700 with it, above the threshold of 9500; and it is never evicted,
// even first in the delete order, placed by the scheduler the plugin
// evicts for, and carrying the descheduler's evict annotation (which lets
// any pod through the DefaultEvictor's filter).
func TestMirrorPodsCountButAreNeverEvicted(t *testing.T) {
	const hash = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	static, _ := sample.StaticPodUID(hash)
	mirror := testPod("etcd-n1", "n1", priority("9"), annotate(v1.MirrorPodAnnotationKey, hash),
		annotate("descheduler.alpha.kubernetes.io/evict", "true"))
	a := testPod("a", "n1", ownedBy("a"), priority("5"))
	b := testPod("b", "n1", ownedBy("b"))
	n1 := pidNode("n1", 10000, 9700)
	n1.Annotations[pidstats.AnnotationPIDPods] = pidstats.NewPodList([]pidstats.PodUsage{
		{UID: static, Value: 600}, {UID: a.UID, Value: 300}, {UID: b.UID, Value: 300},
	}).String()
	nodes := []*v1.Node{n1, spareNode("n2")}
	e := newEnv(t, setup{}, objects(nodes, []*v1.Pod{mirror, a, b})...)
	// 9700 − 300 − 300 = 9100: below the threshold, the mirror pod's 600
	// would reach the target of 9000, but it stays.
	if got, want := e.run(t, nodes...), []string{"a", "b"}; !equal(got, want) {
		t.Fatalf("evicted %v, want %v", got, want)
	}
}
