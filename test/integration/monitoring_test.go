package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	schedmetrics "k8s.io/kubernetes/pkg/scheduler/metrics"
	deschedulermetrics "sigs.k8s.io/descheduler/metrics"
	"sigs.k8s.io/yaml"

	headroommetrics "github.com/headroom-k8s/headroom/pkg/metrics"
	"github.com/headroom-k8s/headroom/pkg/nodeagent"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

const (
	rulesFile     = "manifests/monitoring/prometheus-rules.yaml"
	rulesTestFile = "test/prometheus/rules-test.yaml"
	dashboardFile = "manifests/grafana/headroom-dashboard.json"
)

// TestPrometheusRules checks the shipped alerting rules with promtool
// (bin/promtool, built from Prometheus' module by hack/build-tools.sh) and
// runs their unit tests, test/prometheus/rules-test.yaml: each alert fires
// on its series, at its time, with its labels and annotations, and not on
// a healthy neighbour.
func TestPrometheusRules(t *testing.T) {
	promtool := filepath.Join(controlplane.DefaultBinDir(), "promtool")
	for _, args := range [][]string{
		{"check", "rules", repoPath(t, rulesFile)},
		{"test", "rules", repoPath(t, rulesTestFile)},
	} {
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args[:2], " "), err, out)
		}
	}
}

// registeredMetricNames returns the name of every metric Headroom's
// binaries serve: those its code and kube-scheduler's and the descheduler's
// register in legacyregistry (the scheduler's and descheduler's /metrics),
// and the node agent's registry, each by its descriptors, so that a vector
// without samples yet counts too.
func registeredMetricNames(t *testing.T) map[string]bool {
	t.Helper()
	// What headroom-scheduler and headroom-descheduler register.
	headroommetrics.Register()
	schedmetrics.Register()
	deschedulermetrics.Register()
	relievenodepressure.RegisterMetrics()

	// The scheduler's queue gauges are unexported vectors: their exported
	// accessors give them a sample (0), so that they are gathered
	// (ActivePods, which every minor has; its recorder was renamed in 1.37).
	schedmetrics.ActivePods().Set(0)
	schedmetrics.UnschedulableReason("NodePIDs", "headroom-scheduler").Set(0)

	names := map[string]bool{}
	fams, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		names[f.GetName()] = true
	}
	// Vectors without samples are not gathered: their descriptors name them.
	var descs []*prometheus.Desc
	for _, c := range []prometheus.Collector{
		headroommetrics.InvalidAnnotations, headroommetrics.Nodes,
		relievenodepressure.NodesTotal, relievenodepressure.EventsDroppedTotal, relievenodepressure.EvictionsTotal,
		relievenodepressure.BudgetExhaustedTotal,
		deschedulermetrics.PodsEvictedTotal, deschedulermetrics.LoopDuration, deschedulermetrics.StrategyDuration,
		schedmetrics.PluginExecutionDuration,
	} {
		descs = append(descs, describe(c)...)
	}
	descs = append(descs, nodeagent.NewMetrics().Descs()...)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, d := range descs {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("no fqName in %s", d)
		}
		names[m[1]] = true
	}
	return names
}

func describe(c prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	var descs []*prometheus.Desc
	for d := range ch {
		descs = append(descs, d)
	}
	return descs
}

// promqlKeywords are the words of PromQL that are not metric names.
var promqlKeywords = map[string]bool{
	"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true, "ignoring": true,
	"group_left": true, "group_right": true, "bool": true, "offset": true, "inf": true, "nan": true,
}

