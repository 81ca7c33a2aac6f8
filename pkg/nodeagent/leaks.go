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

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	criapi "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/klog/v2"

	"github.com/headroom-k8s/headroom/pkg/cniipam"
)

// Leak-detection defaults and floors.
const (
	// ContainerdEndpoint is containerd's CRI socket, the usual
	// --container-runtime-endpoint; the flag has no default: asking a
	// runtime needs its socket mounted, an opt-in.
	ContainerdEndpoint = "unix:///run/containerd/containerd.sock"
	// DefaultIPLeakGrace is how old an allocation must be before it can
	// count as leaked. The runtime's CNI ADD runs inside RunPodSandbox,
	// before the sandbox is listed; the kubelet gives RunPodSandbox its
	// runtime request timeout (2 min by default) and the runtime tears a
	// sandbox down when that expires, so an allocation older than this
	// whose sandbox is not listed is not one being made.
	DefaultIPLeakGrace = 2 * time.Minute
	// MinIPLeakGrace is the shortest grace accepted: below it, pods whose
	// sandbox is being set up (a slow CNI ADD, a busy runtime) would be
	// counted leaked on every start.
	MinIPLeakGrace = time.Minute
	// MinReclaimIPLeakGrace is the shortest grace accepted with
	// --reclaim-leaked-ips: the kubelet's default runtime request timeout,
	// which bounds a RunPodSandbox, so that no allocation of a sandbox
	// still being made is ever released.
	MinReclaimIPLeakGrace = DefaultIPLeakGrace
	// DefaultReclaimLeakedIPsAfter is how long an allocation must have been
	// seen leaked before --reclaim-leaked-ips releases it.
	DefaultReclaimLeakedIPsAfter = 10 * time.Minute
	// MinReclaimLeakedIPsAfter is the shortest --reclaim-leaked-ips-after
	// accepted, and it must span MinLeakedSamples samples as well: one
	// listing that misses a sandbox must never be enough.
	MinReclaimLeakedIPsAfter = time.Minute
	// MinLeakedSamples is how many samples an allocation must at least be
	// seen leaked in before it is released.
	MinLeakedSamples = 3
)

// Sandbox is a pod sandbox the container runtime lists: its ID (the
// container ID the runtime gave the CNI plugins), its pod's UID, whether it
// is ready, and the addresses it reports for the pod network.
type Sandbox struct {
	ID     string
	PodUID string
	Ready  bool
	IPs    []string
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
// the sandbox is no longer listed.
//
// It holds one gRPC connection for its whole life, made on first use, and
// never makes another: gRPC connects again by the socket's path after the
// runtime restarts (a new socket file, seen through a mount of the
// socket's directory), and a listing tells a connection in backoff to try
// at once. Nothing is left behind by a failure: no connection is ever
// abandoned.
type CRISandboxLister struct {
	Endpoint string
	Timeout  time.Duration

	mu     sync.Mutex
	conn   *grpc.ClientConn
	client criapi.RuntimeServiceClient
	ips    map[string][]string // by sandbox ID
}

const (
	// criMaxBackoff bounds how long gRPC waits between connection attempts
	// to a runtime that is down (restarting): far below the sampling
	// interval, so that the leak count is known again at the first sample
	// after the runtime is back.
	criMaxBackoff = 2 * time.Second
	// criReadyWait is how long a listing waits for the connection to be
	// ready: a runtime back from a restart is connected again within it,
	// and a runtime that is down costs a sample no more.
	criReadyWait = 2 * time.Second
	// criMaxMessage is the largest CRI answer taken, as the kubelet's CRI
	// client takes (16 MiB): a node's sandbox list is far smaller.
	criMaxMessage = 16 << 20
)

// dial makes the connection, once. There is no connection attempt without
// a socket at a unix endpoint (a node whose runtime listens elsewhere, or
// no mount of its directory).
func (c *CRISandboxLister) dial() error {
	path, ok := strings.CutPrefix(c.Endpoint, "unix://")
	if !ok {
		return fmt.Errorf("container runtime endpoint %q is not unix://PATH (--container-runtime-endpoint)", c.Endpoint)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("no container runtime socket at %s (--container-runtime-endpoint; is its directory mounted?): %w", path, err)
	}
	if fi.Mode()&fs.ModeSocket == 0 {
		return fmt.Errorf("%s is not a socket (--container-runtime-endpoint)", path)
	}
	if c.conn != nil {
		return nil
	}
	conn, err := grpc.NewClient(c.Endpoint,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 200 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: criMaxBackoff},
			MinConnectTimeout: c.Timeout,
		}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(criMaxMessage)))
	if err != nil {
		return fmt.Errorf("container runtime endpoint %s: %w", c.Endpoint, err)
	}
	c.conn, c.client = conn, criapi.NewRuntimeServiceClient(conn)
	return nil
}

