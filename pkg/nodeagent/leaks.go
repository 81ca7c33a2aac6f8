package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/cniipam"
)

// Leak-detection defaults.
const (
	// DefaultContainerRuntimeEndpoint is containerd's CRI socket.
	DefaultContainerRuntimeEndpoint = "unix:///run/containerd/containerd.sock"
	// DefaultIPLeakGrace is how old an allocation must be before it can
	// count as leaked. The runtime's CNI ADD runs inside RunPodSandbox,
	// before the sandbox is listed; the kubelet gives RunPodSandbox its
	// runtime request timeout (2 min by default) and the runtime tears a
	// sandbox down when that expires, so an allocation older than this
	// whose sandbox is not listed is not one being made.
	DefaultIPLeakGrace = 2 * time.Minute
	// DefaultReclaimLeakedIPsAfter is how long an allocation must have been
	// seen leaked before --reclaim-leaked-ips releases it.
	DefaultReclaimLeakedIPsAfter = 10 * time.Minute
)

// SandboxLister lists the IDs of the pod sandboxes the container runtime
// knows, in every state: a NOTREADY sandbox still owns its addresses until
// the runtime removes it (its CNI DEL may have failed and be retried).
type SandboxLister interface {
	ListSandboxIDs(ctx context.Context) (map[string]bool, error)
}

// CRISandboxLister asks a CRI runtime (containerd, CRI-O) as `crictl pods`
// does: ListPodSandbox with no filter. It connects on first use and again
// after a failure, so an agent started before the runtime catches up.
type CRISandboxLister struct {
	Endpoint string
	Timeout  time.Duration

	mu sync.Mutex
	rs interface {
		ListPodSandbox(ctx context.Context, filter *criapi.PodSandboxFilter) ([]*criapi.PodSandbox, error)
	}
}

// ListSandboxIDs implements SandboxLister.
func (c *CRISandboxLister) ListSandboxIDs(ctx context.Context) (map[string]bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rs == nil {
		rs, err := remote.NewRemoteRuntimeService(ctx, c.Endpoint, c.Timeout, nil, false)
		if err != nil {
			return nil, fmt.Errorf("connecting to the container runtime at %s: %w", c.Endpoint, err)
		}
		c.rs = rs
	}
	sandboxes, err := c.rs.ListPodSandbox(ctx, &criapi.PodSandboxFilter{})
	if err != nil {
		c.rs = nil // reconnect next time
		return nil, fmt.Errorf("listing pod sandboxes at %s: %w", c.Endpoint, err)
	}
	ids := make(map[string]bool, len(sandboxes))
	for _, s := range sandboxes {
		ids[s.GetId()] = true
	}
	return ids, nil
}

// LeakFinder tells which host-local allocations are leaked: older than
// Grace, and owned by a container ID that is no pod sandbox of the node.
// With Reclaim, it releases an allocation that has been leaked for
// ReclaimAfter, once the runtime confirms again that its sandbox is gone.
type LeakFinder struct {
	Sandboxes    SandboxLister
	Grace        time.Duration
	Reclaim      bool
	ReclaimAfter time.Duration
	// Released is called after each release (metrics); may be nil.
	Released func(n int)

	// since is when each leaked allocation (by address and owner) was first
	// seen leaked; bounded by the allocations of the state directory.
	since map[leakKey]time.Time
}

type leakKey struct{ ip, containerID string }

// leak is one leaked allocation.
type leak struct {
	ip                  net.IP
	containerID, ifName string
}

// find returns the leaked allocations among allocs (listed before this
// call), by address. Allocations younger than Grace are not asked about.
// The sandbox list is taken after the allocations were listed, and every
// candidate's state file is read again after it: an allocation released
// meanwhile (its sandbox removed normally) is not reported.
func (f *LeakFinder) find(ctx context.Context, n *cniipam.Network, allocs []cniipam.Allocation, now time.Time) (map[string]leak, error) {
	type candidate struct {
		leak
		modTime time.Time
	}
	var candidates []candidate
	for _, a := range allocs {
		if now.Sub(a.ModTime) < f.Grace {
			continue
		}
		id, ifName, err := n.Owner(a.IP)
		if errors.Is(err, cniipam.ErrReleased) {
			continue
		}
		if err != nil {
			return nil, err
		}
		candidates = append(candidates, candidate{leak{a.IP, id, ifName}, a.ModTime})
	}
	if len(candidates) == 0 {
		return map[string]leak{}, nil
	}
	live, err := f.Sandboxes.ListSandboxIDs(ctx)
	if err != nil {
		return nil, err
	}
	leaks := map[string]leak{}
	for _, c := range candidates {
		if live[c.containerID] {
			continue
		}
		// Still the same allocation? A file released and reserved again
		// since the listing belongs to a new container.
		id, _, err := n.Owner(c.ip)
		if errors.Is(err, cniipam.ErrReleased) || (err == nil && id != c.containerID) {
			continue
		}
		if err != nil {
			return nil, err
		}
		leaks[c.ip.String()] = c.leak
	}
	return leaks, nil
}

// reclaim releases, with host-local's own code, every allocation of leaks
// seen leaked for at least ReclaimAfter whose sandbox the runtime, asked
// again right before, still does not list. It returns how many containers'
// allocations it released, and drops them from leaks; each release is
// logged.
func (f *LeakFinder) reclaim(ctx context.Context, n *cniipam.Network, leaks map[string]leak, now time.Time) (int, error) {
	seen := map[leakKey]time.Time{}
	var due []leak
	for _, l := range leaks {
		k := leakKey{l.ip.String(), l.containerID}
		since, ok := f.since[k]
		if !ok {
			since = now
		}
		seen[k] = since
		if f.Reclaim && now.Sub(since) >= f.ReclaimAfter {
			due = append(due, l)
		}
	}
	f.since = seen // forget allocations no longer leaked
	if len(due) == 0 {
		return 0, nil
	}
	live, err := f.Sandboxes.ListSandboxIDs(ctx)
	if err != nil {
		return 0, fmt.Errorf("confirming leaked pod IPs before release: %w", err)
	}
	logger := klog.FromContext(ctx)
	released := map[string]bool{}
	var errs []error
	for _, l := range due {
		if live[l.containerID] {
			// Listed after all: its leak, if it is one, starts again.
			delete(f.since, leakKey{l.ip.String(), l.containerID})
			continue
		}
		if released[l.containerID+"\x00"+l.ifName] {
			continue
		}
		if err := n.Release(l.containerID, l.ifName); err != nil {
			errs = append(errs, fmt.Errorf("releasing the pod IPs of container %s: %w", l.containerID, err))
			continue
		}
		released[l.containerID+"\x00"+l.ifName] = true
		for ip, other := range leaks {
			if other.containerID == l.containerID && other.ifName == l.ifName {
				delete(leaks, ip)
			}
		}
		logger.Info("Released leaked pod IPs as host-local's DEL would", "network", n.Name, "containerID", l.containerID,
			"interface", l.ifName, "address", l.ip.String(), "leakedSince", seen[leakKey{l.ip.String(), l.containerID}])
	}
	if f.Released != nil && len(released) > 0 {
		f.Released(len(released))
	}
	return len(released), errors.Join(errs...)
}