// metricNamesIn returns the metric names a PromQL expression selects:
// identifiers that are not functions (followed by "("), keywords, label
// names of a matcher or grouping, strings, durations or numbers.
func metricNamesIn(expr string) []string {
	s := regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`).ReplaceAllString(expr, `""`) // strings
	s = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(s, " ")                                // matchers
	s = regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(s, " ")                               // ranges
	s = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`).ReplaceAllString(s, " ")
	var names []string
	for _, m := range regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`).FindAllString(s, -1) {
		if strings.HasSuffix(m, "(") || promqlKeywords[strings.ToLower(m)] {
			continue
		}
		names = append(names, m)
	}
	return names
}

// knownMetric reports whether name is a registered metric, or a series of
// a registered histogram or summary (_bucket, _sum, _count).
func knownMetric(names map[string]bool, name string) bool {
	if names[name] {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && names[base] {
			return true
		}
	}
	return false
}

// externalMetrics are the series rules and dashboard use that no Headroom
// binary serves, each for a reason the code's own metrics cannot give:
// Prometheus' up tells a component that is down (its own metrics are then
// gone); kube-state-metrics tells pods that no scheduler took, the agents
// the DaemonSet should run, each agent pod's node (the agents' series name
// only their pod), and the descheduler's CronJob runs, which are never
// scraped. Only these names are allowed beyond the registered ones.
var externalMetrics = map[string]string{
	"up":                    "Prometheus, per scrape target",
	"kube_pod_info":         "kube-state-metrics",
	"kube_pod_created":      "kube-state-metrics",
	"kube_pod_scheduler":    "kube-state-metrics",
	"kube_pod_status_phase": "kube-state-metrics",
	"kube_daemonset_status_desired_number_scheduled": "kube-state-metrics",
	"kube_cronjob_next_schedule_time":                "kube-state-metrics",
	"kube_cronjob_spec_suspend":                      "kube-state-metrics",
	"kube_cronjob_status_last_schedule_time":         "kube-state-metrics",
	"kube_cronjob_status_last_successful_time":       "kube-state-metrics",
	"kube_job_status_failed":                         "kube-state-metrics",
	"kube_job_status_start_time":                     "kube-state-metrics",
}

// dashboardVariableQuery returns the selector of a template variable's
// label_values(selector, label) query, or "" for other variables.
func dashboardVariableQuery(query any) string {
	if q, ok := query.(map[string]any); ok {
		query = q["query"]
	}
	s, _ := query.(string)
	if m := regexp.MustCompile(`^label_values\((.*),\s*\w+\)$`).FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return ""
}

// TestDashboardAndRulesUseRegisteredMetrics holds the Grafana dashboard's
// queries (panels and template variables) and the alerting rules'
// expressions to the metrics the code registers, and externalMetrics: a
// metric renamed or dropped in the code, or misspelt in a query, fails
// here.
func TestDashboardAndRulesUseRegisteredMetrics(t *testing.T) {
	names := registeredMetricNames(t)
	for name := range externalMetrics {
		if names[name] {
			t.Errorf("%s is registered by Headroom's binaries: drop it from externalMetrics", name)
		}
		names[name] = true
	}
	exprs := map[string]string{} // where -> expression

	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Record, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(repoFile(t, rulesFile), &rules); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs[rulesFile+" "+r.Alert+r.Record] = r.Expr
		}
	}
	var dashboard struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
		Templating struct {
			List []struct {
				Name, Type string
				Query      any
			}
		}
	}
	if err := json.Unmarshal(repoFile(t, dashboardFile), &dashboard); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	for _, p := range dashboard.Panels {
		for i, tg := range p.Targets {
			exprs[dashboardFile+" "+p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	for _, v := range dashboard.Templating.List {
		if v.Type != "query" {
			continue
		}
		sel := dashboardVariableQuery(v.Query)
		if sel == "" {
			t.Errorf("%s: variable %s: query %v is not label_values(selector, label)", dashboardFile, v.Name, v.Query)
			continue
		}
		exprs[dashboardFile+" variable "+v.Name] = sel
	}

	used := map[string]bool{}
	for where, expr := range exprs {
		found := metricNamesIn(expr)
		if len(found) == 0 {
			t.Errorf("%s: no metric in %q", where, expr)
		}
		for _, name := range found {
			used[name] = true
			if !knownMetric(names, name) {
				t.Errorf("%s: %s is not a metric Headroom's binaries register (expression %q)", where, name, expr)
			}
		}
	}
	// Every alert the issue asks for is there, on the metric it is about.
	for _, want := range []string{"headroom_nodes", "headroom_node_agent_write_failures_total",
		"headroom_relieve_node_pressure_nodes_total", "descheduler_pods_evicted_total",
		"headroom_relieve_node_pressure_evictions_total", "scheduler_plugin_execution_duration_seconds_bucket",
		"scheduler_pending_pods", "scheduler_unschedulable_pods", "up", "kube_pod_scheduler",
		"kube_daemonset_status_desired_number_scheduled", "kube_cronjob_next_schedule_time", "kube_job_status_failed"} {
		if !used[want] {
			t.Errorf("no rule or panel uses %s", want)
		}
	}
	t.Logf("%d expressions use %v", len(exprs), slices.Sorted(func(yield func(string) bool) {
		for n := range used {
			if !yield(n) {
				return
			}
		}
	}))
}

// TestMetricNamesInPromQL holds the extraction the test above relies on.
func TestMetricNamesInPromQL(t *testing.T) {
	for expr, want := range map[string][]string{
		`max by (plugin, profile) (headroom_nodes{state="stale"}) > 0`:                                            {"headroom_nodes"},
		`increase(a_total[15m]) > 0 and increase(b_total{x="by (y)"}[15m]) == 0`:                                  {"a_total", "b_total"},
		`sum without (le) (rate(h_bucket[5m])) / on (instance) group_left(node) c`:                                {"h_bucket", "c"},
		`headroom_node_agent_pids_used / (headroom_node_agent_pids_capacity - headroom_node_agent_pids_reserved)`: {"headroom_node_agent_pids_used", "headroom_node_agent_pids_capacity", "headroom_node_agent_pids_reserved"},
	} {
		if got := metricNamesIn(expr); !slices.Equal(got, want) {
			t.Errorf("metricNamesIn(%q) = %v, want %v", expr, got, want)
		}
	}
}

// TestChartMonitoring renders the chart's Prometheus Operator objects and
// the Grafana dashboard: none by default; with them on, a ServiceMonitor and
// a PodMonitor per component that serves /metrics, each selecting a
// rendered Service (or pod template) with a port named metrics; the
// PrometheusRule's spec is the shipped rule file; the dashboard ConfigMap
// holds the shipped JSON byte for byte under Grafana's sidecar label.
func TestChartMonitoring(t *testing.T) {
	monitoringKinds := []string{"ServiceMonitor", "PodMonitor", "PrometheusRule"}
	for key := range renderChart(t) {
		for _, k := range monitoringKinds {
			if strings.HasPrefix(key, k+" ") {
				t.Errorf("default values render %s", key)
			}
		}
		if strings.Contains(key, "grafana") {
			t.Errorf("default values render %s", key)
		}
	}

	values := valuesFile(t, `