// Close closes the connection, if one was made.
func (c *CRISandboxLister) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn, c.client = nil, nil
	return err
}

// ListSandboxes implements SandboxLister.
func (c *CRISandboxLister) ListSandboxes(ctx context.Context) ([]Sandbox, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.dial(); err != nil {
		return nil, err
	}
	return c.list(ctx)
}

// listPodSandbox asks for every sandbox. A runtime that restarted since the
// last call is connected again at once: a connection in backoff is told to
// try now, the call waits up to criReadyWait for it, and a call that went
// out on the connection the runtime closed is made once more.
func (c *CRISandboxLister) listPodSandbox(ctx context.Context) (*criapi.ListPodSandboxResponse, error) {
	var resp *criapi.ListPodSandboxResponse
	var err error
	for range 2 {
		if c.conn.GetState() == connectivity.TransientFailure {
			c.conn.ResetConnectBackoff()
		}
		callCtx, cancel := context.WithTimeout(ctx, min(c.Timeout, criReadyWait))
		resp, err = c.client.ListPodSandbox(callCtx, &criapi.ListPodSandboxRequest{Filter: &criapi.PodSandboxFilter{}}, grpc.WaitForReady(true))
		cancel()
		if status.Code(err) != codes.Unavailable {
			break
		}
	}
	return resp, err
}

