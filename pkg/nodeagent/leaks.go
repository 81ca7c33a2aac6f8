package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strings"
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

// Sandbox is a pod sandbox the container runtime lists: its ID (the
// container ID the runtime gave the CNI plugins) and the addresses it
// reports for the pod network.
type Sandbox struct {
	ID  string
	IPs []string
}

// SandboxLister lists the pod sandboxes the container runtime knows, in
// every state: a NOTREADY sandbox still owns its addresses until the
// runtime tears its network down.
type SandboxLister interface {
	ListSandboxes(ctx context.Context) ([]Sandbox, error)
}

// CRISandboxLister asks a CRI runtime (containerd, CRI-O) as `crictl pods`
// and `crictl inspectp` do: ListPodSandbox with no filter, and
// PodSandboxStatus for each sandbox's addresses. A sandbox's addresses do
// not change while it lives, so each is asked once and remembered until
// the sandbox is no longer listed. It connects on first use and again
// after a failure, so an agent started before the runtime catches up.
type CRISandboxLister struct {
	Endpoint string
	Timeout  time.Duration

	mu  sync.Mutex
	rs  criRuntime
	ips map[string][]string // by sandbox ID
	// After a failed connection, the next attempt waits until retryAt:
	// cri-client (v0.36) does not close the gRPC connection of a failed
	// handshake, so each attempt costs a connection for good.
	retryAt time.Time
	lastErr error
}

// criRetryDelay spaces out connection attempts to a runtime that did not
// answer the handshake.
const criRetryDelay = time.Minute

// criRuntime is the part of cri-client's RuntimeService used here.
type criRuntime interface {
	ListPodSandbox(ctx context.Context, filter *criapi.PodSandboxFilter) ([]*criapi.PodSandbox, error)
	PodSandboxStatus(ctx context.Context, id string, verbose bool) (*criapi.PodSandboxStatusResponse, error)
	Close(ctx context.Context) error
}

// connect makes c.rs, unless there is no socket at the endpoint (a node
// whose runtime listens elsewhere: no connection is made then) or the last
// failed attempt is less than criRetryDelay ago.
func (c *CRISandboxLister) connect(ctx context.Context) error {
	if path, ok := strings.CutPrefix(c.Endpoint, "unix://"); ok {
		if fi, err := os.Stat(path); err != nil || fi.Mode()&fs.ModeSocket == 0 {
			return fmt.Errorf("no container runtime socket at %s (--container-runtime-endpoint)", path)
		}
	}
	if now := time.Now(); now.Before(c.retryAt) {
		return c.lastErr
	}
	rs, err := remote.NewRemoteRuntimeService(ctx, c.Endpoint, c.Timeout, nil, false)
	if err != nil {
		c.retryAt = time.Now().Add(criRetryDelay)
		c.lastErr = fmt.Errorf("connecting to the container runtime at %s (next attempt in %s): %w", c.Endpoint, criRetryDelay, err)
		return c.lastErr
	}
	c.rs = rs
	return nil
}

// ListSandboxes implements SandboxLister.
func (c *CRISandboxLister) ListSandboxes(ctx context.Context) ([]Sandbox, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rs == nil {
		if err := c.connect(ctx); err != nil {
			return nil, err
		}
	}
	listed, err := c.rs.ListPodSandbox(ctx, &criapi.PodSandboxFilter{})
	if err != nil {
		_ = c.rs.Close(ctx)
		c.rs = nil // reconnect next time
		return nil, fmt.Errorf("listing pod sandboxes at %s: %w", c.Endpoint, err)
	}
	known := make(map[string][]string, len(listed))
	out := make([]Sandbox, 0, len(listed))
	for _, sb := range listed {
		ips, ok := c.ips[sb.GetId()]
		if !ok {
			st, err := c.rs.PodSandboxStatus(ctx, sb.GetId(), false)
			if err != nil {
				return nil, fmt.Errorf("asking the container runtime at %s for sandbox %s: %w", c.Endpoint, sb.GetId(), err)
			}
			if n := st.GetStatus().GetNetwork(); n != nil {
				if n.GetIp() != "" {
					ips = append(ips, n.GetIp())
				}
				for _, a := range n.GetAdditionalIps() {
					ips = append(ips, a.GetIp())
				}
			}
		}
		known[sb.GetId()] = ips
		out = append(out, Sandbox{ID: sb.GetId(), IPs: ips})
	}
	c.ips = known // forget sandboxes no longer listed
	return out, nil
}