metrics:
  serviceMonitor: {enabled: true, labels: {release: prom}, interval: 30s}
  podMonitor:
    enabled: true
    authorization: {type: Bearer, credentials: {name: prometheus-token, key: token}}
prometheusRule: {enabled: true, labels: {release: prom}}
grafanaDashboard: {enabled: true, namespace: grafana}
`)
	for mode, want := range map[string][]string{
		"cronJob":    {"headroom-node-agent", "headroom-scheduler"},
		"deployment": {"headroom-descheduler", "headroom-node-agent", "headroom-scheduler"},
	} {
		t.Run(mode, func(t *testing.T) {
			objs := renderChart(t, "-f", values, "--set", "descheduler.mode="+mode)
			for _, kind := range []string{"ServiceMonitor", "PodMonitor"} {
				var got []string
				for key, o := range objs {
					if o["kind"] != kind {
						continue
					}
					md := o["metadata"].(map[string]any)
					got = append(got, md["name"].(string))
					if kind == "ServiceMonitor" && md["labels"].(map[string]any)["release"] != "prom" {
						t.Errorf("%s: labels %v lack release: prom", key, md["labels"])
					}
					spec := o["spec"].(map[string]any)
					sel := spec["selector"].(map[string]any)["matchLabels"].(map[string]any)
					endpoints, _ := spec["endpoints"].([]any)
					if kind == "PodMonitor" {
						endpoints, _ = spec["podMetricsEndpoints"].([]any)
					}
					if len(endpoints) != 1 {
						t.Fatalf("%s: endpoints %v", key, endpoints)
					}
					ep := endpoints[0].(map[string]any)
					if ep["port"] != "metrics" || ep["scheme"] != "https" || ep["path"] != "/metrics" {
						t.Errorf("%s: endpoint %v", key, ep)
					}
					if kind == "PodMonitor" && show(ep["authorization"]) != `{"credentials":{"key":"token","name":"prometheus-token"},"type":"Bearer"}` {
						t.Errorf("%s: authorization %s", key, show(ep["authorization"]))
					}
					// No authorization given: the chart's reader token, never
					// the deprecated bearerTokenFile.
					if kind == "ServiceMonitor" && (ep["interval"] != "30s" || ep["bearerTokenFile"] != nil ||
						show(ep["authorization"]) != `{"credentials":{"key":"token","name":"headroom-metrics-reader"},"type":"Bearer"}`) {
						t.Errorf("%s: endpoint %v", key, ep)
					}
					if !selectsMetricsPort(t, objs, kind, sel) {
						t.Errorf("%s selects %v: no rendered %s has a port named metrics", key, sel, map[string]string{"ServiceMonitor": "Service", "PodMonitor": "pod template"}[kind])
					}
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Errorf("%ss %v, want %v", kind, got, want)
				}
			}
		})
	}

	objs := renderChart(t, "-f", values)
	rule, ok := objs["PrometheusRule "+chartNS+"/headroom"]
	if !ok {
		t.Fatalf("no PrometheusRule headroom: %v", keysOf(objs))
	}
	var want map[string]any
	if err := yaml.Unmarshal(repoFile(t, rulesFile), &want); err != nil {
		t.Fatal(err)
	}
	for _, d := range fieldDiffs("spec", want, rule["spec"]) {
		t.Errorf("PrometheusRule: %s", d)
	}
	cm, ok := objs["ConfigMap grafana/headroom-grafana-dashboard"]
	if !ok {
		t.Fatalf("no ConfigMap grafana/headroom-grafana-dashboard: %v", keysOf(objs))
	}
	md := cm["metadata"].(map[string]any)
	if md["labels"].(map[string]any)["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v", md["labels"])
	}
	if got := cm["data"].(map[string]any)["headroom-dashboard.json"]; got != string(repoFile(t, dashboardFile)) {
		t.Errorf("the dashboard ConfigMap differs from %s", dashboardFile)
	}
}

// selectsMetricsPort reports whether a ServiceMonitor's selector matches a
// rendered Service with a port named metrics, or a PodMonitor's a pod
// template with a container port named metrics.
func selectsMetricsPort(t *testing.T, objs map[string]object, kind string, sel map[string]any) bool {
	t.Helper()
	matches := func(labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return true
	}
	if kind == "ServiceMonitor" {
		for key, o := range objs {
			if o["kind"] != "Service" {
				continue
			}
			svc := decodeTyped[*corev1.Service](t, objs, key)
			if !matches(svc.Labels) {
				continue
			}
			for _, p := range svc.Spec.Ports {
				if p.Name == "metrics" {
					return true
				}
			}
		}
		return false
	}
	for _, pt := range podTemplates(t, objs) {
		if !matches(pt.Labels) {
			continue
		}
		for _, c := range pt.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name == "metrics" {
					return true
				}
			}
		}
	}
	return false
}

const troubleshootingFile = "docs/troubleshooting.md"

// runbookBase is where the shipped alerts' runbooks live: the
// troubleshooting page at the release's tag (the chart's appVersion, the
// images' tag), so that a runbook matches the alerts of its release.
func runbookBase(t *testing.T) string {
	return "https://github.com/headroom-k8s/headroom/blob/" + chartAppVersion(t) + "/" + troubleshootingFile
}

// markdownAnchors returns the anchors GitHub gives a Markdown file's
// headings: lower case, spaces to hyphens, other punctuation dropped.
func markdownAnchors(doc string) map[string]bool {
	anchors := map[string]bool{}
	for _, line := range strings.Split(doc, "\n") {
		title, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if !strings.HasPrefix(line, "#") || !ok {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(title) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
				b.WriteRune(r)
			}
		}
		anchors[b.String()] = true
	}
	return anchors
}

// TestMonitoringAlertsHaveRunbooksAndTests holds every alert to a
// runbook_url that points at its own section of docs/troubleshooting.md,
// and to a promtool test in which it fires; the alerts on the
// descheduler's own metrics stay in the group of its deployment mode, the
// only one whose runs are scraped. Links inside the runbook page resolve.
func TestMonitoringAlertsHaveRunbooksAndTests(t *testing.T) {
	var rules struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert, Expr string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(repoFile(t, rulesFile), &rules); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string
				ExpAlerts []any `json:"exp_alerts"`
			} `json:"alert_rule_test"`
		}
	}
	if err := yaml.Unmarshal(repoFile(t, rulesTestFile), &tests); err != nil {
		t.Fatalf("%s: %v", rulesTestFile, err)
	}
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	doc := string(repoFile(t, troubleshootingFile))
	anchors := markdownAnchors(doc)

	alerts := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue
			}
			alerts++
			if want := runbookBase(t) + "#" + strings.ToLower(r.Alert); r.Annotations["runbook_url"] != want {
				t.Errorf("%s: runbook_url %q, want %q", r.Alert, r.Annotations["runbook_url"], want)
			}
			if !anchors[strings.ToLower(r.Alert)] {
				t.Errorf("%s: %s has no section %q", r.Alert, troubleshootingFile, "### "+r.Alert)
			}
			if !fires[r.Alert] {
				t.Errorf("%s: no test in %s where it fires", r.Alert, rulesTestFile)
			}
			for _, name := range metricNamesIn(r.Expr) {
				fromDescheduler := strings.HasPrefix(name, "descheduler_") || strings.HasPrefix(name, "headroom_relieve_node_pressure_")
				if fromDescheduler && g.Name != "headroom-descheduler-deployment" {
					t.Errorf("%s (group %s) uses %s, which only the descheduler's deployment mode serves to a scrape", r.Alert, g.Name, name)
				}
			}
		}
	}
	if alerts == 0 {
		t.Fatalf("no alert in %s", rulesFile)
	}
	for _, m := range regexp.MustCompile(`\]\(#([^)]+)\)`).FindAllStringSubmatch(doc, -1) {
		if !anchors[m[1]] {
			t.Errorf("%s: link #%s names no heading", troubleshootingFile, m[1])
		}
	}
}

