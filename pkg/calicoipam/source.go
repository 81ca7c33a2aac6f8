package calicoipam

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/headroom-k8s/headroom/pkg/ipstats"
)

// Source is the ipstats.Source of Calico's IPAM objects: every node's
// figures from one Watch of the cluster, read by the consumer itself (the
// scheduler, the descheduler) instead of one watch per node agent. Its
// figures are live: SampledAt is the time of the read, and maxAge does not
// apply. The families are those the cluster has pools of (Cluster.Families).
type Source struct {
	watch *Watch
	// ctx bounds the watch; it is detached from every reader's.
	ctx context.Context
}

// NewSource returns a Source over w, whose informers run until ctx ends.
func NewSource(ctx context.Context, w *Watch) *Source {
	w.Detached = true
	return &Source{watch: w, ctx: ctx}
}

// Read tells node's figures; before the first lists, without the rights or
// Calico's CRDs, or where the figures cannot be told, an
// *ipstats.UnknownError.
func (s *Source) Read(node *corev1.Node, now time.Time, maxAge time.Duration) (ipstats.NodeStats, error) {
	c, err := s.watch.Cluster(s.ctx)
	if err != nil {
		return ipstats.NodeStats{}, &ipstats.UnknownError{Reason: err}
	}
	return c.Read(node, now, maxAge)
}

// Read makes a Cluster the ipStats.Source of its figures as they were
// listed (kubectl-headroom's one-shot LIST): node's figures at now, with
// the families the cluster has pools of.
func (c *Cluster) Read(node *corev1.Node, now time.Time, _ time.Duration) (ipstats.NodeStats, error) {
	u, err := c.Usage(node.Name, c.Families())
	if err != nil {
		return ipstats.NodeStats{}, &ipstats.UnknownError{Reason: err}
	}
	return ipstats.NewNodeStats(u.Capacity, u.Used, now), nil
}

// List reads Calico's three resources once (no watch) and sums them.
func List(ctx context.Context, client dynamic.Interface) (*Cluster, error) {
	var blocks []Block
	var pools []Pool
	cfg := DefaultConfig
	for _, r := range []schema.GroupVersionResource{IPAMBlocks, IPPools, IPAMConfigs} {
		list, err := client.Resource(r).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", r.Resource, err)
		}
		for i := range list.Items {
			b, err := list.Items[i].MarshalJSON()
			if err != nil {
				return nil, err
			}
			switch r {
			case IPAMBlocks:
				blk, err := ParseBlock(b)
				if err != nil {
					return nil, err
				}
				blocks = append(blocks, blk)
			case IPPools:
				p, err := ParsePool(b)
				if err != nil {
					return nil, err
				}
				pools = append(pools, p)
			default:
				if list.Items[i].GetName() != IPAMConfigName {
					continue
				}
				if cfg, err = ParseConfig(b); err != nil {
					return nil, err
				}
			}
		}
	}
	sortPools(pools)
	return Summarize(blocks, pools, cfg), nil
}

// WaitSynced starts the watch and waits up to timeout for its first lists;
// it returns the last reason they have not completed.
func (s *Source) WaitSynced(timeout time.Duration) error {
	var last error
	_ = wait.PollUntilContextTimeout(s.ctx, 100*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		_, last = s.watch.Cluster(s.ctx)
		return last == nil, nil
	})
	return last
}

// defaultConfig is the API server of DefaultSource, set by the process's
// main (SetDefaultConfig).
var defaultConfig struct {
	mu  sync.Mutex
	get func() (*rest.Config, error)
}

// SetDefaultConfig names how DefaultSource connects: the descheduler's
// main sets it from its own client flags, which its plugins' handle does
// not expose.
func SetDefaultConfig(get func() (*rest.Config, error)) {
	defaultConfig.mu.Lock()
	defaultConfig.get = get
	defaultConfig.mu.Unlock()
}

// DefaultSource is SharedSource of SetDefaultConfig's API server.
func DefaultSource() (*Source, error) {
	defaultConfig.mu.Lock()
	get := defaultConfig.get
	defaultConfig.mu.Unlock()
	if get == nil {
		return nil, errors.New("no client to read Calico's objects with")
	}
	cfg, err := get()
	if err != nil {
		return nil, err
	}
	return SharedSource(cfg)
}

// shared holds the one Source of each API server in this process, so that
// every plugin and profile that reads Calico's figures shares one watch.
var shared struct {
	mu      sync.Mutex
	sources map[string]*Source
}

// SharedSource returns the process's Source for the API server of cfg,
// made on first use; its watch runs until the process ends.
func SharedSource(cfg *rest.Config) (*Source, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if s := shared.sources[cfg.Host]; s != nil {
		return s, nil
	}
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	s := NewSource(context.Background(), NewWatch(client))
	if shared.sources == nil {
		shared.sources = map[string]*Source{}
	}
	shared.sources[cfg.Host] = s
	return s, nil
}
