package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/nodepids"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// TestInvalidAnnotationsWhatTheOperatorSees runs headroom-scheduler with
// the shipped config and identity on nodes and pods carrying each kind of
// bad headroom.dev/ annotation, and checks the three things an operator
// sees for each: a Warning Event on the object, a log line at the default
// verbosity, and headroom_invalid_annotations_total on /metrics. Every pod
// is still scheduled: bad input is ignored, never fatal.
func TestInvalidAnnotationsWhatTheOperatorSees(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	at := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	good := map[string]string{pidstats.AnnotationCapacity: "32768", pidstats.AnnotationUsed: "1000", pidstats.AnnotationSampledAt: at}
	with := func(kv ...string) map[string]string {
		a := map[string]string{}
		for k, v := range good {
			a[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "<absent>" {
				delete(a, kv[i])
			} else {
				a[kv[i]] = kv[i+1]
			}
		}
		return a
	}
	uid := "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
	nodes := []struct {
		name, key string
		ann       map[string]string
		note      string // in the Event and the log line
	}{
		{"capacity-above-2-22", pidstats.AnnotationCapacity, with(pidstats.AnnotationCapacity, "4194305"),
			`annotation headroom.dev/pid-capacity="4194305": above 4194304, the most PIDs a Linux node can have`},
		{"capacity-not-a-number", pidstats.AnnotationCapacity, with(pidstats.AnnotationCapacity, "32Ki"),
			`annotation headroom.dev/pid-capacity="32Ki": not a base-10 integer`},
		{"used-negative", pidstats.AnnotationUsed, with(pidstats.AnnotationUsed, "-1"),
			`annotation headroom.dev/pid-used="-1": must not be negative`},
		{"used-above-capacity", pidstats.AnnotationUsed, with(pidstats.AnnotationUsed, "40000"),
			`annotation headroom.dev/pid-used="40000": exceeds headroom.dev/pid-capacity 32768`},
		{"used-missing", pidstats.AnnotationUsed, with(pidstats.AnnotationUsed, "<absent>"),
			`annotation headroom.dev/pid-used="": missing while other PID annotations are present`},
		{"sampled-at-not-a-time", pidstats.AnnotationSampledAt, with(pidstats.AnnotationSampledAt, "yesterday"),
			`annotation headroom.dev/pid-sampled-at="yesterday": not an RFC 3339 time`},
		{"sampled-at-future", pidstats.AnnotationSampledAt, with(pidstats.AnnotationSampledAt, "2999-01-01T00:00:00Z"),
			`annotation headroom.dev/pid-sampled-at="2999-01-01T00:00:00Z": more than 1m0s in the future`},
		{"pid-pods-above-2-22", pidstats.AnnotationPIDPods, with(pidstats.AnnotationPIDPods, uid+"=4194305"),
			`entry 1: PIDs "4194305" is not an integer in [0, 4194304]`},
	}
	for _, n := range nodes {
		if _, err := cp.CreateNode(ctx, n.name, resources("64", "256Gi", "110"), n.ann); err != nil {
			t.Fatal(err)
		}
	}
	proc, err := cp.StartScheduler(ctx, repoFile(t, shippedSchedulerConfig))
	if err != nil {
		t.Fatal(err)
	}

	// Every node's PID headroom is unknown here, so every pod binds: even
	// the two that count as the most a pod can hold (failing closed) pass
	// a node whose headroom NodePIDs cannot judge.
	pods := []struct {
		name, value, note string
	}{
		{"pids-above-2-22", "4194305", `annotation headroom.dev/pids="4194305" is above the maximum of 4194304; counting 4194304 PIDs`},
		{"pids-negative", "-5", `annotation headroom.dev/pids="-5" is not a base-10 integer in [0, 4194304]`},
		{"pids-quantity", "1k", `annotation headroom.dev/pids="1k" is not a base-10 integer in [0, 4194304]`},
		{"pids-overflow", "99999999999999999999", `annotation headroom.dev/pids="99999999999999999999" is above the maximum of 4194304; counting 4194304 PIDs`},
	}
	for _, p := range pods {
		pod := newPod(p.name, "headroom-scheduler", map[string]string{pidstats.AnnotationPodPIDs: p.value}, nil, nil)
		if _, err := cp.Client.CoreV1().Pods(metav1.NamespaceDefault).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range pods {
		waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, p.name)
	}

	// Events are sent asynchronously: wait for the last of them.
	warning := func(name, reason string) string {
		var note string
		_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			evs, err := cp.Client.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
			if err != nil {
				return false, err
			}
			for _, e := range evs.Items {
				if e.Type == corev1.EventTypeWarning && e.Reason == reason {
					note = e.Message
					return true, nil
				}
			}
			return false, nil
		})
		return note
	}
	log := proc.Log(4 << 20)
	metrics := scrapeScheduler(ctx, t, cp, proc)
	count := map[string]int{}
	for _, n := range nodes {
		count[n.key]++
		t.Run("node "+n.name, func(t *testing.T) {
			if note := warning(n.name, nodepids.EventReasonInvalidNodePIDs); !strings.Contains(note, n.note) {
				t.Errorf("Warning Event %s on the Node: %q, want it to say %q", nodepids.EventReasonInvalidNodePIDs, note, n.note)
			}
			line := grepLines(log, `node="`+n.name+`"`)
			if !strings.Contains(line, `annotation="`+n.key+`"`) || !strings.Contains(line, strconv.Quote(n.note)[1:len(strconv.Quote(n.note))-1]) {
				t.Errorf("no log line naming %s and saying %q; the node's lines:\n%s", n.key, n.note, line)
			}
		})
	}
	for _, p := range pods {
		count[pidstats.AnnotationPodPIDs]++
		t.Run("pod "+p.name, func(t *testing.T) {
			if note := warning(p.name, nodepids.EventReasonInvalidPIDs); !strings.Contains(note, p.note) {
				t.Errorf("Warning Event %s on the Pod: %q, want it to say %q", nodepids.EventReasonInvalidPIDs, note, p.note)
			}
			if line := grepLines(log, `pod="default/`+p.name+`"`); !strings.Contains(line, "Malformed PIDs annotation on pod") {
				t.Errorf("no log line about the pod's annotation; its lines:\n%s", line)
			}
		})
	}
	for key, want := range count {
		series := fmt.Sprintf(`headroom_invalid_annotations_total{annotation=%q,plugin="NodePIDs"}`, key)
		m := regexp.MustCompile(regexp.QuoteMeta(series) + ` (\d+)`).FindStringSubmatch(metrics)
		if m == nil {
			t.Errorf("/metrics lacks %s", series)
			continue
		}
		// A pod is counted once per scheduling attempt; each was scheduled
		// at its first.
		if got, _ := strconv.Atoi(m[1]); got != want {
			t.Errorf("%s %d, want %d", series, got, want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", grepLines(metrics, "headroom_"))
	}
}

// scrapeScheduler returns the scheduler's /metrics, read as the admin
// (the scheduler authorizes /metrics through the API server).
func scrapeScheduler(ctx context.Context, t *testing.T, cp *controlplane.ControlPlane, p *controlplane.Process) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+strconv.Itoa(p.Port)+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+cp.Config.BearerToken)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	return string(body)
}
