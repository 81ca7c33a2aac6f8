package nodepids

import (
	"context"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	fwk "k8s.io/kube-scheduler/framework"
	st "k8s.io/kubernetes/pkg/scheduler/testing"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/headroom-k8s/headroom/apis/config"
	configv1 "github.com/headroom-k8s/headroom/apis/config/v1"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/internal/plugintest"
)

// now is the scheduler's clock in these tests.
var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// defaultArgs are the v1 defaults: DefaultPodPIDs 100, MinFreePIDs 512,
// MinFreePercent 5, MaxSampleAge 10m, UnknownNodeScore -1 (mean of known).
func defaultArgs() *config.NodePIDsArgs {
	return &config.NodePIDsArgs{
		DefaultPodPIDs:   configv1.DefaultPodPIDs,
		MinFreePIDs:      configv1.DefaultMinFreePIDs,
		MinFreePercent:   configv1.DefaultMinFreePercent,
		MaxSampleAge:     metav1.Duration{Duration: configv1.DefaultMaxSampleAge},
		UnknownNodeScore: configv1.DefaultUnknownNodeScore,
		AmpleFreePIDs:    configv1.DefaultAmpleFreePIDs,
	}
}

type testPlugin struct {
	*NodePIDs
	recorder *events.FakeRecorder
	Handle   plugintest.Handle
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

// newPlugin builds the plugin through New with a real framework handle
// (plugintest.NewHandle).
func newPlugin(t testing.TB, args *config.NodePIDsArgs, nodes []*corev1.Node, pods []*corev1.Pod) testPlugin {
	t.Helper()
	h := plugintest.NewHandle(t, nodes, pods)
	p, err := New(context.Background(), args, h)
	if err != nil {
		t.Fatal(err)
	}
	pl := p.(*NodePIDs)
	pl.Clock = testingclock.NewFakePassiveClock(now)
	return testPlugin{NodePIDs: pl, recorder: h.Recorder, Handle: h}
}

// pidNode is a node with the four PID annotations.
func pidNode(name string, capacity, reserved, used int64, sampledAt time.Time) *corev1.Node {
	return st.MakeNode().Name(name).
		Annotation(pidstats.AnnotationCapacity, strconv.FormatInt(capacity, 10)).
		Annotation(pidstats.AnnotationReserved, strconv.FormatInt(reserved, 10)).
		Annotation(pidstats.AnnotationUsed, strconv.FormatInt(used, 10)).
		Annotation(pidstats.AnnotationSampledAt, sampledAt.UTC().Format(time.RFC3339)).
		Obj()
}

// annotatedNode is a node with the given annotations (key, value, ...).
func annotatedNode(name string, kv ...string) *corev1.Node {
	w := st.MakeNode().Name(name)
	for i := 0; i+1 < len(kv); i += 2 {
		w = w.Annotation(kv[i], kv[i+1])
	}
	return w.Obj()
}

// pod is a pod declaring pids ("" for no annotation).
func pod(name, pids string) *corev1.Pod {
	w := st.MakePod().Namespace("ns").Name(name).UID(name)
	if pids != "" {
		w = w.Annotation(pidstats.AnnotationPodPIDs, pids)
	}
	return w.Obj()
}

var (
	boundAt  = plugintest.BoundAt
	assumed  = plugintest.Assumed
	nodeInfo = plugintest.NodeInfo
)

// filter runs PreFilter and Filter for p on ni in a fresh cycle.
func (tp testPlugin) filter(t testing.TB, p *corev1.Pod, ni fwk.NodeInfo) *fwk.Status {
	t.Helper()
	return plugintest.Filter(t, tp.NodePIDs, p, ni)
}

// scores runs a scoring cycle (plugintest.Scores).
func (tp testPlugin) scores(t testing.TB, p *corev1.Pod, nodes ...fwk.NodeInfo) map[string]int64 {
	t.Helper()
	return plugintest.Scores(t, tp.NodePIDs, p, nodes...)
}
