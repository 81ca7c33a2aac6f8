package integration

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/nodeips"
	"github.com/headroom-k8s/headroom/plugins/nodepids"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// TestNodeAgentOutageIsVisible runs headroom-node-agent on node-a (none
// runs on node-b) and headroom-scheduler with the shipped config and
// identity, at the default verbosity, with a maxSampleAge of 15 s. While
// the agent writes, headroom_nodes on the scheduler's /metrics counts
// node-a known and node-b unknown for NodePIDs, and NodePIDs keeps a pod
// that needs more PIDs than node-a has off it. Then the agent stops: within
// maxSampleAge and a couple of seconds the gauge counts node-a stale, the
// scheduler logs the change once (not per cycle or recount), and the same
// pod is bound to node-a: a stale node is neither filtered nor favoured.
func TestNodeAgentOutageIsVisible(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	for _, name := range []string{"node-a", "node-b"} {
		if _, err := cp.CreateNode(ctx, name, resources("32", "128Gi", "110"), nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := cp.ApplyShippedIdentities(ctx); err != nil {
		t.Fatal(err)
	}

	// The node agent on node-a writes every second; no CNI network, so no
	// pod-IP sample on either node.
	agentProc := startNodeAgent(ctx, t, cp, "node-a", "--cni-conf-dir="+t.TempDir())
	// The agent writes first, so that the scheduler's first count finds
	// node-a known and the one change it logs is the outage's.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, ok := n.Annotations[pidstats.AnnotationSampledAt]
		return ok, nil
	}); err != nil {
		t.Fatalf("the node agent never wrote node-a's PID sample: %v\n%s", err, agentProc.Log(2<<10))
	}

	const maxSampleAge = 15 * time.Second
	sched, err := cp.StartScheduler(ctx, withMaxSampleAge(t, repoFile(t, shippedSchedulerConfig), maxSampleAge))
	if err != nil {
		t.Fatal(err)
	}
	gauge := func(metrics, plugin, state string) int {
		m := regexp.MustCompile(fmt.Sprintf(`(?m)^headroom_nodes\{plugin=%q,profile="headroom-scheduler",state=%q\} (\d+)$`, plugin, state)).FindStringSubmatch(metrics)
		if m == nil {
			return -1
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	var metrics string
	waitGauge := func(what string, timeout time.Duration, want map[string]int) time.Time {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			metrics = scrapeScheduler(ctx, t, cp, sched)
			for k, n := range want {
				plugin, state, _ := strings.Cut(k, "/")
				if gauge(metrics, plugin, state) != n {
					return false, nil
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("%s: /metrics never showed %v: %v\n%s\nagent:\n%s", what, want, err, grepLines(metrics, "headroom_nodes"), agentProc.Log(2<<10))
		}
		return time.Now()
	}
	waitGauge("agent writing", time.Minute, map[string]int{
		"NodePIDs/known": 1, "NodePIDs/unknown": 1, "NodePIDs/stale": 0, "NodePIDs/invalid": 0,
		"NodeIPs/known": 0, "NodeIPs/unknown": 2, "NodeIPs/stale": 0, "NodeIPs/invalid": 0,
	})

	// A pod that needs every PID a node can have, pinned to node-a: with
	// node-a's headroom known, NodePIDs keeps it off.
	bigPod := func(name string) *corev1.Pod {
		p := newPod(name, "headroom-scheduler", map[string]string{pidstats.AnnotationPodPIDs: strconv.Itoa(pidstats.MaxNodePIDs)}, nil, nil)
		p.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"node-a"}}},
			}}},
		}}
		return p
	}
	pods := cp.Client.CoreV1().Pods(metav1.NamespaceDefault)
	if _, err := pods.Create(ctx, bigPod("big-while-known"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		evs, err := cp.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=big-while-known"})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "FailedScheduling" && strings.Contains(e.Message, nodepids.ErrReasonTooFewPIDs) {
				return true, nil
			}
		}
		return false, nil
	}); err != nil {
		t.Fatalf("no FailedScheduling saying %q for a pod needing %d PIDs on node-a: %v", nodepids.ErrReasonTooFewPIDs, pidstats.MaxNodePIDs, err)
	}
	if err := pods.Delete(ctx, "big-while-known", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The node agent stops.
	agentProc.Stop(10 * time.Second)
	stopped := time.Now()
	staleAt := waitGauge("agent stopped", maxSampleAge+time.Minute, map[string]int{
		"NodePIDs/known": 0, "NodePIDs/unknown": 1, "NodePIDs/stale": 1, "NodePIDs/invalid": 0,
		"NodeIPs/unknown": 2,
	})
	delay := staleAt.Sub(stopped)
	t.Logf("node-a counted stale %.1fs after the node agent stopped (maxSampleAge %s)", delay.Seconds(), maxSampleAge)
	// The last sample is at most --max-interval old when the agent stops;
	// the count follows within MinInterval of its expiry.
	if delay > maxSampleAge+5*time.Second {
		t.Errorf("node-a counted stale %s after the agent stopped, want within %s", delay, maxSampleAge+5*time.Second)
	}

	// Stale is unknown: the same pod is bound to node-a now.
	if _, err := pods.Create(ctx, bigPod("big-while-stale"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, "big-while-stale"); node != "node-a" {
		t.Errorf("bound to %s", node)
	}

	// Several recounts and a scheduling cycle later, the change is still
	// logged once, at the default verbosity.
	time.Sleep(3 * time.Second)
	log := sched.Log(8 << 20)
	changes := grepLines(log, `"Node's PID headroom state changed"`)
	if n := strings.Count(changes, "\n") + 1; changes == "" || n != 1 ||
		!strings.Contains(changes, `node="node-a" from="known" to="stale" reason="PID sample is `) ||
		!strings.Contains(changes, `plugin="NodePIDs"`) {
		t.Errorf("want one log line of node-a's change from known to stale, got:\n%s", changes)
	}
	if s := grepLines(log, `"Node's pod IP headroom state changed"`); s != "" {
		t.Errorf("NodeIPs logged a change, but no node had a pod-IP sample:\n%s", s)
	}
	for _, want := range []string{
		`"Nodes by PID headroom state" plugin="NodePIDs" profile="headroom-scheduler" maxSampleAge="15s" known=1 unknown=1 stale=0 invalid=0`,
		`"Nodes by pod IP headroom state" plugin="NodeIPs" profile="headroom-scheduler" maxSampleAge="15s" known=0 unknown=2 stale=0 invalid=0`,
	} {
		if n := strings.Count(log, want); n != 1 {
			t.Errorf("%d summary lines %s, want 1", n, want)
		}
	}
	t.Logf("scheduler: %s", changes)
	if t.Failed() {
		t.Logf("scheduler log:\n%s", grepLines(log, "headroom state"))
	}
}

// withMaxSampleAge returns the KubeSchedulerConfiguration config (YAML)
// with the maxSampleAge of NodePIDs and NodeIPs set to d.
func withMaxSampleAge(t *testing.T, config []byte, d time.Duration) []byte {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal(config, &cfg); err != nil {
		t.Fatal(err)
	}
	set := 0
	for _, p := range cfg["profiles"].([]any) {
		for _, pc := range p.(map[string]any)["pluginConfig"].([]any) {
			pc := pc.(map[string]any)
			if name := pc["name"]; name == nodepids.Name || name == nodeips.Name {
				pc["args"].(map[string]any)["maxSampleAge"] = d.String()
				set++
			}
		}
	}
	if set != 2 {
		t.Fatalf("the config has %d pluginConfig entries for NodePIDs and NodeIPs, want 2", set)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
