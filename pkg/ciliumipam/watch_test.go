package ciliumipam

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

func ciliumNodeObject(name string, used ...string) *unstructured.Unstructured {
	usedMap := map[string]any{}
	for _, a := range used {
		usedMap[a] = map[string]any{}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2", "kind": "CiliumNode",
		"metadata": map[string]any{"name": name},
		"spec":     map[string]any{"ipam": map[string]any{"podCIDRs": []any{"10.0.1.0/28"}}},
		"status":   map[string]any{"ipam": map[string]any{"used": usedMap}},
	}}
}

func fakeClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{CiliumNodes: "CiliumNodeList"}, objs...)
}

// The watch lists and watches the node's CiliumNode by name only, serves
// it from its cache, follows its changes, says NotFound for a node
// without one, and ends with Stop; the next Get starts it anew.
func TestNodeWatch(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	client := fakeClient(ciliumNodeObject("node-a", "10.0.1.1"), ciliumNodeObject("node-b", "10.0.1.1"))
	w := NewNodeWatch(client, "node-a")
	w.SyncWait = 10 * time.Second
	defer w.Stop()
	obj, err := w.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if u, err := FromObject(obj); err != nil || u.Used != 1 {
		t.Fatalf("FromObject = %+v, %v; want 1 used", u, err)
	}
	for _, a := range client.Actions() {
		if a.GetResource() != CiliumNodes {
			t.Errorf("request for %v", a.GetResource())
		}
		var fields string
		switch a := a.(type) {
		case clienttesting.ListAction:
			fields = a.GetListRestrictions().Fields.String()
		case clienttesting.WatchAction:
			fields = a.GetWatchRestrictions().Fields.String()
		default:
			t.Errorf("request %s: only list and watch expected", a.GetVerb())
			continue
		}
		if fields != "metadata.name=node-a" {
			t.Errorf("%s with field selector %q, want metadata.name=node-a", a.GetVerb(), fields)
		}
	}

	if _, err := client.Resource(CiliumNodes).Update(ctx, ciliumNodeObject("node-a", "10.0.1.1", "10.0.1.2"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		obj, err := w.Get(ctx)
		if err != nil {
			return false, err
		}
		u, err := FromObject(obj)
		return u.Used == 2, err
	})
	if err != nil {
		t.Fatalf("the change was not seen: %v", err)
	}
	if err := client.Resource(CiliumNodes).Delete(ctx, "node-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := w.Get(ctx)
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the deletion was not seen: %v", err)
	}

	w.Stop()
	w.Stop() // a stopped watch stops again at no cost
	before := len(client.Actions())
	if _, err := client.Resource(CiliumNodes).Create(ctx, ciliumNodeObject("node-a", "10.0.1.1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Get(ctx); err != nil {
		t.Fatalf("Get after Stop: %v", err)
	}
	if after := len(client.Actions()); after <= before+1 {
		t.Fatalf("%d requests after Stop and Get, want a new list", after-before-1)
	}
}

// Until its first list, the watch says why it has none: ErrNotSynced, or
// the last failed attempt's error (NotFound where CiliumNodes are not
// served).
func TestNodeWatchNotSynced(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name  string
		err   error
		check func(error) bool
	}{
		{"forbidden", apierrors.NewForbidden(CiliumNodes.GroupResource(), "", errors.New("no list")), apierrors.IsForbidden},
		{"not served", apierrors.NewNotFound(CiliumNodes.GroupResource(), ""), apierrors.IsNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fakeClient()
			client.PrependReactor("list", "ciliumnodes", func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, nil, tc.err
			})
			w := NewNodeWatch(client, "node-a")
			defer w.Stop()
			if _, err := w.Get(ctx); err != nil && !errors.Is(err, ErrNotSynced) && !tc.check(err) {
				t.Fatalf("first Get: %v", err)
			}
			w.SyncWait = time.Second
			if _, err := w.Get(ctx); !tc.check(err) {
				t.Fatalf("Get = %v, want the list's error", err)
			}
		})
	}
}
