// Package cniruntime drives real CNI plugins from bin/ the way a container
// runtime does, through libcni: a network configuration file, a network
// namespace per test, ADD and DEL per container. Tests of the pod-IP figures
// use it with the host-local IPAM plugin that hack/build-tools.sh builds.
package cniruntime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/headroom-k8s/headroom/test/controlplane"
)

// HostLocal is the host-local IPAM plugin's binary name in bin/.
const HostLocal = "host-local"

// Runtime invokes the plugins of one network configuration file.
type Runtime struct {
	// CNI runs plugins from bin/, caching results in a temporary directory.
	CNI *libcni.CNIConfig
	// List is the network configuration, as libcni loaded it.
	List *libcni.NetworkConfigList
	// NetNS is the network namespace every container is added in.
	NetNS string
}

// New loads the network configuration in confFile (a .conflist) for plugins
// in bin/, and makes a network namespace for its containers, removed when
// the test ends. A missing plugin binary fails the test with the command
// that builds it; a machine where no network namespace can be made (not
// root) skips it.
func New(t testing.TB, confFile string, plugins ...string) *Runtime {
	t.Helper()
	bin := controlplane.DefaultBinDir()
	for _, p := range plugins {
		if _, err := os.Stat(filepath.Join(bin, p)); err != nil {
			t.Fatalf("CNI plugin %s is not in %s: run hack/build-tools.sh (make tools) first: %v", p, bin, err)
		}
	}
	list, err := libcni.ConfListFromFile(confFile)
	if err != nil {
		t.Fatalf("loading %s: %v", confFile, err)
	}
	return &Runtime{
		CNI:   libcni.NewCNIConfigWithCacheDir([]string{bin}, t.TempDir(), nil),
		List:  list,
		NetNS: NewNetNS(t),
	}
}

// NewNetNS makes a network namespace with `ip netns add` under a unique
// name and returns its path; it is deleted when the test ends. Plugins
// refuse a CNI_NETNS that is their own namespace, so tests need one. The
// test is skipped when the namespace cannot be made.
func NewNetNS(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "headroom-test-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace (needs root and iproute2): ip netns add %s: %v: %s",
			name, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns delete %s: %v: %s", name, err, out)
		}
	})
	for _, dir := range []string{"/run/netns", "/var/run/netns"} {
		if p := filepath.Join(dir, name); fileExists(p) {
			return p
		}
	}
	t.Fatalf("ip netns add %s succeeded but the namespace is in neither /run/netns nor /var/run/netns", name)
	return ""
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func (r *Runtime) runtimeConf(containerID string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: containerID, NetNS: r.NetNS, IfName: "eth0"}
}

// Add runs ADD for a container, as the runtime does when it starts a pod
// sandbox.
func (r *Runtime) Add(ctx context.Context, containerID string) (types.Result, error) {
	return r.CNI.AddNetworkList(ctx, r.List, r.runtimeConf(containerID))
}

// Del runs DEL for a container, as the runtime does when it removes a pod
// sandbox.
func (r *Runtime) Del(ctx context.Context, containerID string) error {
	return r.CNI.DelNetworkList(ctx, r.List, r.runtimeConf(containerID))
}

// Network is a CNI network configuration directory holding one network
// whose plugin is host-local, with its runtime.
type Network struct {
	*Runtime
	// ConfDir holds the network's configuration file, as the runtime's
	// /etc/cni/net.d does.
	ConfDir string
	// StateDir is where host-local records the network's allocations.
	StateDir string
}

// HostLocalNetwork writes a network named name whose only plugin is the real
// host-local (invoked directly, as its own tests do) with the given ranges
// (host-local's "ranges" JSON) and a fresh data directory, into a fresh
// configuration directory, and returns it with a runtime that drives it.
func HostLocalNetwork(t testing.TB, name, ranges string) *Network {
	t.Helper()
	confDir, dataDir := t.TempDir(), t.TempDir()
	file := filepath.Join(confDir, "10-"+name+".conflist")
	conf := `{"cniVersion": "1.0.0", "name": "` + name + `", "plugins": [
		{"type": "host-local", "ipam": {"type": "host-local", "dataDir": "` + dataDir + `", "ranges": ` + ranges + `}}]}`
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return &Network{Runtime: New(t, file, HostLocal), ConfDir: confDir, StateDir: filepath.Join(dataDir, name)}
}
