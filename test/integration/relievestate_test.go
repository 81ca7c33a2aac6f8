package integration

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// stateOtherNodes is how many other nodes' records the state ConfigMap holds
// in TestRelieveNodePressureRecordWriteIsOneNodes: most of the 5,000 the
// plugin keeps at most.
const stateOtherNodes = 4900

// TestRelieveNodePressureRecordWriteIsOneNodes runs the shipped descheduler
// once, as its CronJob does, with its shipped identity, on a node 9900 of
// 10000 PIDs used whose listed web pods hold 600 each (two evictions reach
// the target, 8700 ≤ 9000), while the state ConfigMap holds the records of
// 4,900 other nodes (each as large as a relief's record: about 0.7 MB in
// all). The API server's own count of the bytes it received for that
// ConfigMap (apiserver_request_body_size_bytes, verbs patch and update)
// over the relieving run shows that each write after an eviction sends the
// node's record only; the records of the other nodes stay as they were.
func TestRelieveNodePressureRecordWriteIsOneNodes(t *testing.T) {
	cp, ctx := rnpStart(t)
	c := cp.Client
	ns := metav1.NamespaceDefault
	web := rnpWorkload("web", 4, rnpNode, relievenodepressure.DefaultSchedulerName, nil)
	if _, err := c.AppsV1().Deployments(ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	webPods := rnpPodsOf(ctx, t, c, "web", 4)
	rnpRunning(ctx, t, c, webPods)
	measured := map[types.UID]int64{}
	for _, p := range webPods {
		measured[p.UID] = 600
	}
	rnpSample(ctx, t, c, rnpNode, 9900, measured)
	if _, err := c.CoreV1().Nodes().Patch(ctx, "spare", types.MergePatchType, spareRoom(), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// The shipped, empty ConfigMap, filled as an operator would see it in a
	// large cluster.
	if err := cp.ApplyShippedIdentities(ctx); err != nil {
		t.Fatal(err)
	}
	states := c.CoreV1().ConfigMaps(controlplane.Namespace)
	cm, err := states.Get(ctx, controlplane.DeschedulerStateConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	relieved := time.Now().Add(-10 * time.Minute).UTC().Truncate(time.Second)
	others := map[string]string{}
	for i := range stateOtherNodes {
		others[fmt.Sprintf("node-%05d", i)] = fmt.Sprintf(`{"relieved":%q,"awaiting":["memory"],"sampledAt":{"memory":%q,"pids":%q}}`,
			relieved.Format(time.RFC3339), relieved.Add(-time.Minute).Format(time.RFC3339), relieved.Add(-time.Minute).Format(time.RFC3339))
	}
	cm.Data = others
	if cm, err = states.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(cm)

	rnpFirstSample(ctx, t, cp, rnpNode)
	sent := func() (bytes, writes float64) {
		for _, verb := range []string{"patch", "update"} {
			bytes += apiServerMetric(ctx, t, cp, "apiserver_request_body_size_bytes_sum", `resource="configmaps"`, `verb="`+verb+`"`)
			writes += apiServerMetric(ctx, t, cp, "apiserver_request_body_size_bytes_count", `resource="configmaps"`, `verb="`+verb+`"`)
		}
		return bytes, writes
	}
	bytes0, writes0 := sent()
	log := rnpRun(t, cp)
	bytes1, writes1 := sent()
	evicted := rnpEvicted(log)
	if len(evicted) != 2 {
		t.Fatalf("evicted %v, want two web pods\n%s", evicted, rnpPluginLines(log))
	}
	bytes, writes := bytes1-bytes0, writes1-writes0
	t.Logf("state ConfigMap of %d bytes (%d records): the relieving run made %d evictions and %.0f writes of it, %.0f bytes sent in all, %.0f per eviction",
		len(raw), len(others), len(evicted), writes, bytes, bytes/float64(len(evicted)))
	// A write after each eviction, and the run's last one.
	if writes < float64(len(evicted)) {
		t.Errorf("%.0f writes of the state ConfigMap for %d evictions, want one after each", writes, len(evicted))
	}
	// A record is about 150 bytes; the other records weigh 0.7 MB.
	if perWrite := bytes / writes; perWrite > 1024 {
		t.Errorf("%.0f bytes sent a write, want about one record's worth (the ConfigMap is %d bytes)", perWrite, len(raw))
	}

	after, err := states.Get(ctx, controlplane.DeschedulerStateConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for node, record := range others {
		if after.Data[node] != record {
			t.Fatalf("record of %s is %q, was %q", node, after.Data[node], record)
		}
	}
	var r struct {
		Relieved *time.Time `json:"relieved"`
	}
	if err := json.Unmarshal([]byte(after.Data[rnpNode]), &r); err != nil || r.Relieved == nil {
		t.Errorf("record of %s %q (%v): want its relief", rnpNode, after.Data[rnpNode], err)
	}
}

// spareRoom is a merge patch giving a node a PID sample with room.
func spareRoom() []byte {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": pidstats.NodeStats{Capacity: 10000, Used: 1000, SampledAt: time.Now()}.Annotations()}})
	return patch
}
