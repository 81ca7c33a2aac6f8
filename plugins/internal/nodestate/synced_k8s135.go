//go:build k8s1.35

// k8s1.MINOR is the build tag of the Kubernetes minor being built
// (hack/k8s-minors.txt, docs/compatibility.md).

package nodestate

import (
	"context"

	"k8s.io/client-go/tools/cache"
)

// registrationSynced returns a channel closed once reg has synced.
// client-go v0.35's registrations have no HasSyncedChecker (v0.36): its
// HasSynced is polled as cache.WaitForCacheSync polls.
func registrationSynced(ctx context.Context, reg cache.ResourceEventHandlerRegistration) <-chan struct{} {
	synced := make(chan struct{})
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
			close(synced)
		}
	}()
	return synced
}
