package ciliumipam

import (
	"k8s.io/client-go/dynamic"

	"github.com/headroom-k8s/headroom/pkg/watchcache"
)

// ErrNotSynced is what NodeWatch.Get returns until its watch has completed
// its first list: whether the node has a CiliumNode is not known yet.
var ErrNotSynced = watchcache.ErrNotSynced

// NodeWatch keeps one node's CiliumNode in a cache (watchcache.Object): a
// list and watch of that one name, run only while it is used: Get starts
// it, Stop ends it.
type NodeWatch = watchcache.Object

// NewNodeWatch returns a NodeWatch of the CiliumNode named as the node.
// Nothing is requested before the first Get.
func NewNodeWatch(client dynamic.Interface, nodeName string) *NodeWatch {
	return watchcache.NewObject(client, CiliumNodes, "", nodeName)
}
