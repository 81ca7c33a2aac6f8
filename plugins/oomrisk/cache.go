package oomrisk

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	fwk "k8s.io/kube-scheduler/framework"

	"github.com/headroom-k8s/headroom/pkg/oomkill"
)

// nodeCache keeps each node's oomkill.Node across scheduling cycles.
// Building one sorts the node's containers and calls the kubelet's adj
// function per container; the scheduler's snapshot bumps a NodeInfo's
// generation on every change to the node or its pods (the generations come
// from one process-wide counter), so an entry of the same generation is
// still exact.
type nodeCache struct {
	est oomkill.Estimate

	mu      sync.RWMutex
	entries map[string]cacheEntry
}

type cacheEntry struct {
	generation int64
	node       *oomkill.Node
	err        error
}

func newNodeCache(est oomkill.Estimate) *nodeCache {
	return &nodeCache{est: est, entries: map[string]cacheEntry{}}
}

// get returns the model of ni's node, from the cache when its generation is
// current. Score calls it in parallel for different nodes; a hit takes only
// the read lock and allocates nothing.
func (c *nodeCache) get(ni fwk.NodeInfo) (*oomkill.Node, error) {
	node := ni.Node()
	generation := ni.GetGeneration()
	c.mu.RLock()
	e, ok := c.entries[node.Name]
	c.mu.RUnlock()
	if ok && e.generation == generation {
		return e.node, e.err
	}

	infos := ni.GetPods()
	pods := make([]*corev1.Pod, len(infos))
	for i, pi := range infos {
		pods[i] = pi.GetPod()
	}
	n, err := oomkill.NewNode(node, pods, c.est)
	e = cacheEntry{generation: generation, node: n, err: err}

	c.mu.Lock()
	// A concurrent cycle may have stored a newer generation meanwhile.
	if old, ok := c.entries[node.Name]; !ok || old.generation < generation {
		c.entries[node.Name] = e
	}
	c.mu.Unlock()
	return n, err
}

// prune drops the entries of nodes that lister no longer holds, once there
// are more entries than nodes: the cache never outgrows the cluster by more
// than the nodes of one cycle.
func (c *nodeCache) prune(lister fwk.NodeInfoLister) {
	all, err := lister.List()
	if err != nil {
		return
	}
	c.mu.RLock()
	over := len(c.entries) > len(all)
	c.mu.RUnlock()
	if !over {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.entries {
		if _, err := lister.Get(name); err != nil {
			delete(c.entries, name)
		}
	}
}

// len returns the number of cached nodes.
func (c *nodeCache) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}
