package relievenodepressure

import (
	"context"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/headroom-k8s/headroom/pkg/ipstarved"
)

// SandboxFailuresSelector selects the kubelet's FailedCreatePodSandBox
// Events; reportingComponent is the core/v1 field selector's name for
// reportingController. It is the field selector of the plugin's one Event
// informer, whose cost test/agentload measures.
var SandboxFailuresSelector = fields.AndSelectors(
	fields.OneTermEqualSelector("reason", ipstarved.ReasonFailedCreatePodSandBox),
	fields.OneTermEqualSelector("reportingComponent", ipstarved.Kubelet),
).String()

// byInvolvedUID indexes the cached Events by the UID of their pod.
const byInvolvedUID = "involvedObject.uid"

// sandboxFailuresSyncWait is how long after the cache starts a run waits
// for its first List; later runs do not wait (a cache that never
// syncs, e.g. without the right to watch Events, leaves the ipStarved
// trigger idle, logged each run, rather than holding up every run).
const sandboxFailuresSyncWait = 30 * time.Second

// sandboxFailures is a cache of the kubelet's FailedCreatePodSandBox Events
// in the whole cluster, filled by one List and one Watch with a field
// selector on the reason, from the first run that needs it: the ipStarved trigger reads a waiting pod's
// Events from it, costing the API server nothing per run or per pod (Events
// have no watch cache in the API server: each List of them reads etcd).
// Each cached message is cut to ipstarved.MaxMessageBytes, and the
// managedFields keep only their times, which ipstarved.Check reads.
type sandboxFailures struct {
	informer cache.SharedIndexInformer
	// start starts the cache, once; syncBy is set then.
	start  sync.Once
	run    func()
	syncBy time.Time
}

// newSandboxFailures builds the cache on client, to run for as long as ctx
// lives. The descheduler's shared informer factory has no per-informer
// field selector, and starts only what was requested before its own start,
// so the cache has a factory of its own. It is built in New and started on
// its first use (sandboxFailuresSynced), not in New: the descheduler's
// dry-run mode builds every plugin twice, first on the real client, then
// discards that one for one on its sandbox; started in New, the discarded
// one would watch the cluster's Events for the life of the process. A
// cluster with no node short of pod IPs never starts it.
func newSandboxFailures(ctx context.Context, client kubernetes.Interface) (*sandboxFailures, error) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = SandboxFailuresSelector }))
	informer := factory.Core().V1().Events().Informer()
	if err := informer.SetTransform(trimSandboxFailure); err != nil {
		return nil, err
	}
	if err := informer.AddIndexers(cache.Indexers{byInvolvedUID: func(obj any) ([]string, error) {
		if e, ok := obj.(*v1.Event); ok {
			return []string{string(e.InvolvedObject.UID)}, nil
		}
		return nil, nil
	}}); err != nil {
		return nil, err
	}
	return &sandboxFailures{informer: informer, run: func() { factory.Start(ctx.Done()) }}, nil
}

// trimSandboxFailure bounds what the cache keeps of an Event.
func trimSandboxFailure(obj any) (any, error) {
	e, ok := obj.(*v1.Event)
	if !ok {
		return obj, nil
	}
	e.Message = ipstarved.CapMessage(e.Message)
	for i := range e.ManagedFields {
		e.ManagedFields[i].FieldsV1 = nil
	}
	return e, nil
}

// sandboxFailuresSynced starts the cache on first use and reports whether
// it holds the cluster's Events, waiting for its first List within
// sandboxFailuresSyncWait of its start. Without a client (never in the
// descheduler) there are none to hold.
func (c *cycle) sandboxFailuresSynced(ctx context.Context) bool {
	s := c.sandboxFailures
	if s == nil {
		return true
	}
	s.start.Do(func() {
		s.syncBy = time.Now().Add(sandboxFailuresSyncWait)
		s.run()
	})
	if s.informer.HasSynced() {
		return true
	}
	wait := time.Until(s.syncBy)
	if wait <= 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced)
}

// sandboxFailuresOf are the cached FailedCreatePodSandBox Events of pod. In
// the descheduler's dry-run mode the client is its sandbox, which holds no
// Events: no pod is found starved.
func (c *cycle) sandboxFailuresOf(pod *v1.Pod) []v1.Event {
	if c.sandboxFailures == nil {
		return nil
	}
	objs, err := c.sandboxFailures.informer.GetIndexer().ByIndex(byInvolvedUID, string(pod.UID))
	if err != nil {
		return nil
	}
	events := make([]v1.Event, 0, len(objs))
	for _, obj := range objs {
		if e, ok := obj.(*v1.Event); ok {
			events = append(events, *e)
		}
	}
	return events
}
