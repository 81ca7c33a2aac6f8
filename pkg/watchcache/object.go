package watchcache

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// Object keeps one object in a cache, filled by a list and watch of that
// one name (fieldSelector metadata.name=<name>): a node's object of its own,
// such as its CiliumNode or Azure CNS's NodeNetworkConfig. One GET per node
// and tick would be some 500 consistent reads per second at 5,000 nodes and
// 10 s; the watch costs the API server one event per change.
type Object struct {
	*Watch
	resource  schema.GroupVersionResource
	namespace string
	name      string
}

// NewObject returns an Object of the named object of resource (namespace
// "" for a cluster-scoped one). Nothing is requested before the first Get.
func NewObject(client dynamic.Interface, resource schema.GroupVersionResource, namespace, name string) *Object {
	o := &Object{resource: resource, namespace: namespace, name: name}
	byName := func(opts *metav1.ListOptions) {
		opts.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
	o.Watch = New(fmt.Sprintf("the %s %s", resource.Resource, name), func() []cache.SharedIndexInformer {
		return []cache.SharedIndexInformer{dynamicinformer.NewFilteredDynamicInformer(client, resource, namespace, 0, cache.Indexers{}, byName).Informer()}
	})
	return o
}

// Get returns the object's unstructured content from the cache; the caller
// must not modify it. It starts the watch if it is not running, bound to
// ctx: it ends with ctx or Stop. Until the first list it returns what
// Synced does (a NotFound error where the API server does not serve the
// resource); an object that does not exist is a NotFound error.
func (o *Object) Get(ctx context.Context) (map[string]any, error) {
	informers, err := o.Synced(ctx)
	if err != nil {
		return nil, err
	}
	key := o.name
	if o.namespace != "" {
		key = o.namespace + "/" + o.name
	}
	obj, exists, err := informers[0].GetStore().GetByKey(key)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, apierrors.NewNotFound(o.resource.GroupResource(), o.name)
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("the %s %s is cached as %T", o.resource.Resource, o.name, obj)
	}
	return u.UnstructuredContent(), nil
}
