//go:build !k8s1.35

// k8s1.MINOR is the build tag of the Kubernetes minor being built
// (hack/k8s-minors.txt, docs/compatibility.md).

package nodestate

import (
	"context"

	"k8s.io/client-go/tools/cache"
)

// registrationSynced returns a channel closed once reg has synced.
func registrationSynced(_ context.Context, reg cache.ResourceEventHandlerRegistration) <-chan struct{} {
	return reg.HasSyncedChecker().Done()
}
