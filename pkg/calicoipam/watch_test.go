package calicoipam

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/headroom-k8s/headroom/pkg/calicoipam/calicotest"
)

// One Watch serves every node: its summary is reused while nothing
// changes, and summed again after a block write.
func TestWatchRecomputesOnChange(t *testing.T) {
	ctx := t.Context()
	obj := func(m map[string]any) *unstructured.Unstructured { return &unstructured.Unstructured{Object: m} }
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		IPAMBlocks: "IPAMBlockList", IPPools: "IPPoolList", IPAMConfigs: "IPAMConfigList",
	}, obj(calicotest.IPPool("p", "10.0.0.0/26", 28)), obj(calicotest.IPAMConfig(true, 1)),
		obj(calicotest.Block("10.0.0.0/28", "host:a", calicotest.Pods("a", 0, 10))))
	w := NewWatch(client)
	w.SyncWait = 10 * time.Second
	defer w.Stop()
	first, err := w.Cluster(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := func(c *Cluster, node string, used, capacity int64) {
		t.Helper()
		u, err := c.Usage(node, Families{IPv4: true})
		if err != nil || u.Used != used || u.Capacity != capacity {
			t.Fatalf("%s: %+v %v, want used %d of %d", node, u, err, used, capacity)
		}
	}
	want(first, "a", 10, 16)
	want(first, "b", 0, 16) // may claim one block
	if again, _ := w.Cluster(ctx); again != first {
		t.Fatal("summed again without a change")
	}
	full := calicotest.Block("10.0.0.0/28", "host:a", calicotest.Pods("a", 0, 16))
	if _, err := client.Resource(IPAMBlocks).Update(ctx, obj(full), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := w.Cluster(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if u, _ := c.Usage("a", Families{IPv4: true}); u.Used == 16 {
			want(c, "a", 16, 16)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the block write never reached the summary")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
