package app

import (
	"strings"
	"testing"
)

const podYAML = `apiVersion: v1
kind: Pod
metadata:
  name: new
spec:
  containers:
  - name: app
    image: app
    resources:
      requests:
        memory: 512Mi
      limits:
        memory: 2Gi
`

func TestExplainNode(t *testing.T) {
	pod := writeFile(t, "pod.yaml", podYAML)
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"figures", []string{"explain", "node", "short"}, []string{
			"PIDs (NodePIDs):\ncapacity 4096, reserved 96, allocatable 4000\nused 3000 when sampled",
			"estimated used 3500 (+500 for pods placed since the sample, 100 PIDs each without headroom.dev/pids), free 500",
			"pod IPs (NodeIPs):\ncapacity 13, used 10 when sampled",
			"leaked 2 of the used (allocated to no pod sandbox of the node; they count as used until freed)\nestimated used 13 (+3 for pods on the pod network placed since the sample), free 0, floor 0",
			"memory (OOMRisk):\nnode short: capacity 16Gi, allocatable 16Gi, worst case 21Gi, shortfall 5Gi, at risk 12Gi",
		}},
		// 500 free less the pod's default 100 is below max(512, 5 %).
		{"short node fails Filter", []string{"explain", "node", "short", "--pod-file", pod}, []string{
			"pod default/new: 100 PIDs",
			"Filter: fails: NodePIDs: node(s) had too few free PIDs",
			"nodes that pass Filter: 3 of 4",
			"score: none, the node fails Filter",
		}},
		// The only node that passes (blank and broken have no memory
		// figures, but NodePIDs lets unknown nodes pass; roomy is the only
		// one with known PIDs) scores 100 on both plugins.
		{"roomy node", []string{"explain", "node", "roomy", "--pod-file", pod}, []string{
			"Filter: passes",
			"nodes that pass Filter: 3 of 4",
			"Score: NodePIDs 100 × weight 1 + OOMRisk 100 × weight 2 = 300; rank 1 of 3 (best: roomy, 300)",
			"score 100 of 100: own risk 0 ppm × weight 3, collateral 0 ppm × weight 1",
		}},
		// A bound pod is scheduled as if it were not there: forker's 500
		// PIDs leave short's estimate, and it still does not fit back
		// (1000 free less 500 is under the floor of 512).
		{"bound pod", []string{"explain", "node", "short", "--pod", "forker"}, []string{
			"estimated used 3000 (+0 for pods placed since the sample",
			"estimated used 12 (+2 for pods on the pod network placed since the sample), free 1",
			"free 1000",
			"worst case 20Gi, shortfall 4Gi",
			"pod default/forker: 500 PIDs",
			"Filter: fails: NodePIDs: node(s) had too few free PIDs",
		}},
		{"namespace flag", []string{"explain", "node", "roomy", "--pod-file", pod, "-n", "team"}, []string{"pod team/new: 100 PIDs"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t, headroomCluster(), tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("kubectl headroom %v:\n%s", tc.args, out)
			for _, want := range tc.want {
				if !strings.Contains(out, want) {
					t.Errorf("output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}

// TestExplainNodeConfig: a KubeSchedulerConfiguration with a lower PID floor
// lets the short node pass, and its weights are the ones shown.
func TestExplainNodeConfig(t *testing.T) {
	pod := writeFile(t, "pod.yaml", podYAML)
	cfg := writeFile(t, "config.yaml", `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: lenient
  plugins:
    multiPoint:
      enabled:
      - name: NodePIDs
        weight: 3
  pluginConfig:
  - name: NodePIDs
    args:
      minFreePIDs: 100
      minFreePercent: 0
`)
	out, err := run(t, headroomCluster(), "explain", "node", "short", "--pod-file", pod, "--config", cfg, "--scheduler-name", "lenient")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Filter: passes", "NodePIDs ", "× weight 3", "memory (OOMRisk, not enabled in the profile)", "score: none, OOMRisk is not a score plugin of the profile"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// A profile that disables NodePIDs' Filter: the short node passes with
	// the default floor.
	noFilter := writeFile(t, "no-filter.yaml", `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: headroom-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: NodePIDs
    filter:
      disabled:
      - name: NodePIDs
`)
	out, err = run(t, headroomCluster(), "explain", "node", "short", "--pod-file", pod, "--config", noFilter)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "Filter: passes") || !strings.Contains(out, "nodes that pass Filter: 4 of 4") {
		t.Errorf("with NodePIDs' Filter disabled, every node must pass:\n%s", out)
	}
	if _, err := run(t, headroomCluster(), "explain", "node", "short", "--config", cfg, "--scheduler-name", "other"); err == nil ||
		!strings.Contains(err.Error(), `no profile with schedulerName "other"`) {
		t.Errorf("unknown profile: error %v", err)
	}
}

func TestExplainNodeErrors(t *testing.T) {
	notAPod := writeFile(t, "svc.yaml", "apiVersion: v1\nkind: Service\nmetadata:\n  name: svc\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "node"}, "accepts 1 arg(s)"},
		{[]string{"explain", "node", "nowhere"}, `node "nowhere" not found`},
		{[]string{"explain", "node", "short", "--pod-file", notAPod}, "want a Pod"},
		{[]string{"explain", "node", "short", "--config", notAPod}, "svc.yaml"},
		{[]string{"explain", "node", "short", "--pod", "nope"}, `pods "nope" not found`},
		{[]string{"explain", "node", "short", "--pod", "web", "--pod-file", notAPod}, "give one"},
	} {
		if _, err := run(t, headroomCluster(), tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.args, err, tc.want)
		}
	}
}
