//go:build k8s1.35

// k8s1.MINOR is the build tag of the Kubernetes minor being built
// (hack/k8s-minors.txt, docs/compatibility.md).

package realnode

import (
	"context"
	"time"

	internalapi "k8s.io/cri-api/pkg/apis"
	remote "k8s.io/cri-client/pkg"
	"k8s.io/klog/v2"
)

// runtimeService is a CRI client of the runtime at socket. cri-client
// v0.35 takes a logger where v0.36 takes a context.
func runtimeService(ctx context.Context, socket string) (internalapi.RuntimeService, error) {
	logger := klog.FromContext(ctx)
	return remote.NewRemoteRuntimeService("unix://"+socket, 10*time.Second, nil, &logger)
}