func (c *CRISandboxLister) list(ctx context.Context) ([]Sandbox, error) {
	resp, err := c.listPodSandbox(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing pod sandboxes at %s: %w", c.Endpoint, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	listed := resp.GetItems()
	known := make(map[string][]string, len(listed))
	out := make([]Sandbox, 0, len(listed))
	for _, sb := range listed {
		ips, ok := c.ips[sb.GetId()]
		if !ok {
			st, err := c.client.PodSandboxStatus(ctx, &criapi.PodSandboxStatusRequest{PodSandboxId: sb.GetId()})
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
		out = append(out, Sandbox{ID: sb.GetId(), PodUID: sb.GetMetadata().GetUid(),
			Ready: sb.GetState() == criapi.PodSandboxState_SANDBOX_READY, IPs: ips})
	}
	c.ips = known // forget sandboxes no longer listed
	return out, nil
}

// LeakFinder tells which host-local allocations are leaked: older than
// Grace, and of an address no pod sandbox of the node reports. With
// Reclaim, it releases an allocation that has been leaked for
// ReclaimAfter, once the runtime, asked again after the allocation's owner
// was read, lists neither that owner nor any sandbox with its address, and
// only while the allocation, checked again under host-local's lock, is
// still the one seen.
//
// A runtime's answer counts only when it lists the agent's own pod's ready
// sandbox (OwnPodUID): a socket that answers for another runtime, or an
// idle one, lists none of the node's pods, and would make every allocation
// look leaked.
type LeakFinder struct {
	Sandboxes SandboxLister
	// OwnPodUID is the UID of the agent's own pod (the downward API's
	// metadata.uid); empty, no answer can be trusted.
	OwnPodUID    string
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
// state file host-local wrote for it (a new allocation of the address is
// another file).
type allocID struct {
	ip    string
	at    int64
	inode uint64
}

func (l leak) id() allocID { return allocID{l.IP.String(), l.ModTime.UnixNano(), l.Inode} }

// Release is one container's allocations released as leaked.
type Release struct {
	ContainerID, IfName string
	// IPs are the addresses released: the container's in every range set.
	IPs []net.IP
	// AllocatedAt is when host-local allocated them, LeakedSince when they
	// were first seen leaked.
	AllocatedAt, LeakedSince time.Time
}

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

// listTrusted lists the runtime's sandboxes, and refuses the answer unless
// it holds the agent's own pod's ready sandbox.
func (f *LeakFinder) listTrusted(ctx context.Context) ([]Sandbox, error) {
	if f.OwnPodUID == "" {
		return nil, errors.New("the agent's own pod UID is unknown (--pod-uid, or POD_UID from the downward API's metadata.uid): " +
			"nothing shows that the container runtime asked is this node's")
	}
	sandboxes, err := f.Sandboxes.ListSandboxes(ctx)
	if err != nil {
		return nil, err
	}
	for _, sb := range sandboxes {
		if sb.PodUID == f.OwnPodUID && sb.Ready {
			return sandboxes, nil
		}
	}
	return nil, fmt.Errorf("the container runtime lists %d pod sandboxes, none of them the agent's own pod's (UID %s): "+
		"it is not the runtime that runs this node's pods (--container-runtime-endpoint)", len(sandboxes), f.OwnPodUID)
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
	// The runtime is asked even with no candidate, so that an untrusted
	// runtime shows as an unknown count, never as 0.
	sandboxes, err := f.listTrusted(ctx)
	if err != nil {
		return nil, err
	}
	leaks := map[string]leak{}
	ips := owned(sandboxes)
	for _, c := range candidates {
		if ips[c.IP.String()] {
			continue
		}
		still, err := n.Stat(c.IP)
		if errors.Is(err, cniipam.ErrReleased) || (err == nil && !still.Same(c)) {
			continue
		}
		if err != nil {
			return nil, err
		}
		leaks[c.IP.String()] = leak{c}
	}
	return leaks, nil
}

// track records since when each of leaks has been leaked, forgetting the
// allocations no longer leaked, and returns those leaked for ReclaimAfter.
func (f *LeakFinder) track(leaks map[string]leak, now time.Time) []leak {
	seen := map[allocID]time.Time{}
	var due []leak
	for _, l := range leaks {
		since, ok := f.since[l.id()]
		if !ok {
			since = now
		}
		seen[l.id()] = since
		if now.Sub(since) >= f.ReclaimAfter {
			due = append(due, l)
		}
	}
	f.since = seen
	return due
}

// reclaim releases, with host-local's own code, every allocation of leaks
// seen leaked for at least ReclaimAfter, in three steps so that a live
// address is never freed:
//  1. it reads whom each allocation names (container ID, interface);
//  2. it asks the runtime again, after that read: a sandbox listed with
//     that ID or the address keeps it (its leak, if it is one, starts
//     again);
//  3. it releases the container's addresses under host-local's lock, only
//     if the state file is still the one seen and still names that
//     container: a DEL and an ADD of the address since step 1 (another
//     pod's) make it keep the file.
//
// It returns the releases, and drops their addresses from leaks.
func (f *LeakFinder) reclaim(ctx context.Context, n *cniipam.Network, leaks map[string]leak, now time.Time) ([]Release, error) {
	due := f.track(leaks, now)
	if !f.Reclaim || len(due) == 0 {
		return nil, nil
	}
	type candidate struct {
		leak
		containerID, ifName string
	}
	var candidates []candidate
	var errs []error
	for _, l := range due {
		id, ifName, err := n.Owner(l.IP)
		switch {
		case errors.Is(err, cniipam.ErrReleased):
			delete(leaks, l.IP.String())
		case err != nil:
			errs = append(errs, fmt.Errorf("reading whom %s was allocated to: %w", l.IP, err))
		default:
			candidates = append(candidates, candidate{l, id, ifName})
		}
	}
	if len(candidates) == 0 {
		return nil, errors.Join(errs...)
	}
	sandboxes, err := f.listTrusted(ctx)
	if err != nil {
		return nil, errors.Join(append(errs, fmt.Errorf("confirming leaked pod IPs before release: %w", err))...)
	}
	ips := owned(sandboxes)
	ids := map[string]bool{}
	for _, sb := range sandboxes {
		ids[sb.ID] = true
	}
	var released []Release
	for _, c := range candidates {
		if _, ok := leaks[c.IP.String()]; !ok {
			continue // released with another address of its container
		}
		if ids[c.containerID] || ips[c.IP.String()] {
			delete(f.since, c.id()) // listed after all
			continue
		}
		freed, err := n.ReleaseIfUnchanged(c.Allocation, c.containerID, c.ifName)
		if errors.Is(err, cniipam.ErrReleased) || errors.Is(err, cniipam.ErrChanged) {
			// Released, or another allocation now: not this leak any more.
			klog.FromContext(ctx).V(2).Info("Leaked pod IP changed before its release; kept", "network", n.Name, "address", c.IP, "reason", err)
			delete(f.since, c.id())
			delete(leaks, c.IP.String())
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		released = append(released, Release{ContainerID: c.containerID, IfName: c.ifName, IPs: freed,
			AllocatedAt: c.ModTime, LeakedSince: f.since[c.id()]})
		for _, ip := range append(freed, c.IP) {
			delete(leaks, ip.String())
		}
	}
	return released, errors.Join(errs...)
}
