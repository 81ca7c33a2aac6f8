//go:build !k8s1.35

// k8s1.MINOR is the build tag of the Kubernetes minor being built
// (hack/k8s-minors.txt, docs/compatibility.md).

package realnode

import (
	"context"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
)

// runtimeService is a CRI client of the runtime at socket.
func runtimeService(ctx context.Context, socket string) (internalapi.RuntimeService, error) {
	return remote.NewRemoteRuntimeService(ctx, "unix://"+socket, 10*time.Second, nil, false)
}