// LeakFinder tells which host-local allocations are leaked: older than
// Grace, and of an address no pod sandbox of the node reports. With
// Reclaim, it releases an allocation that has been leaked for
// ReclaimAfter, once the runtime, asked again right before, lists neither
// the sandbox named in the allocation nor any sandbox with its address.
type LeakFinder struct {
	Sandboxes    SandboxLister
	Grace        time.Duration
	Reclaim      bool
	ReclaimAfter time.Duration

	// since is when each leaked allocation was first seen leaked; bounded
	// by the allocations of the state directory.
	since map[allocID]time.Time
}

// leak is one leaked allocation.
type leak struct {
	cniipam.Allocation
}

// allocID identifies an allocation across samples: its address and the
// time host-local wrote it (a new allocation of the address is another).
type allocID struct {
	ip string
	at int64
}

func (l leak) id() allocID { return allocID{l.IP.String(), l.ModTime.UnixNano()} }

// owned is the set of addresses the sandboxes report, canonical.
func owned(sandboxes []Sandbox) map[string]bool {
	ips := map[string]bool{}
	for _, sb := range sandboxes {
		for _, s := range sb.IPs {
			if a := net.ParseIP(s); a != nil {
				ips[a.String()] = true
			}
		}
	}
	return ips
}

// find returns the leaked allocations among allocs (listed before this
// call), by address. Allocations younger than Grace are not asked about:
// the runtime lists a sandbox only after its CNI ADD. The sandboxes are
// listed after the allocations, and every candidate's state file is looked
// at again after that: an allocation released meanwhile (its sandbox
// removed normally) or made anew is not reported.
func (f *LeakFinder) find(ctx context.Context, n *cniipam.Network, allocs []cniipam.Allocation, now time.Time) (map[string]leak, error) {
	var candidates []cniipam.Allocation
	for _, a := range allocs {
		if now.Sub(a.ModTime) >= f.Grace {
			candidates = append(candidates, a)
		}
	}
	leaks := map[string]leak{}
	if len(candidates) == 0 {
		return leaks, nil
	}
	sandboxes, err := f.Sandboxes.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	ips := owned(sandboxes)
	for _, c := range candidates {
		if ips[c.IP.String()] {
			continue
		}
		still, err := n.Stat(c.IP)
		if errors.Is(err, cniipam.ErrReleased) || (err == nil && !still.ModTime.Equal(c.ModTime)) {
			continue
		}
		if err != nil {
			return nil, err
		}
		leaks[c.IP.String()] = leak{c}
	}
	return leaks, nil
}

// reclaim releases, with host-local's own code, every allocation of leaks
// seen leaked for at least ReclaimAfter: it reads the container ID the
// allocation names, asks the runtime again, and releases the container's
// addresses when no listed sandbox has that ID or the address. It returns
// how many containers' allocations it released, and drops their addresses
// from leaks; each release is logged.
func (f *LeakFinder) reclaim(ctx context.Context, n *cniipam.Network, leaks map[string]leak, now time.Time) (int, error) {
	seen := map[allocID]time.Time{}
	var due []leak
	for _, l := range leaks {
		since, ok := f.since[l.id()]
		if !ok {
			since = now
		}
		seen[l.id()] = since
		if f.Reclaim && now.Sub(since) >= f.ReclaimAfter {
			due = append(due, l)
		}
	}
	f.since = seen // forget allocations no longer leaked
	if len(due) == 0 {
		return 0, nil
	}
	sandboxes, err := f.Sandboxes.ListSandboxes(ctx)
	if err != nil {
		return 0, fmt.Errorf("confirming leaked pod IPs before release: %w", err)
	}
	ips := owned(sandboxes)
	ids := map[string]bool{}
	for _, sb := range sandboxes {
		ids[sb.ID] = true
	}
	logger := klog.FromContext(ctx)
	released := 0
	var errs []error
	for _, l := range due {
		ip := l.IP.String()
		if _, ok := leaks[ip]; !ok {
			continue // released with another address of its container
		}
		id, ifName, err := n.Owner(l.IP)
		if errors.Is(err, cniipam.ErrReleased) {
			delete(leaks, ip)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("reading whom %s was allocated to: %w", ip, err))
			continue
		}
		if ids[id] || ips[ip] {
			// Listed after all: its leak, if it is one, starts again.
			delete(f.since, l.id())
			continue
		}
		if err := n.Release(id, ifName); err != nil {
			errs = append(errs, fmt.Errorf("releasing the pod IPs of container %s: %w", id, err))
			continue
		}
		released++
		logger.Info("Released leaked pod IPs as host-local's DEL would", "network", n.Name, "containerID", id,
			"interface", ifName, "address", ip, "allocatedAt", l.ModTime, "leakedSince", f.since[l.id()])
		// host-local released every address of the container.
		for other, ol := range leaks {
			if _, err := n.Stat(ol.IP); errors.Is(err, cniipam.ErrReleased) {
				delete(leaks, other)
			}
		}
	}
	return released, errors.Join(errs...)
}
