package nodeips

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/headroom-k8s/headroom/apis/config"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/pkg/ipstats"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

// now is the scheduler's clock in these tests.
var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// defaultArgs are the v1 defaults: MinFreeIPs 0, MaxSampleAge 10m,
// UnknownNodeScore -1 (mean of known).
func defaultArgs() *config.NodeIPsArgs {
	return &config.NodeIPsArgs{
		MinFreeIPs:       configv1.DefaultMinFreeIPs,
		MaxSampleAge:     metav1.Duration{Duration: configv1.DefaultMaxSampleAge},
		UnknownNodeScore: configv1.DefaultUnknownNodeScore,
		AmpleFreeIPs:     configv1.DefaultAmpleFreeIPs,
	}
}

type testPlugin struct {
	*NodeIPs
	h plugintest.Handle
}

// hint returns the plugin's queueing hint for events of resource.
func (tp testPlugin) hint(resource fwk.EventResource) fwk.QueueingHintFn {
	events, err := tp.EventsToRegister(context.Background())
	if err != nil {
		panic(err)
	}
	for _, e := range events {
		if e.Event.Resource == resource {
			return e.QueueingHintFn
		}
	}
	panic("no hint for " + string(resource))
}

func (tp testPlugin) isSchedulableAfterNodeChange(logger klog.Logger, p *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	return tp.hint(fwk.Node)(logger, p, oldObj, newObj)
}

func (tp testPlugin) isSchedulableAfterPodDelete(logger klog.Logger, p *corev1.Pod, oldObj, newObj any) (fwk.QueueingHint, error) {
	return tp.hint(fwk.Pod)(logger, p, oldObj, newObj)
}

// newPlugin builds the plugin through New with a real framework handle.
func newPlugin(t testing.TB, args *config.NodeIPsArgs, nodes []*corev1.Node, pods []*corev1.Pod) testPlugin {
	t.Helper()
	h := plugintest.NewHandle(t, nodes, pods)
	p, err := New(context.Background(), args, h)
	if err != nil {
		t.Fatal(err)
	}
	pl := p.(*NodeIPs)
	pl.Clock = testingclock.NewFakePassiveClock(now)
	return testPlugin{NodeIPs: pl, h: h}
}

func (tp testPlugin) filter(t testing.TB, p *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	t.Helper()
	return plugintest.Filter(t, tp.NodeIPs, p, ni)
}

func (tp testPlugin) scores(t testing.TB, p *corev1.Pod, nodes ...fwk.NodeInfo) map[string]int64 {
	t.Helper()
	return plugintest.Scores(t, tp.NodeIPs, p, nodes...)
}

// ipNode is a node with the three pod-IP annotations.
func ipNode(name string, capacity, used int64, sampledAt time.Time) *corev1.Node {
	return annotatedNode(name,
		ipstats.AnnotationCapacity, strconv.FormatInt(capacity, 10),
		ipstats.AnnotationUsed, strconv.FormatInt(used, 10),
		ipstats.AnnotationSampledAt, sampledAt.UTC().Format(time.RFC3339))
}

// annotatedNode is a node with the given annotations (key, value, ...).
func annotatedNode(name string, kv ...string) *corev1.Node {
	w := st.MakeNode().Name(name)
	for i := 0; i+1 < len(kv); i += 2 {
		w = w.Annotation(kv[i], kv[i+1])
	}
	return w.Obj()
}

// pod is a pod on the pod network.
func pod(name string) *corev1.Pod {
	return st.MakePod().Namespace("ns").Name(name).UID(name).Obj()
}

// hostNetworkPod is a pod on the node's network: it takes no pod IP.
func hostNetworkPod(name string) *corev1.Pod {
	p := pod(name)
	p.Spec.HostNetwork = true
	return p
}

var (
	boundAt  = plugintest.BoundAt
	assumed  = plugintest.Assumed
	nodeInfo = plugintest.NodeInfo
)
