// Package integration runs Headroom against a real control plane: etcd,
// kube-apiserver and, per test, kube-controller-manager and kwok, started as
// processes by test/controlplane from the binaries `make test` builds.
package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/headroom-k8s/headroom/test/controlplane"
)

func TestMain(m *testing.M) {
	bin := controlplane.DefaultBinDir()
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kubectl", "kwok", "helm", "headroom-scheduler", "headroom-descheduler", "headroom-node-agent"} {
		if _, err := os.Stat(filepath.Join(bin, name)); err != nil {
			fmt.Fprintf(os.Stderr, "integration tests need %s in %s: run `make test` (or hack/build-tools.sh and hack/build.sh) first\n", name, bin)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}