// renderedRules renders the chart's PrometheusRule with values and writes
// its spec to a rule file of its own, which it returns with the spec.
func renderedRules(t *testing.T, values string) (path string, spec map[string]any) {
	t.Helper()
	objs := renderChart(t, "-f", valuesFile(t, "prometheusRule: {enabled: true}\n"), "-f", valuesFile(t, values))
	rule, ok := objs["PrometheusRule "+chartNS+"/headroom"]
	if !ok {
		t.Fatalf("no PrometheusRule headroom: %v", keysOf(objs))
	}
	spec = rule["spec"].(map[string]any)
	data, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, spec
}

// renderedAlerts indexes a rule spec's alerts by name.
func renderedAlerts(t *testing.T, spec map[string]any) (alerts map[string]map[string]any, groups []string) {
	t.Helper()
	alerts = map[string]map[string]any{}
	for _, g := range spec["groups"].([]any) {
		g := g.(map[string]any)
		groups = append(groups, g["name"].(string))
		for _, r := range g["rules"].([]any) {
			r := r.(map[string]any)
			if name, ok := r["alert"].(string); ok {
				alerts[name] = r
			}
		}
	}
	return alerts, groups
}

// promtool runs bin/promtool with args in dir and fails the test on an
// error.
func promtool(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(controlplane.DefaultBinDir(), "promtool"), args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestChartPrometheusRuleValues renders the PrometheusRule with each alert
// value changed and checks the result with promtool: the rendered defaults
// pass every test of test/prometheus/rules-test.yaml; a disabled alert is
// gone (and a group left without alerts too); a changed threshold, for and
// severity are in the expression, the rule and the annotations that state
// them, and the alert fires at the new threshold and not at the old one;
// runbook_url follows runbookBaseURL; additionalRuleLabels join every
// alert's labels without replacing its severity.
func TestChartPrometheusRuleValues(t *testing.T) {
	t.Run("defaults pass the promtool tests", func(t *testing.T) {
		rules, _ := renderedRules(t, "{}")
		tests := strings.Replace(string(repoFile(t, rulesTestFile)),
			"- ../../manifests/monitoring/prometheus-rules.yaml", "- "+rules, 1)
		if !strings.Contains(tests, rules) {
			t.Fatalf("%s names no ../../%s", rulesTestFile, rulesFile)
		}
		dir := filepath.Dir(rules)
		if err := os.WriteFile(filepath.Join(dir, "rules-test.yaml"), []byte(tests), 0o644); err != nil {
			t.Fatal(err)
		}
		promtool(t, dir, "test", "rules", "rules-test.yaml")
	})

	// Every shipped alert, and only those, has its values.
	var values struct {
		PrometheusRule struct {
			Alerts map[string]any
		} `json:"prometheusRule"`
	}
	if err := yaml.Unmarshal(repoFile(t, filepath.Join(chartDir, "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	_, defaults := renderedRules(t, "{}")
	shipped, _ := renderedAlerts(t, defaults)
	var got, want []string
	for name := range values.PrometheusRule.Alerts {
		got = append(got, name)
	}
	for name := range shipped {
		want = append(want, name)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("values.yaml prometheusRule.alerts has %v, the shipped alerts are %v", got, want)
	}

	rules, spec := renderedRules(t, `
prometheusRule:
  runbookBaseURL: https://wiki.example.com/headroom/runbooks
  additionalRuleLabels: {team: platform, severity: none}
  alerts:
    HeadroomEvictionsHigh: {threshold: 250, for: 30m, severity: critical}
    HeadroomSchedulerPodsPending: {threshold: 1800}
    HeadroomNodeSamplesStale: {for: 1h}
    HeadroomNodeAgentWriteFailures: {enabled: false}
    HeadroomDeschedulerCronJobLate: {enabled: false}
    HeadroomDeschedulerRunsFailing: {enabled: false}
    HeadroomDeschedulerJobsFailed: {enabled: false}
`)
	promtool(t, filepath.Dir(rules), "check", "rules", rules)
	alerts, groups := renderedAlerts(t, spec)
	for _, gone := range []string{"HeadroomNodeAgentWriteFailures", "HeadroomDeschedulerJobsFailed"} {
		if _, ok := alerts[gone]; ok {
			t.Errorf("%s disabled, but rendered", gone)
		}
	}
	if slices.Contains(groups, "headroom-descheduler-cronjob") {
		t.Errorf("groups %v: headroom-descheduler-cronjob has no alert left, but is rendered", groups)
	}
	if len(alerts) != 10 {
		t.Errorf("%d alerts rendered, want the 14 shipped less 4 disabled", len(alerts))
	}

	high := alerts["HeadroomEvictionsHigh"]
	ann := high["annotations"].(map[string]any)
	if !strings.HasSuffix(high["expr"].(string), "[1h])) > 250") || high["for"] != "30m" ||
		!strings.HasPrefix(ann["description"].(string), "More than 250 evictions an hour") {
		t.Errorf("HeadroomEvictionsHigh: expr %q, for %v, description %q: want threshold 250, for 30m", high["expr"], high["for"], ann["description"])
	}
	pending := alerts["HeadroomSchedulerPodsPending"]
	if d := pending["annotations"].(map[string]any)["description"].(string); !strings.Contains(pending["expr"].(string), "(time() - kube_pod_created) > 1800") ||
		!strings.Contains(d, "created over 1800 seconds ago") {
		t.Errorf("HeadroomSchedulerPodsPending: expr %q, description %q: want threshold 1800", pending["expr"], d)
	}
	stale := alerts["HeadroomNodeSamplesStale"]
	if d := stale["annotations"].(map[string]any)["description"].(string); stale["for"] != "1h" || !strings.Contains(d, "for 1h:") || strings.Contains(d, "15 minutes") {
		t.Errorf("HeadroomNodeSamplesStale: for %v, description %q: want for 1h", stale["for"], d)
	}
	for name, r := range alerts {
		labels := r["labels"].(map[string]any)
		wantSeverity := map[string]string{"HeadroomEvictionsHigh": "critical", "HeadroomSchedulerDown": "critical", "HeadroomNodeAgentsDown": "critical"}[name]
		if wantSeverity == "" {
			wantSeverity = "warning"
		}
		if labels["team"] != "platform" || labels["severity"] != wantSeverity {
			t.Errorf("%s: labels %v, want team platform, severity %s", name, labels, wantSeverity)
		}
		if got, want := r["annotations"].(map[string]any)["runbook_url"], "https://wiki.example.com/headroom/runbooks#"+strings.ToLower(name); got != want {
			t.Errorf("%s: runbook_url %v, want %s", name, got, want)
		}
	}

	// The CronJob group's thresholds, in their expressions.
	cronRules, cronSpec := renderedRules(t, `
prometheusRule:
  alerts:
    HeadroomDeschedulerCronJobLate: {threshold: 1800}
    HeadroomDeschedulerJobsFailed: {threshold: 5}
`)
	promtool(t, filepath.Dir(cronRules), "check", "rules", cronRules)
	cron, _ := renderedAlerts(t, cronSpec)
	if expr := cron["HeadroomDeschedulerCronJobLate"]["expr"].(string); !strings.Contains(expr, `{cronjob="headroom-descheduler"}) > 1800`) {
		t.Errorf("HeadroomDeschedulerCronJobLate: expr %q: want threshold 1800", expr)
	}
	if expr := cron["HeadroomDeschedulerJobsFailed"]["expr"].(string); !strings.HasSuffix(expr, ") >= 5") {
		t.Errorf("HeadroomDeschedulerJobsFailed: expr %q: want threshold 5", expr)
	}

	// 180 successful evictions an hour (3 a minute): the shipped 100 fires,
	// the rendered 250 does not; 300 an hour fires after its 30 minutes.
	tests := `rule_files: [` + rules + `]
evaluation_interval: 1m
tests:
- interval: 1m
  input_series:
  - series: 'descheduler_pods_evicted_total{result="success",node="n1"}'
    values: '0+3x240'
  alert_rule_test:
  - {eval_time: 3h, alertname: HeadroomEvictionsHigh, exp_alerts: []}
- interval: 1m
  input_series:
  - series: 'descheduler_pods_evicted_total{result="success",node="n1"}'
    values: '0+5x240'
  alert_rule_test:
  - {eval_time: 80m, alertname: HeadroomEvictionsHigh, exp_alerts: []}
  - eval_time: 100m
    alertname: HeadroomEvictionsHigh
    exp_alerts:
    - exp_labels: {severity: critical, team: platform}
      exp_annotations:
        summary: The descheduler evicted 300 pods in the last hour
        description: >-
          More than 250 evictions an hour: a workload that keeps filling its nodes, or
          thresholds that leave too little room between the scheduler's floor and the
          descheduler's target. Deployment mode only: the CronJob mode's runs are not
          scraped.
        runbook_url: https://wiki.example.com/headroom/runbooks#headroomevictionshigh
`
	dir := filepath.Dir(rules)
	if err := os.WriteFile(filepath.Join(dir, "values-test.yaml"), []byte(tests), 0o644); err != nil {
		t.Fatal(err)
	}
	promtool(t, dir, "test", "rules", "values-test.yaml")
}

// TestChartPrometheusRuleRejectsBadValues: an alert the chart does not
// ship, or a for that is no duration, fails the render naming the value;
// so does a rule file whose alert no longer states the threshold its value
// replaces (the value would change nothing).
func TestChartPrometheusRuleRejectsBadValues(t *testing.T) {
	chart := filepath.Join(t.TempDir(), "headroom")
	if err := os.CopyFS(chart, os.DirFS(repoPath(t, chartDir))); err != nil {
		t.Fatal(err)
	}
	rules := filepath.Join(chart, "files", "prometheus-rules.yaml")
	shipped := string(repoFile(t, rulesFile))
	edited := strings.Replace(shipped, `[1h])) > 100`, `[1h])) >= 120`, 1)
	if edited == shipped {
		t.Fatalf("%s: HeadroomEvictionsHigh has no [1h])) > 100", rulesFile)
	}
	if err := os.WriteFile(rules, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := helmCmd("template", chartRelease, chart, "--namespace", chartNS, "--set", "prometheusRule.enabled=true"); err == nil ||
		!strings.Contains(err.Error(), "prometheusRule.alerts.HeadroomEvictionsHigh.threshold") {
		t.Errorf("rule file without the threshold: err %v, want one naming prometheusRule.alerts.HeadroomEvictionsHigh.threshold\n%.300s", err, out)
	}

	for flag, want := range map[string]string{
		"prometheusRule.alerts.HeadroomEvictionHigh.enabled=false": "HeadroomEvictionHigh",
		"prometheusRule.alerts.HeadroomEvictionsHigh.for=soon":     "prometheusRule.alerts.HeadroomEvictionsHigh.for",
		"prometheusRule.alerts.HeadroomEvictionsHigh.threshold=x":  "prometheusRule.alerts.HeadroomEvictionsHigh.threshold",
		"prometheusRule.alerts.HeadroomNodeAgentsDown.threshold=1": "HeadroomNodeAgentsDown",
	} {
		out, err := renderChartText(t, "--set", "prometheusRule.enabled=true", "--set", flag)
		if err == nil {
			t.Errorf("--set %s rendered:\n%.300s", flag, out)
		} else if !strings.Contains(err.Error(), want) {
			t.Errorf("--set %s: error %v does not name %s", flag, err, want)
		}
	}
}
