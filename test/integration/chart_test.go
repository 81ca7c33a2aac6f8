package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/kubernetes/scheme"
	componentbaseconfig "k8s.io/component-base/config"
	componentbaseoptions "k8s.io/component-base/config/options"
	schedoptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"
	schedvalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/descheduler/pkg/api"
	"sigs.k8s.io/descheduler/pkg/descheduler"
	"sigs.k8s.io/descheduler/pkg/framework/pluginregistry"
	"sigs.k8s.io/descheduler/pkg/framework/plugins/defaultevictor"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/apis/config"
	_ "github.com/headroom-k8s/headroom/apis/config/scheme"
	"github.com/headroom-k8s/headroom/apis/config/validation"
	"github.com/headroom-k8s/headroom/plugins/relievenodepressure"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// The chart's tests render it with bin/helm (hack/build-tools.sh) in the
// release namespace the kustomize tree uses.
const (
	chartDir     = "manifests/charts/headroom"
	chartRelease = "headroom"
	chartNS      = "headroom-system"
)

// object is one rendered manifest, as decoded from YAML.
type object = map[string]any

func objectKey(o object) string {
	md, _ := o["metadata"].(map[string]any)
	name := fmt.Sprint(md["name"])
	if ns, ok := md["namespace"].(string); ok && ns != "" {
		name = ns + "/" + name
	}
	return fmt.Sprintf("%s %s", o["kind"], name)
}

// decodeObjects splits a multi-document YAML stream into objects, keyed by
// kind, namespace and name; a key seen twice fails the test.
func decodeObjects(t *testing.T, source string, data []byte) map[string]object {
	t.Helper()
	objs := map[string]object{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var o object
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("%s: %v", source, err)
		}
		if len(o) == 0 {
			continue
		}
		key := objectKey(o)
		if _, dup := objs[key]; dup {
			t.Fatalf("%s renders %s twice", source, key)
		}
		objs[key] = o
	}
	return objs
}

// helmCmd runs bin/helm and returns its standard output; the error carries
// its standard error.
func helmCmd(args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(filepath.Join(controlplane.DefaultBinDir(), "helm"), args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// renderChart is `helm template headroom manifests/charts/headroom
// --namespace headroom-system` with further flags (--set, -f, ...).
// Without --kube-version among the flags, it renders for the default
// minor's Kubernetes release, as kubectl kustomize manifests/ does (helm's
// own default is the client-go release it was built with).
func renderChartText(t *testing.T, flags ...string) (string, error) {
	t.Helper()
	args := append([]string{"template", chartRelease, repoPath(t, chartDir), "--namespace", chartNS}, flags...)
	if !slices.ContainsFunc(flags, func(f string) bool { return strings.HasPrefix(f, "--kube-version") }) {
		args = append(args, "--kube-version", defaultMinor(t).version)
	}
	return helmCmd(args...)
}

// k8sMinor is a minor Headroom ships for: a line of hack/k8s-minors.txt
// that is not a preview.
type k8sMinor struct {
	minor     string // 1.35
	version   string // the Kubernetes release its build embeds, v1.35.4
	tag       string // its images' tag, <version>-headroom.<VERSION>
	isDefault bool
}

// shippedMinors reads hack/k8s-minors.txt and VERSION.
func shippedMinors(t *testing.T) []k8sMinor {
	t.Helper()
	headroom := strings.TrimSpace(string(repoFile(t, "VERSION")))
	var minors []k8sMinor
	for line := range strings.Lines(string(repoFile(t, "hack/k8s-minors.txt"))) {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		if len(f) < 3 {
			t.Fatalf("hack/k8s-minors.txt: line %q: want minor, k8s.io/kubernetes and descheduler versions", line)
		}
		mark := ""
		if len(f) > 3 {
			mark = f[3]
		}
		if mark == "preview" {
			continue
		}
		minors = append(minors, k8sMinor{minor: f[0], version: f[1], tag: f[1] + "-headroom." + headroom, isDefault: mark == "default"})
	}
	if len(minors) == 0 {
		t.Fatal("hack/k8s-minors.txt ships no minor")
	}
	return minors
}

func defaultMinor(t *testing.T) k8sMinor {
	t.Helper()
	for _, m := range shippedMinors(t) {
		if m.isDefault {
			return m
		}
	}
	t.Fatal("hack/k8s-minors.txt marks no minor default")
	panic("unreachable")
}

func renderChart(t *testing.T, flags ...string) map[string]object {
	t.Helper()
	out, err := renderChartText(t, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, "helm template "+strings.Join(flags, " "), []byte(out))
}

func renderKustomize(t *testing.T) map[string]object {
	t.Helper()
	return renderKustomizeDir(t, "manifests")
}

// renderKustomizeDir is `kubectl kustomize DIR` of a directory of the repository.
func renderKustomizeDir(t *testing.T, dir string) map[string]object {
	t.Helper()
	out, err := exec.Command(filepath.Join(controlplane.DefaultBinDir(), "kubectl"), "kustomize", repoPath(t, dir)).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, ee.Stderr)
		}
		t.Fatalf("kubectl kustomize %s: %v", dir, err)
	}
	return decodeObjects(t, "kubectl kustomize "+dir, out)
}

// valuesFile writes Helm values to a temporary file for -f.
func valuesFile(t *testing.T, values string) string {
	t.Helper()
	// Not t.TempDir(): helm splits -f at commas, which test names hold.
	dir, err := os.MkdirTemp("", "headroom-values-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path := filepath.Join(dir, "values.yaml")
	if err := os.WriteFile(path, []byte(values), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// fieldDiffs lists every field in which got differs from want, by path
// (spec.template.spec.containers[0].image).
func fieldDiffs(path string, want, got any) []string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			break
		}
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		var diffs []string
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range keys {
				if !yield(k) {
					return
				}
			}
		}) {
			p := k
			if path != "" {
				p = path + "." + k
			}
			wv, inW := w[k]
			gv, inG := g[k]
			switch {
			case !inG:
				diffs = append(diffs, fmt.Sprintf("%s: kustomize %s, chart has none", p, show(wv)))
			case !inW:
				diffs = append(diffs, fmt.Sprintf("%s: chart %s, kustomize has none", p, show(gv)))
			default:
				diffs = append(diffs, fieldDiffs(p, wv, gv)...)
			}
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok {
			break
		}
		var diffs []string
		for i := 0; i < max(len(w), len(g)); i++ {
			p := fmt.Sprintf("%s[%d]", path, i)
			switch {
			case i >= len(g):
				diffs = append(diffs, fmt.Sprintf("%s: kustomize %s, chart has none", p, show(w[i])))
			case i >= len(w):
				diffs = append(diffs, fmt.Sprintf("%s: chart %s, kustomize has none", p, show(g[i])))
			default:
				diffs = append(diffs, fieldDiffs(p, w[i], g[i])...)
			}
		}
		return diffs
	}
	if reflect.DeepEqual(want, got) {
		return nil
	}
	return []string{fmt.Sprintf("%s: kustomize %s, chart %s", path, show(want), show(got))}
}

func show(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

// chartLabels are the labels the chart puts on every object and pod
// template (app.kubernetes.io/instance, version, ... and helm.sh/chart, the
// conventions of a Helm chart) that the kustomize tree has no use for.
var chartLabels = []string{
	"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/component",
	"app.kubernetes.io/part-of", "app.kubernetes.io/managed-by", "helm.sh/chart",
}

// withoutChartLabels returns chart with every chartLabels key removed from
// the labels of its metadata and of its pod templates where the kustomize
// object has no such label; a key both have must still agree, and no other
// label is forgiven.
func withoutChartLabels(kustomize, chart any) any {
	k, ok := kustomize.(map[string]any)
	c, ok2 := chart.(map[string]any)
	if !ok || !ok2 {
		return chart
	}
	out := make(map[string]any, len(c))
	for key, v := range c {
		out[key] = v
	}
	if md, ok := c["metadata"].(map[string]any); ok {
		kmd, _ := k["metadata"].(map[string]any)
		kl, _ := kmd["labels"].(map[string]any)
		if cl, ok := md["labels"].(map[string]any); ok {
			labels := map[string]any{}
			for key, v := range cl {
				if _, inK := kl[key]; slices.Contains(chartLabels, key) && !inK {
					continue
				}
				labels[key] = v
			}
			md2 := map[string]any{}
			for key, v := range md {
				md2[key] = v
			}
			delete(md2, "labels")
			if len(labels) > 0 || kl != nil {
				md2["labels"] = labels
			}
			out["metadata"] = md2
		}
	}
	// Pod templates: spec.template, spec.jobTemplate.spec.template.
	if spec, ok := c["spec"].(map[string]any); ok {
		kspec, _ := k["spec"].(map[string]any)
		spec2 := map[string]any{}
		for key, v := range spec {
			spec2[key] = v
		}
		for _, key := range []string{"template", "jobTemplate", "spec"} { // spec: jobTemplate.spec
			if v, ok := spec[key]; ok {
				spec2[key] = withoutChartLabels(kspec[key], v)
			}
		}
		out["spec"] = spec2
	}
	return out
}

// compareObjects reports every object one side renders and the other does
// not, and every differing field of the objects both render. The chart's
// own labels (chartLabels) are not differences.
func compareObjects(t *testing.T, kustomize, chart map[string]object) {
	t.Helper()
	for _, key := range slices.Sorted(func(yield func(string) bool) {
		for k := range kustomize {
			if !yield(k) {
				return
			}
		}
	}) {
		got, ok := chart[key]
		if !ok {
			t.Errorf("kustomize renders %s, the chart does not", key)
			continue
		}
		for _, d := range fieldDiffs("", kustomize[key], withoutChartLabels(kustomize[key], got)) {
			t.Errorf("%s: %s", key, d)
		}
	}
	for key := range chart {
		if _, ok := kustomize[key]; !ok {
			t.Errorf("the chart renders %s, kustomize does not", key)
		}
	}
}

// TestChartMatchesKustomize holds the chart with its default values to the
// kustomize tree, object by object and field by field: a change to
// manifests/ that the chart does not mirror fails here, naming the object
// and the field. The Namespace is the chart's only with namespace.create.
func TestChartMatchesKustomize(t *testing.T) {
	kustomize := renderKustomize(t)
	nsKey := "Namespace " + chartNS
	if _, ok := kustomize[nsKey]; !ok {
		t.Fatalf("kustomize renders no %s", nsKey)
	}

	t.Run("defaults", func(t *testing.T) {
		withoutNS := maps(kustomize)
		delete(withoutNS, nsKey)
		compareObjects(t, withoutNS, renderChart(t))
	})
	t.Run("namespace.create", func(t *testing.T) {
		compareObjects(t, kustomize, renderChart(t, "--set", "namespace.create=true"))
	})
	// Each minor's overlay (hack/update-chart.sh) is the chart on that minor.
	for _, m := range shippedMinors(t) {
		t.Run("minor "+m.minor, func(t *testing.T) {
			overlay := renderKustomizeDir(t, "manifests/minors/"+m.minor)
			delete(overlay, nsKey)
			compareObjects(t, overlay, renderChart(t, "--kube-version", m.version))
		})
	}
	// Without --kube-version helm renders for its own default release
	// (that of the client-go it was built with): the same objects, with the
	// images of that release's minor.
	t.Run("helm's default Kubernetes release", func(t *testing.T) {
		out, err := helmCmd("template", chartRelease, repoPath(t, chartDir), "--namespace", chartNS)
		if err != nil {
			t.Fatal(err)
		}
		withoutNS := maps(kustomize)
		delete(withoutNS, nsKey)
		if want, got := keysOf(withoutNS), keysOf(decodeObjects(t, "helm template", []byte(out))); !slices.Equal(want, got) {
			t.Errorf("helm template renders %v, kubectl kustomize manifests/ %v", got, want)
		}
	})
	t.Run("descheduler deployment mode", func(t *testing.T) {
		// manifests/descheduler-deployment: the descheduler as a Deployment,
		// applied in place of manifests/descheduler.
		overlay := "manifests/descheduler-deployment"
		if _, err := os.Stat(filepath.Join(repoPath(t, "manifests"), "descheduler-deployment", "kustomization.yaml")); err != nil {
			t.Skipf("no %s: %v", overlay, err)
		}
		compareObjects(t, renderKustomizeDir(t, overlay), renderChart(t,
			"--set", "descheduler.mode=deployment,scheduler.enabled=false,nodeAgent.enabled=false,criticalPodsQuota.enabled=false"))
	})
	t.Run("files are the kustomize sources", func(t *testing.T) {
		// hack/update-chart.sh copies them; a stale copy would still render
		// ConfigMaps kustomize names differently, but say which file.
		for src, dst := range map[string]string{
			"manifests/scheduler/scheduler-config.yaml":                    "files/scheduler-config.yaml",
			"manifests/descheduler/policy.yaml":                            "files/descheduler-policy.yaml",
			"manifests/node-agent/admission-policy.yaml":                   "files/node-agent-admission-policy.yaml",
			"manifests/kubelet-events/admission-policy.yaml":               "files/kubelet-events-admission-policy.yaml",
			"manifests/scheduler/leader-election-policy.yaml":              "files/scheduler-leader-election-policy.yaml",
			"manifests/descheduler-deployment/leader-election-policy.yaml": "files/descheduler-leader-election-policy.yaml",
			rulesFile:     "files/prometheus-rules.yaml",
			dashboardFile: "files/headroom-dashboard.json",
		} {
			if !bytes.Equal(repoFile(t, src), repoFile(t, filepath.Join(chartDir, dst))) {
				t.Errorf("%s/%s differs from %s: run hack/update-chart.sh", chartDir, dst, src)
			}
		}
	})
}

func maps(m map[string]object) map[string]object {
	c := make(map[string]object, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

func TestChartLint(t *testing.T) {
	for name, flags := range map[string][]string{
		"defaults": nil,
		"non-default": {"-f", valuesFile(t, `
namespace: {create: true}
descheduler:
  mode: deployment
  interval: 2m
  pluginArgs:
    RelieveNodePressure: {pids: {thresholdPercent: 90, targetPercent: 80}}
scheduler:
  replicas: 1
pidFloor: {minFreePIDs: 1024, minFreePercent: 5}
nodeAgent:
  kubeletConfig: {enabled: true}
  admissionPolicy: {enabled: false, allowNodeWriteWithoutPolicy: true}
`)},
		"pod values, monitors, network policy, test pod": {"-f", valuesFile(t, `
scheduler:
  podLabels: {team: a}
  podAnnotations: {example.com/owner: a}
  podSecurityContext: {runAsUser: 65532}
  topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}]
  extraEnv: [{name: A, value: b}]
  extraVolumes: [{name: extra, emptyDir: {}}]
  extraVolumeMounts: [{name: extra, mountPath: /extra}]
  serviceAccount: {annotations: {example.com/role: a}}
descheduler: {mode: cronJob, suspend: true, logFormat: json}
nodeAgent:
  securityContext: {runAsUser: 0}
  allowWeakerSecurityContext: true
metrics:
  serviceMonitor: {enabled: true, metricRelabelings: [{action: drop, sourceLabels: [__name__], regex: go_.*}]}
  podMonitor: {enabled: true, authorization: {type: Bearer, credentials: {name: t, key: token}}}
  certManager: {enabled: true, issuerRef: {name: ca}}
networkPolicy: {enabled: true}
tests: {enabled: true}
`)},
		"peer keys, renamed scheduler": {"-f", valuesFile(t, `
rbac: {create: false}
scheduler:
  profile: {schedulerName: my-sched}
  serviceAccount: {create: false, name: my-scheduler}
descheduler:
  mode: deployment
  replicas: 1
  serviceAccount: {name: my-descheduler}
  leaderElection: {leaseName: my-lease, leaseNamespace: leases, leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 4s}
  podDisruptionBudget: {enabled: true}
nodeAgent:
  serviceAccount: {create: false, name: my-agent}
prometheusRule: {enabled: true}
grafanaDashboard: {enabled: true}
`)},
		"cronJob knobs": {"--set", "descheduler.startingDeadlineSeconds=120,descheduler.successfulJobsHistoryLimit=1,descheduler.failedJobsHistoryLimit=1,descheduler.ttlSecondsAfterFinished=600,descheduler.timeZone=Etc/UTC"},
	} {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"lint", "--strict", repoPath(t, chartDir), "--namespace", chartNS}, flags...)
			out, err := helmCmd(args...)
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			if !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint:\n%s", out)
			}
		})
	}
}

// decodeTyped decodes a rendered object into its typed API struct.
func decodeTyped[T runtime.Object](t *testing.T, objs map[string]object, key string) T {
	t.Helper()
	o, ok := objs[key]
	if !ok {
		t.Fatalf("the chart renders no %s; it renders %v", key, slices.Sorted(func(yield func(string) bool) {
			for k := range objs {
				if !yield(k) {
					return
				}
			}
		}))
	}
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", key, err)
	}
	typed, ok := obj.(T)
	if !ok {
		t.Fatalf("%s decodes to %T", key, obj)
	}
	return typed
}

// podTemplates returns the pod template of every workload rendered, by key.
func podTemplates(t *testing.T, objs map[string]object) map[string]corev1.PodTemplateSpec {
	t.Helper()
	pts := map[string]corev1.PodTemplateSpec{}
	for key, o := range objs {
		switch o["kind"] {
		case "Deployment":
			pts[key] = decodeTyped[*appsv1.Deployment](t, objs, key).Spec.Template
		case "DaemonSet":
			pts[key] = decodeTyped[*appsv1.DaemonSet](t, objs, key).Spec.Template
		case "CronJob":
			pts[key] = decodeTyped[*batchv1.CronJob](t, objs, key).Spec.JobTemplate.Spec.Template
		}
	}
	return pts
}

// configMapData returns the data under key of the one ConfigMap rendered
// that holds it.
func configMapData(t *testing.T, objs map[string]object, dataKey string) (name, data string) {
	t.Helper()
	for key, o := range objs {
		if o["kind"] != "ConfigMap" {
			continue
		}
		cm := decodeTyped[*corev1.ConfigMap](t, objs, key)
		if d, ok := cm.Data[dataKey]; ok {
			if name != "" {
				t.Fatalf("two ConfigMaps hold %s: %s and %s", dataKey, name, cm.Name)
			}
			name, data = cm.Name, d
		}
	}
	if name == "" {
		t.Fatalf("no ConfigMap holds %s", dataKey)
	}
	return name, data
}

// mountedConfigMap is the ConfigMap the pod template's first volume of
// that name mounts.
func mountedConfigMap(t *testing.T, pt corev1.PodTemplateSpec, volume string) string {
	t.Helper()
	for _, v := range pt.Spec.Volumes {
		if v.Name == volume && v.ConfigMap != nil {
			return v.ConfigMap.Name
		}
	}
	t.Fatalf("pod template mounts no ConfigMap volume %q", volume)
	return ""
}

// schedulerConfig decodes the rendered KubeSchedulerConfiguration as
// headroom-scheduler does (kube-scheduler's scheme with Headroom's args) and
// validates it with kube-scheduler's and Headroom's validation.
func schedulerConfig(t *testing.T, objs map[string]object) *schedconfig.KubeSchedulerConfiguration {
	t.Helper()
	name, data := configMapData(t, objs, "scheduler-config.yaml")
	if mounted := mountedConfigMap(t, podTemplates(t, objs)["Deployment "+chartNS+"/headroom-scheduler"], "config"); mounted != name {
		t.Errorf("headroom-scheduler mounts ConfigMap %s, the chart renders %s", mounted, name)
	}
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(data), nil, nil)
	if err != nil {
		t.Fatalf("scheduler config does not decode: %v\n%s", err, data)
	}
	cfg := obj.(*schedconfig.KubeSchedulerConfiguration)
	if err := schedvalidation.ValidateKubeSchedulerConfiguration(cfg); err != nil {
		t.Fatalf("scheduler config does not validate: %v", err)
	}
	for i, p := range cfg.Profiles {
		for j, pc := range p.PluginConfig {
			path := field.NewPath("profiles").Index(i).Child("pluginConfig").Index(j).Child("args")
			switch args := pc.Args.(type) {
			case *config.NodePIDsArgs:
				err = validation.ValidateNodePIDsArgs(path, args)
			case *config.OOMRiskArgs:
				err = validation.ValidateOOMRiskArgs(path, args)
			}
			if err != nil {
				t.Fatalf("scheduler config does not validate: %v", err)
			}
		}
	}
	return cfg
}

func schedulerArgs[T runtime.Object](t *testing.T, p schedconfig.KubeSchedulerProfile, plugin string) T {
	t.Helper()
	for _, pc := range p.PluginConfig {
		if pc.Name == plugin {
			args, ok := pc.Args.(T)
			if !ok {
				t.Fatalf("profile %s: args of %s are %T", p.SchedulerName, plugin, pc.Args)
			}
			return args
		}
	}
	t.Fatalf("profile %s has no pluginConfig for %s", p.SchedulerName, plugin)
	panic("unreachable")
}

// deschedulerPolicy loads the rendered DeschedulerPolicy as
// headroom-descheduler does: the in-tree plugins and RelieveNodePressure,
// decoded, defaulted and validated.
func deschedulerPolicy(t *testing.T, objs map[string]object, workload string) *api.DeschedulerPolicy {
	t.Helper()
	name, data := configMapData(t, objs, "policy.yaml")
	if mounted := mountedConfigMap(t, podTemplates(t, objs)[workload], "policy"); mounted != name {
		t.Errorf("%s mounts ConfigMap %s, the chart renders %s", workload, mounted, name)
	}
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	pluginregistry.PluginRegistry = pluginregistry.NewRegistry()
	descheduler.RegisterDefaultPlugins(pluginregistry.PluginRegistry)
	u := relievenodepressure.Utilities()
	pluginregistry.Register(relievenodepressure.PluginName, u.PluginBuilder, u.PluginType, u.PluginArgInstance, u.PluginArgValidator, u.PluginArgDefaulter, pluginregistry.PluginRegistry)
	policy, err := descheduler.LoadPolicyConfig(path, fake.NewClientset(), pluginregistry.PluginRegistry)
	if err != nil {
		t.Fatalf("descheduler policy does not load: %v\n%s", err, data)
	}
	return policy
}

func deschedulerArgs[T runtime.Object](t *testing.T, policy *api.DeschedulerPolicy, plugin string) T {
	t.Helper()
	for _, pc := range policy.Profiles[0].PluginConfigs {
		if pc.Name == plugin {
			args, ok := pc.Args.(T)
			if !ok {
				t.Fatalf("args of %s are %T", plugin, pc.Args)
			}
			return args
		}
	}
	t.Fatalf("policy has no pluginConfig for %s", plugin)
	panic("unreachable")
}

func chartAppVersion(t *testing.T) string {
	t.Helper()
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(repoFile(t, filepath.Join(chartDir, "Chart.yaml")), &chart); err != nil {
		t.Fatal(err)
	}
	if chart.AppVersion == "" {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return chart.AppVersion
}

func keysOf(m map[string]object) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func TestChartComponentsOff(t *testing.T) {
	all := renderChart(t)
	for _, tc := range []struct {
		set string
		// gone reports whether an object of the default render belongs to
		// the component switched off.
		gone func(key string) bool
	}{
		{"scheduler.enabled=false", func(k string) bool { return strings.Contains(k, "headroom-scheduler") }},
		{"descheduler.enabled=false", func(k string) bool { return strings.Contains(k, "headroom-descheduler") }},
		{"nodeAgent.enabled=false", func(k string) bool { return strings.Contains(k, "headroom-node-agent") }},
		{"nodeAgent.admissionPolicy.enabled=false,nodeAgent.admissionPolicy.allowNodeWriteWithoutPolicy=true", func(k string) bool {
			return strings.HasPrefix(k, "ValidatingAdmissionPolicy") && strings.HasSuffix(k, " headroom-node-agent")
		}},
		{"descheduler.kubeletEventsPolicy.enabled=false", func(k string) bool {
			return strings.HasPrefix(k, "ValidatingAdmissionPolicy") && strings.HasSuffix(k, " headroom-descheduler-sandbox-events")
		}},
		{"scheduler.admissionPolicy.enabled=false", func(k string) bool {
			return strings.HasPrefix(k, "ValidatingAdmissionPolicy") && strings.HasSuffix(k, " headroom-scheduler-leader-election")
		}},
		{"scheduler.podDisruptionBudget.enabled=false", func(k string) bool { return strings.HasPrefix(k, "PodDisruptionBudget") }},
		{"criticalPodsQuota.enabled=false", func(k string) bool { return strings.HasPrefix(k, "ResourceQuota") }},
	} {
		t.Run(tc.set, func(t *testing.T) {
			var want []string
			removed := 0
			for _, k := range keysOf(all) {
				if tc.gone(k) {
					removed++
				} else {
					want = append(want, k)
				}
			}
			if removed == 0 {
				t.Fatal("the default render has no object of this component")
			}
			got := keysOf(renderChart(t, "--set", tc.set))
			if !slices.Equal(got, want) {
				t.Errorf("with %s the chart renders\n%s\nwant\n%s", tc.set, strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestChartDeschedulerDeployment(t *testing.T) {
	cron := renderChart(t)
	objs := renderChart(t, "--set", "descheduler.mode=deployment,descheduler.interval=2m,descheduler.metricsPort=10300")
	cronKey, depKey := "CronJob "+chartNS+"/headroom-descheduler", "Deployment "+chartNS+"/headroom-descheduler"
	if _, ok := objs[cronKey]; ok {
		t.Errorf("deployment mode renders %s", cronKey)
	}
	if _, ok := cron[depKey]; ok {
		t.Errorf("cronJob mode renders %s", depKey)
	}
	dep := decodeTyped[*appsv1.Deployment](t, objs, depKey)
	pod := dep.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Containers))
	}
	c := pod.Containers[0]
	for _, arg := range []string{
		"--policy-config-file=/policy-dir/policy.yaml",
		"--descheduling-interval=2m",
		"--leader-elect=true",
		"--leader-elect-resource-lock=leases",
		"--leader-elect-resource-namespace=" + chartNS,
		"--leader-elect-resource-name=headroom-descheduler",
		"--secure-port=10300",
	} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("descheduler Deployment args %q lack %s", c.Args, arg)
		}
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 10300 {
		t.Errorf("descheduler ports %+v, want metrics 10300", c.Ports)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "metrics" || p.HTTPGet.Scheme != corev1.URISchemeHTTPS {
		t.Errorf("descheduler liveness probe %+v, want HTTPS on the metrics port", p)
	}
	if pod.RestartPolicy != "" {
		t.Errorf("Deployment pod restartPolicy %q", pod.RestartPolicy)
	}

	// The pod is the CronJob's, less what only a run-once pod has. The
	// serving certificate is self-signed in memory, never written
	// (TestRelieveNodePressureDeploymentMode), so the read-only root
	// filesystem needs no writable directory.
	cronPod := decodeTyped[*batchv1.CronJob](t, cron, cronKey).Spec.JobTemplate.Spec.Template.Spec
	if cronPod.ServiceAccountName != pod.ServiceAccountName || cronPod.PriorityClassName != pod.PriorityClassName ||
		cronPod.Containers[0].Image != c.Image || !reflect.DeepEqual(cronPod.Volumes, pod.Volumes) ||
		!reflect.DeepEqual(cronPod.Containers[0].VolumeMounts, c.VolumeMounts) ||
		!reflect.DeepEqual(cronPod.Containers[0].SecurityContext, c.SecurityContext) ||
		!reflect.DeepEqual(cronPod.Containers[0].Resources, c.Resources) {
		t.Errorf("Deployment pod\n%+v\ndiffers from the CronJob's\n%+v", pod, cronPod)
	}
	svc := decodeTyped[*corev1.Service](t, objs, "Service "+chartNS+"/headroom-descheduler-metrics")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 10300 || svc.Spec.Ports[0].TargetPort.String() != "metrics" ||
		!reflect.DeepEqual(svc.Spec.Selector, dep.Spec.Selector.MatchLabels) {
		t.Errorf("metrics Service %+v does not select the Deployment's pods on port 10300", svc.Spec)
	}

	// Leader election on its own lease, granted to its ServiceAccount.
	role := decodeTyped[*rbacv1.Role](t, objs, "Role "+chartNS+"/headroom-descheduler-leader-election")
	canUpdate := false
	for _, r := range role.Rules {
		if slices.Contains(r.Resources, "leases") && slices.Contains(r.Verbs, "update") && slices.Equal(r.ResourceNames, []string{"headroom-descheduler"}) {
			canUpdate = true
		}
	}
	if !canUpdate {
		t.Errorf("leader-election Role %+v does not grant update on the lease headroom-descheduler", role.Rules)
	}
	rb := decodeTyped[*rbacv1.RoleBinding](t, objs, "RoleBinding "+chartNS+"/headroom-descheduler-leader-election")
	if rb.RoleRef.Name != role.Name || len(rb.Subjects) != 1 || rb.Subjects[0].Name != pod.ServiceAccountName || rb.Subjects[0].Namespace != chartNS {
		t.Errorf("leader-election RoleBinding %+v", rb)
	}
	if _, ok := cron["Role "+chartNS+"/headroom-descheduler-leader-election"]; ok {
		t.Error("cronJob mode renders the leader-election Role")
	}
	// Its Lease writes confined to that Lease, unless switched off.
	withoutPolicy := renderChart(t, "--set", "descheduler.mode=deployment,descheduler.admissionPolicy.enabled=false")
	for _, kind := range []string{"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} {
		key := kind + " headroom-descheduler-leader-election"
		if _, ok := objs[key]; !ok {
			t.Errorf("deployment mode renders no %s", key)
		}
		if _, ok := cron[key]; ok {
			t.Errorf("cronJob mode renders %s", key)
		}
		if _, ok := withoutPolicy[key]; ok {
			t.Errorf("descheduler.admissionPolicy.enabled=false renders %s", key)
		}
	}
	deschedulerPolicy(t, objs, depKey)
}

// chartImages is every container's image|imagePullPolicy by workload.
func chartImages(t *testing.T, objs map[string]object) map[string][]string {
	t.Helper()
	got := map[string][]string{}
	for key, pt := range podTemplates(t, objs) {
		for _, c := range append(pt.Spec.InitContainers, pt.Spec.Containers...) {
			got[key] = append(got[key], c.Image+"|"+string(c.ImagePullPolicy))
		}
	}
	return got
}

// checkChartImages holds chartImages of the three workloads to want of
// each workload's image name (headroom-scheduler, ...).
func checkChartImages(t *testing.T, got map[string][]string, want func(image string) string) {
	t.Helper()
	workloads := map[string]string{
		"Deployment " + chartNS + "/headroom-scheduler":   "headroom-scheduler",
		"DaemonSet " + chartNS + "/headroom-node-agent":   "headroom-node-agent",
		"CronJob " + chartNS + "/headroom-descheduler":    "headroom-descheduler",
		"Deployment " + chartNS + "/headroom-descheduler": "headroom-descheduler",
	}
	if len(got) != 3 {
		t.Errorf("pod templates %v, want 3", got)
	}
	for key, imgs := range got {
		image, ok := workloads[key]
		if !ok {
			t.Errorf("unexpected workload %s", key)
			continue
		}
		for _, img := range imgs {
			if img != want(image) {
				t.Errorf("%s: image|pullPolicy %s, want %s", key, img, want(image))
			}
		}
	}
}

func TestChartImages(t *testing.T) {
	tag := chartAppVersion(t)
	images := func(objs map[string]object) map[string][]string { return chartImages(t, objs) }
	check := checkChartImages
	t.Run("defaults", func(t *testing.T) {
		check(t, images(renderChart(t)), func(bin string) string { return "ghcr.io/headroom-k8s/" + bin + ":" + tag + "|" })
	})
	override := `
scheduler:
  image: {registry: registry.example:5000, repository: team/scheduler, tag: v9.9.9, pullPolicy: Always}
descheduler:
  image: {registry: registry.example:5000, repository: team/descheduler, tag: v9.9.9, pullPolicy: Always}
nodeAgent:
  image: {registry: registry.example:5000, repository: team/node-agent, tag: v9.9.9, pullPolicy: Always}
`
	want := func(bin string) string {
		return "registry.example:5000/team/" + strings.TrimPrefix(bin, "headroom-") + ":v9.9.9|Always"
	}
	for _, mode := range []string{"cronJob", "deployment"} {
		t.Run("override "+mode, func(t *testing.T) {
			check(t, images(renderChart(t, "-f", valuesFile(t, override), "--set", "descheduler.mode="+mode)), want)
		})
	}
	t.Run("no registry", func(t *testing.T) {
		got := images(renderChart(t, "--set", "scheduler.image.registry=,descheduler.image.registry=,nodeAgent.image.registry="))
		check(t, got, func(bin string) string { return "headroom-k8s/" + bin + ":" + tag + "|" })
	})
}

// TestChartMinors: the chart installs on every minor hack/k8s-minors.txt
// ships and on no other, and runs the images built for the cluster's minor
// (.Capabilities.KubeVersion: the API server's with helm install), unless a
// component's tag or digest is set.
func TestChartMinors(t *testing.T) {
	minors := shippedMinors(t)
	// labelVersions is the distinct app.kubernetes.io/version labels, sorted.
	labelVersions := func(objs map[string]object) []string {
		var got []string
		for _, o := range objs {
			md, _ := o["metadata"].(map[string]any)
			labels, _ := md["labels"].(map[string]any)
			got = append(got, fmt.Sprint(labels["app.kubernetes.io/version"]))
		}
		slices.Sort(got)
		return slices.Compact(got)
	}
	for _, m := range minors {
		// Any patch of the minor is that minor: its first, one later than the
		// build's, and a provider's release such as v1.35.4-gke.1200.
		for _, v := range []string{m.version, "v" + m.minor + ".0", "v" + m.minor + ".99", "v" + m.minor + ".0-gke.1200"} {
			t.Run(v, func(t *testing.T) {
				objs := renderChart(t, "--kube-version", v)
				checkChartImages(t, chartImages(t, objs), func(image string) string { return "ghcr.io/headroom-k8s/" + image + ":" + m.tag + "|" })
				if got := labelVersions(objs); !slices.Equal(got, []string{m.tag}) {
					t.Errorf("app.kubernetes.io/version labels %v, want %s on every object", got, m.tag)
				}
			})
		}
	}

	// Helm's own check (Chart.yaml's kubeVersion) names the supported minors.
	var wantNamed []string
	for _, m := range minors {
		wantNamed = append(wantNamed, m.minor+".x")
	}
	oldest, newest := minors[0].minor, minors[len(minors)-1].minor
	minorAt := func(minor string, delta int) string {
		v := parseMinor(t, minor)
		return fmt.Sprintf("%d.%d.0", v[0], v[1]+delta)
	}
	for _, v := range []string{minorAt(oldest, -1), minorAt(newest, 1), minorAt(newest, 2)} {
		t.Run("refused "+v, func(t *testing.T) {
			_, err := renderChartText(t, "--kube-version", v)
			if err == nil {
				t.Fatalf("helm template --kube-version %s rendered", v)
			}
			for _, want := range append(wantNamed, "v"+v) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not name %s:\n%v", want, err)
				}
			}
		})
	}
	// Tools that render without helm's check meet the templates' own.
	t.Run("refused without kubeVersion", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS(repoPath(t, chartDir))); err != nil {
			t.Fatal(err)
		}
		chartYAML := filepath.Join(dir, "Chart.yaml")
		data, err := os.ReadFile(chartYAML)
		if err != nil {
			t.Fatal(err)
		}
		without := regexp.MustCompile(`(?m)^kubeVersion:.*\n`).ReplaceAll(data, nil)
		if bytes.Equal(without, data) {
			t.Fatal("Chart.yaml has no kubeVersion")
		}
		if err := os.WriteFile(chartYAML, without, 0o644); err != nil {
			t.Fatal(err)
		}
		v := minorAt(oldest, -1)
		_, err = helmCmd("template", chartRelease, dir, "--namespace", chartNS, "--kube-version", v)
		if err == nil {
			t.Fatalf("the chart without kubeVersion rendered for %s", v)
		}
		var names []string
		for _, m := range minors {
			names = append(names, m.minor)
		}
		if want := "built for Kubernetes " + strings.Join(names, ", ") + "; this cluster is v" + v; !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q:\n%v", want, err)
		}
	})

	t.Run("override wins", func(t *testing.T) {
		const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
		m := minors[0]
		objs := renderChart(t, "--kube-version", m.version, "--set", "scheduler.image.tag=v9.9.9,nodeAgent.image.digest="+digest)
		checkChartImages(t, chartImages(t, objs), func(image string) string {
			switch image {
			case "headroom-scheduler":
				return "ghcr.io/headroom-k8s/headroom-scheduler:v9.9.9|"
			case "headroom-node-agent":
				return "ghcr.io/headroom-k8s/headroom-node-agent@" + digest + "|"
			}
			return "ghcr.io/headroom-k8s/" + image + ":" + m.tag + "|"
		})
	})

	// The namespace opt-in's MutatingAdmissionPolicy is v1 from 1.36; before,
	// v1beta1 behind a feature gate, which the chart asks for by name.
	t.Run("namespace opt-in", func(t *testing.T) {
		const gvk = "admissionregistration.k8s.io/v1beta1/MutatingAdmissionPolicy"
		for _, m := range minors {
			want := "admissionregistration.k8s.io/v1"
			if minorLess(t, m.minor, "1.36") {
				want = "admissionregistration.k8s.io/v1beta1"
				_, err := renderChartText(t, "--kube-version", m.version, "--set", "namespaceOptIn.enabled=true")
				if err == nil || !strings.Contains(err.Error(), "--feature-gates=MutatingAdmissionPolicy=true --runtime-config=admissionregistration.k8s.io/v1beta1=true") {
					t.Errorf("%s without %s served: %v, want the feature gate and runtime-config named", m.minor, gvk, err)
				}
			}
			objs := renderChart(t, "--kube-version", m.version, "--api-versions", gvk, "--set", "namespaceOptIn.enabled=true")
			for _, key := range []string{"MutatingAdmissionPolicy headroom-namespace-opt-in", "MutatingAdmissionPolicyBinding headroom-namespace-opt-in"} {
				o, ok := objs[key]
				if !ok {
					t.Errorf("%s: no %s", m.minor, key)
					continue
				}
				if o["apiVersion"] != want {
					t.Errorf("%s: %s is %v, want %s", m.minor, key, o["apiVersion"], want)
				}
			}
		}
	})
}

// parseMinor is a minor's major and minor numbers: 1.35 is [1 35].
func parseMinor(t *testing.T, minor string) [2]int {
	t.Helper()
	var v [2]int
	if _, err := fmt.Sscanf(minor, "%d.%d", &v[0], &v[1]); err != nil {
		t.Fatalf("minor %q: %v", minor, err)
	}
	return v
}

// minorLess reports whether minor a (1.35) is older than minor b.
func minorLess(t *testing.T, a, b string) bool {
	t.Helper()
	va, vb := parseMinor(t, a), parseMinor(t, b)
	return va[0] < vb[0] || va[0] == vb[0] && va[1] < vb[1]
}

func TestChartSchedulerConfig(t *testing.T) {
	defaults := schedulerConfig(t, renderChart(t))
	defaultName, _ := configMapData(t, renderChart(t), "scheduler-config.yaml")

	t.Run("profile and plugin args", func(t *testing.T) {
		objs := renderChart(t, "-f", valuesFile(t, `
scheduler:
  profile:
    plugins:
      multiPoint:
        enabled:
        - {name: NodePIDs, weight: 3}
        - {name: OOMRisk, weight: 1}
  pluginArgs:
    NodePIDs:
      unknownNodeScore: 0
    OOMRisk:
      ownRiskWeight: 5
pidFloor: {minFreePIDs: 2048, minFreePercent: 5}
`))
		cfg := schedulerConfig(t, objs)
		if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != "headroom-scheduler" {
			t.Fatalf("profiles %+v", cfg.Profiles)
		}
		p := cfg.Profiles[0]
		weights := map[string]int32{}
		for _, pl := range p.Plugins.MultiPoint.Enabled {
			weights[pl.Name] = pl.Weight
		}
		if weights["NodePIDs"] != 3 || weights["OOMRisk"] != 1 {
			t.Errorf("multiPoint weights %v, want NodePIDs 3, OOMRisk 1", weights)
		}
		got := schedulerArgs[*config.NodePIDsArgs](t, p, "NodePIDs")
		want := schedulerArgs[*config.NodePIDsArgs](t, defaults.Profiles[0], "NodePIDs").DeepCopy()
		want.MinFreePIDs, want.UnknownNodeScore = 2048, 0
		if !reflect.DeepEqual(got, want) {
			t.Errorf("NodePIDs args %+v, want %+v (0 must replace the shipped -1)", got, want)
		}
		oom := schedulerArgs[*config.OOMRiskArgs](t, p, "OOMRisk")
		wantOOM := schedulerArgs[*config.OOMRiskArgs](t, defaults.Profiles[0], "OOMRisk").DeepCopy()
		wantOOM.OwnRiskWeight = 5
		if !reflect.DeepEqual(oom, wantOOM) {
			t.Errorf("OOMRisk args %+v, want %+v", oom, wantOOM)
		}
		if name, _ := configMapData(t, objs, "scheduler-config.yaml"); name == defaultName {
			t.Errorf("changed config keeps the ConfigMap name %s: the pods would not roll", name)
		}
	})

	t.Run("whole config as a file", func(t *testing.T) {
		objs := renderChart(t, "--set-file", "scheduler.config="+repoPath(t, "manifests/samples/nodepids-scheduler-config.yaml"))
		_, data := configMapData(t, objs, "scheduler-config.yaml")
		if data != string(repoFile(t, "manifests/samples/nodepids-scheduler-config.yaml")) {
			t.Error("scheduler.config given as a string is not shipped verbatim")
		}
		cfg := schedulerConfig(t, objs)
		var names []string
		for _, p := range cfg.Profiles {
			names = append(names, p.SchedulerName)
		}
		if !slices.Equal(names, []string{"headroom-nodepids", "headroom-nodepids-only"}) {
			t.Errorf("profiles %v", names)
		}
	})

	t.Run("whole config as an object, with the PID floor", func(t *testing.T) {
		cfg := schedulerConfig(t, renderChart(t, "-f", valuesFile(t, `
scheduler:
  config:
    apiVersion: kubescheduler.config.k8s.io/v1
    kind: KubeSchedulerConfiguration
    profiles:
    - schedulerName: headroom-scheduler
      plugins:
        multiPoint:
          enabled: [{name: NodePIDs}]
pidFloor: {minFreePIDs: 512, minFreePercent: 7}
`)))
		// The profile had no pluginConfig for NodePIDs: the chart adds one
		// with pidFloor, the rest defaulted by the scheme.
		got := schedulerArgs[*config.NodePIDsArgs](t, cfg.Profiles[0], "NodePIDs")
		if got.MinFreePercent != 7 || got.MinFreePIDs != 512 || got.DefaultPodPIDs != 100 {
			t.Errorf("NodePIDs args %+v, want pidFloor's minFreePercent 7 and minFreePIDs 512, the default defaultPodPIDs 100", got)
		}
	})
}

// TestChartSchedulerLeaderElection: headroom-scheduler elects its leader on
// the Lease <release namespace>/headroom-scheduler, the one its Role grants,
// whatever the release namespace and configuration. The Lease is the one
// kube-scheduler's own options make of the rendered config file and
// container args (the leader-election flags override the file).
func TestChartSchedulerLeaderElection(t *testing.T) {
	for _, tc := range []struct {
		name, ns string
		flags    []string
		// wantFlags: the container args name the Lease (the config file
		// does not name this one).
		wantFlags bool
	}{
		{"shipped config", chartNS, nil, false},
		{"other namespace", "team-scheduling", nil, true},
		{"config without leaderElection", chartNS, []string{"--set-file", "scheduler.config=" + repoPath(t, "manifests/samples/nodepids-scheduler-config.yaml")}, true},
		{"profile merged", "team-scheduling", []string{"--set", "pidFloor.minFreePIDs=1024"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := helmCmd(append([]string{"template", chartRelease, repoPath(t, chartDir), "--namespace", tc.ns}, tc.flags...)...)
			if err != nil {
				t.Fatal(err)
			}
			objs := decodeObjects(t, "helm template", []byte(out))
			_, data := configMapData(t, objs, "scheduler-config.yaml")
			obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(data), nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			cfg := obj.(*schedconfig.KubeSchedulerConfiguration)
			args := decodeTyped[*appsv1.Deployment](t, objs, "Deployment "+tc.ns+"/headroom-scheduler").Spec.Template.Spec.Containers[0].Args
			if got := slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--leader-elect") }); got != tc.wantFlags {
				t.Errorf("leader-election flags in %q: %v, want %v", args, got, tc.wantFlags)
			}
			o := schedoptions.NewOptions()
			fs := pflag.NewFlagSet("headroom-scheduler", pflag.ContinueOnError)
			for _, f := range o.Flags.FlagSets {
				fs.AddFlagSet(f)
			}
			fs.ParseErrorsAllowlist.UnknownFlags = true
			if err := fs.Parse(args); err != nil {
				t.Fatalf("args %q: %v", args, err)
			}
			o.ApplyLeaderElectionTo(cfg)
			le := cfg.LeaderElection
			if !le.LeaderElect || le.ResourceLock != "leases" || le.ResourceName != "headroom-scheduler" || le.ResourceNamespace != tc.ns {
				t.Errorf("leader election %+v, want leases %s/headroom-scheduler", le, tc.ns)
			}
			role := decodeTyped[*rbacv1.Role](t, objs, "Role "+tc.ns+"/headroom-scheduler-leader-election")
			granted := false
			for _, r := range role.Rules {
				if slices.Contains(r.Resources, "leases") && slices.Contains(r.Verbs, "update") && slices.Equal(r.ResourceNames, []string{le.ResourceName}) {
					granted = true
				}
			}
			if !granted {
				t.Errorf("Role %s/%s %+v grants no update on the Lease %s", role.Namespace, role.Name, role.Rules, le.ResourceName)
			}
			// The admission policy matches this release's ServiceAccount and
			// allows it that Lease alone.
			policy := decodeTyped[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objs, "ValidatingAdmissionPolicy headroom-scheduler-leader-election")
			user := "'system:serviceaccount:" + tc.ns + ":headroom-scheduler'"
			if mc := policy.Spec.MatchConditions; len(mc) != 1 || !strings.Contains(mc[0].Expression, user) {
				t.Errorf("policy match conditions %+v, want one naming %s", mc, user)
			}
			own := "'" + le.ResourceNamespace + "/" + le.ResourceName + "'"
			if v := policy.Spec.Validations; len(v) != 1 || !strings.Contains(v[0].Expression, own) {
				t.Errorf("policy validations %+v, want one allowing the Lease %s", v, own)
			}
		})
	}
}

func TestChartDeschedulerPolicy(t *testing.T) {
	cronKey := "CronJob " + chartNS + "/headroom-descheduler"
	defaults := deschedulerPolicy(t, renderChart(t), cronKey)
	objs := renderChart(t, "-f", valuesFile(t, `
descheduler:
  pluginArgs:
    DefaultEvictor: {nodeFit: false}
    RelieveNodePressure:
      pids: {thresholdPercent: 90, targetPercent: 80}
      memory: {thresholdPercent: 88}
`))
	policy := deschedulerPolicy(t, objs, cronKey)
	if ev := deschedulerArgs[*defaultevictor.DefaultEvictorArgs](t, policy, defaultevictor.PluginName); ev.NodeFit {
		t.Error("DefaultEvictor nodeFit: false did not replace the shipped true")
	}
	got := deschedulerArgs[*relievenodepressure.RelieveNodePressureArgs](t, policy, relievenodepressure.PluginName)
	want := deschedulerArgs[*relievenodepressure.RelieveNodePressureArgs](t, defaults, relievenodepressure.PluginName).DeepCopy()
	want.PIDs.ThresholdPercent, want.PIDs.TargetPercent = ptr.To[int64](90), ptr.To[int64](80)
	// The memory trigger, off in the shipped policy, is turned on by its
	// value, the rest of it defaulted.
	want.Memory = &relievenodepressure.MemoryTrigger{ThresholdPercent: ptr.To[int64](88)}
	relievenodepressure.SetDefaults_RelieveNodePressureArgs(want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("RelieveNodePressure args\n%+v\nwant\n%+v", got, want)
	}
	if n := policy.MaxNoOfPodsToEvictPerNode; n == nil || *n != 5 {
		t.Errorf("maxNoOfPodsToEvictPerNode %v, want the shipped 5", n)
	}
}

// TestChartPIDFloor: the floor NodePIDs keeps and the one RelieveNodePressure
// plans with come from the one value pidFloor, in both descheduler modes,
// decoded through the scheduler's and the descheduler's own schemes (the
// descheduler refuses to start when they differ). The defaults are the
// shipped files' own floor, so those render byte for byte
// (TestChartMatchesKustomize).
func TestChartPIDFloor(t *testing.T) {
	for _, tc := range []struct {
		name     string
		values   string
		pids     int64
		percent  int64
		workload string
	}{
		{"defaults", "", 512, 5, "CronJob " + chartNS + "/headroom-descheduler"},
		{"changed", "pidFloor: {minFreePIDs: 2048, minFreePercent: 8}\n", 2048, 8, "CronJob " + chartNS + "/headroom-descheduler"},
		{"changed, deployment mode", "pidFloor: {minFreePIDs: 1000, minFreePercent: 0}\ndescheduler: {mode: deployment}\n", 1000, 0, "Deployment " + chartNS + "/headroom-descheduler"},
		{"changed, with other plugin args", `
pidFloor: {minFreePIDs: 4096, minFreePercent: 3}
scheduler:
  pluginArgs:
    NodePIDs: {defaultPodPIDs: 50, minFreePIDs: 4096}
descheduler:
  pluginArgs:
    RelieveNodePressure: {pids: {thresholdPercent: 97, targetPercent: 92}}
`, 4096, 3, "CronJob " + chartNS + "/headroom-descheduler"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var flags []string
			if tc.values != "" {
				flags = []string{"-f", valuesFile(t, tc.values)}
			}
			objs := renderChart(t, flags...)
			cfg := schedulerConfig(t, objs)
			for _, p := range cfg.Profiles {
				got := schedulerArgs[*config.NodePIDsArgs](t, p, "NodePIDs")
				if got.MinFreePIDs != tc.pids || got.MinFreePercent != tc.percent {
					t.Errorf("profile %s: NodePIDs floor %d PIDs, %d %%; want pidFloor's %d, %d", p.SchedulerName, got.MinFreePIDs, got.MinFreePercent, tc.pids, tc.percent)
				}
			}
			args := deschedulerArgs[*relievenodepressure.RelieveNodePressureArgs](t, deschedulerPolicy(t, objs, tc.workload), relievenodepressure.PluginName)
			if args.PIDs == nil || *args.PIDs.MinFreePIDs != tc.pids || *args.PIDs.MinFreePercent != tc.percent {
				t.Errorf("RelieveNodePressure pids %+v, want pidFloor's %d, %d", args.PIDs, tc.pids, tc.percent)
			}
		})
	}
}

// TestChartRejectsBadValues: values of the wrong shape fail the render with
// a message naming the value.
func TestChartRejectsBadValues(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{[]string{"--set", "descheduler.mode=daemonSet"}, "descheduler.mode"},
		{[]string{"--set-json", "scheduler.config=42"}, "scheduler.config"},
		{[]string{"--set-json", "descheduler.policy=[1]"}, "descheduler.policy"},
		{[]string{"--set", "scheduler.pluginArgs.NodePIDs=x"}, "scheduler.pluginArgs.NodePIDs"},
		{[]string{"--set", "scheduler.config=not: [yaml", "--set", "scheduler.pluginArgs.NodePIDs.minFreePIDs=1"}, "scheduler.config"},
		{[]string{"--set", "scheduler.enabled=yes"}, "scheduler.enabled"},
		{[]string{"--set", "nodeAgent.image.repository="}, "nodeAgent.image.repository"},
		{[]string{"--set-json", "scheduler.podDisruptionBudget.maxUnavailable=[1]"}, "scheduler.podDisruptionBudget.maxUnavailable"},
		{[]string{"--set", "nodeAgent.logFormat=xml"}, "nodeAgent.logFormat"},
		{[]string{"--set", "scheduler.image.digest=latest"}, "scheduler.image.digest"},
		{[]string{"--set-json", `imagePullSecrets=["regcred"]`}, "imagePullSecrets/0"},
		// The PID floor is pidFloor alone (TestChartPIDFloor).
		{[]string{"--set", "scheduler.pluginArgs.NodePIDs.minFreePIDs=1024"}, "scheduler.pluginArgs.NodePIDs.minFreePIDs"},
		{[]string{"--set", "descheduler.pluginArgs.RelieveNodePressure.pids.minFreePercent=7"}, "descheduler.pluginArgs.RelieveNodePressure.pids.minFreePercent"},
		{[]string{"--set-file", "scheduler.config=" + repoPath(t, "manifests/samples/nodepids-scheduler-config.yaml"), "--set", "pidFloor.minFreePIDs=1024"}, "scheduler.config"},
		{[]string{"--set", "pidFloor.minFreePercent=101"}, "pidFloor.minFreePercent"},
		{[]string{"--set", "descheduler.logFormat=xml"}, "descheduler.logFormat"},
		{[]string{"--set", "descheduler.suspend=yes"}, "descheduler.suspend"},
		{[]string{"--set", "metrics.serviceMonitor.authorization.credentials.name=x"}, "metrics.serviceMonitor.authorization.credentials"},
		{[]string{"--set", "metrics.serviceMonitor.tlsConfig.ca.secret.name=x"}, "metrics.serviceMonitor.tlsConfig.ca.secret"},
		{[]string{"--set", "metrics.podMonitor.tlsConfig.ca.name=x"}, "metrics.podMonitor.tlsConfig.ca"},
		{[]string{"--set-json", `scheduler.extraEnv=[{"value":"x"}]`}, "scheduler.extraEnv/0"},
	} {
		t.Run(strings.Join(tc.flags, " "), func(t *testing.T) {
			out, err := renderChartText(t, tc.flags...)
			if err == nil {
				t.Fatalf("rendered:\n%s", out)
			}
			// Template errors name the value with dots, schema errors as
			// a JSON pointer.
			pointer := "'/" + strings.ReplaceAll(tc.want, ".", "/") + "'"
			if !strings.Contains(err.Error(), tc.want) && !strings.Contains(err.Error(), pointer) {
				t.Fatalf("error does not name %s: %v", tc.want, err)
			}
		})
	}
}

// TestChartApply applies the chart's output server-side to a real API
// server, with the default values and then with the descheduler as a
// Deployment and other values changed, so every object passes the server's
// schema validation and admission.
func TestChartApply(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	apply := func(flags ...string) map[string]object {
		t.Helper()
		out, err := renderChartText(t, flags...)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(ctx, filepath.Join(cp.BinDir, "kubectl"), "--kubeconfig", cp.KubeconfigPath,
			"apply", "--server-side", "--field-manager=helm-template", "-f", "-")
		cmd.Stdin = strings.NewReader(out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("kubectl apply --server-side (helm template %s): %v\n%s", strings.Join(flags, " "), err, b)
		}
		return decodeObjects(t, "helm template", []byte(out))
	}
	objs := apply("--set", "namespace.create=true")
	name, _ := configMapData(t, objs, "scheduler-config.yaml")
	cm, err := cp.Client.CoreV1().ConfigMaps(chartNS).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(cm.Data["scheduler-config.yaml"]), nil, nil); err != nil {
		t.Fatalf("applied scheduler config does not decode: %v", err)
	}
	ns, err := cp.Client.CoreV1().Namespaces().Get(ctx, chartNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace labels %v", ns.Labels)
	}
	if _, err := cp.Client.BatchV1().CronJobs(chartNS).Get(ctx, "headroom-descheduler", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	for _, policy := range []string{"headroom-node-agent", "headroom-scheduler-leader-election"} {
		if _, err := cp.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, policy, metav1.GetOptions{}); err != nil {
			t.Error(err)
		}
	}

	apply("-f", valuesFile(t, `
descheduler:
  mode: deployment
  interval: 2m
  pluginArgs:
    RelieveNodePressure: {pids: {thresholdPercent: 90, targetPercent: 80}}
scheduler:
  replicas: 1
  topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app.kubernetes.io/name: headroom-scheduler}}}]
pidFloor: {minFreePIDs: 1024, minFreePercent: 5}
nodeAgent:
  kubeletConfig: {enabled: true}
  extraArgs: [--interval=30s]
  podLabels: {team: platform}
  podAnnotations: {example.com/owner: platform}
  podSecurityContext: {fsGroup: 9809}
  extraEnv: [{name: GOMAXPROCS, value: "1"}]
  extraVolumes: [{name: scratch, emptyDir: {}}]
  extraVolumeMounts: [{name: scratch, mountPath: /scratch}]
  serviceAccount: {annotations: {example.com/role: agent}}
networkPolicy: {enabled: true, apiServer: {cidrs: [10.0.0.0/8]}}
tests: {enabled: true}
`))
	dep, err := cp.Client.AppsV1().Deployments(chartNS).Get(ctx, "headroom-descheduler", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(dep.Spec.Template.Spec.Containers[0].Args, "--descheduling-interval=2m") {
		t.Errorf("applied descheduler Deployment args %q", dep.Spec.Template.Spec.Containers[0].Args)
	}
	if _, err := cp.Client.RbacV1().Roles(chartNS).Get(ctx, "headroom-descheduler-leader-election", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := cp.Client.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, "headroom-descheduler-leader-election", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	if _, err := cp.Client.CoreV1().Services(chartNS).Get(ctx, "headroom-descheduler-metrics", metav1.GetOptions{}); err != nil {
		t.Error(err)
	}
	for _, name := range []string{"headroom-scheduler", "headroom-descheduler"} {
		if _, err := cp.Client.NetworkingV1().NetworkPolicies(chartNS).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Error(err)
		}
	}
}

// TestChartPlacement: each component's nodeSelector, tolerations, affinity,
// priorityClassName, resources and extraArgs reach its pod template.
func TestChartPlacement(t *testing.T) {
	for _, mode := range []string{"cronJob", "deployment"} {
		t.Run(mode, func(t *testing.T) {
			values := strings.Builder{}
			for _, c := range []string{"scheduler", "descheduler", "nodeAgent"} {
				fmt.Fprintf(&values, "%s:\n", c)
				if c == "descheduler" {
					fmt.Fprintf(&values, "  mode: %s\n", mode)
				}
				fmt.Fprintf(&values, `
  nodeSelector: {pool: %[1]s}
  tolerations: [{key: dedicated, value: %[1]s, effect: NoSchedule}]
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [%[1]s]}]}]}}}
  priorityClassName: %[1]s-priority
  resources: {requests: {cpu: 7m}}
  extraArgs: [--%[1]s-flag=1]
`[1:], c)
			}
			objs := renderChart(t, "-f", valuesFile(t, values.String()))
			deschedulerKind := map[string]string{"cronJob": "CronJob", "deployment": "Deployment"}[mode]
			for key, c := range map[string]string{
				"Deployment " + chartNS + "/headroom-scheduler":           "scheduler",
				deschedulerKind + " " + chartNS + "/headroom-descheduler": "descheduler",
				"DaemonSet " + chartNS + "/headroom-node-agent":           "nodeAgent",
			} {
				pt, ok := podTemplates(t, objs)[key]
				if !ok {
					t.Fatalf("no %s", key)
				}
				spec := pt.Spec
				// Helm merges maps given with the defaults.
				wantSelector := map[string]string{"pool": c, "kubernetes.io/os": "linux"}
				if !reflect.DeepEqual(spec.NodeSelector, wantSelector) {
					t.Errorf("%s nodeSelector %v", key, spec.NodeSelector)
				}
				if len(spec.Tolerations) != 1 || spec.Tolerations[0].Value != c || spec.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
					t.Errorf("%s tolerations %+v", key, spec.Tolerations)
				}
				if a := spec.Affinity; a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil ||
					a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != c {
					t.Errorf("%s affinity %+v", key, a)
				}
				if spec.PriorityClassName != c+"-priority" {
					t.Errorf("%s priorityClassName %q", key, spec.PriorityClassName)
				}
				ctr := spec.Containers[0]
				if got := ctr.Resources.Requests.Cpu().String(); got != "7m" || ctr.Resources.Limits.Memory().IsZero() {
					t.Errorf("%s resources %+v, want a 7m CPU request and the default memory limit", key, ctr.Resources)
				}
				if ctr.Args[len(ctr.Args)-1] != "--"+c+"-flag=1" {
					t.Errorf("%s args %q do not end with the extra argument", key, ctr.Args)
				}
			}
		})
	}
}

// TestChartNodeWriteNeedsPolicy: the node agent's "patch nodes", which
// RBAC grants for every Node at once, renders only with the admission
// policy that confines it to its own Node's headroom.dev/ annotations, or
// with nodeAgent.admissionPolicy.allowNodeWriteWithoutPolicy set; without
// either the render fails saying what to set.
func TestChartNodeWriteNeedsPolicy(t *testing.T) {
	const role = "ClusterRole headroom-node-agent"
	const policy = "ValidatingAdmissionPolicy headroom-node-agent"
	patchesNodes := func(objs map[string]object) bool {
		r := decodeTyped[*rbacv1.ClusterRole](t, objs, role)
		for _, rule := range r.Rules {
			if slices.Contains(rule.Resources, "nodes") && slices.Contains(rule.Verbs, "patch") {
				return true
			}
		}
		return false
	}

	t.Run("defaults: the right with the policy", func(t *testing.T) {
		objs := renderChart(t)
		if _, ok := objs[policy]; !ok || !patchesNodes(objs) {
			t.Errorf("the default render has the policy: %v; patch nodes: %v", ok, patchesNodes(objs))
		}
	})
	t.Run("policy off: refused", func(t *testing.T) {
		for _, flags := range [][]string{
			{"--set", "nodeAgent.admissionPolicy.enabled=false"},
			{"--set", "nodeAgent.admissionPolicy.enabled=false,nodeAgent.admissionPolicy.allowNodeWriteWithoutPolicy=false"},
		} {
			out, err := renderChartText(t, flags...)
			if err == nil {
				t.Fatalf("%q rendered:\n%s", flags, out)
			}
			for _, want := range []string{"nodeAgent.admissionPolicy.allowNodeWriteWithoutPolicy=true", "patch Nodes"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q: the error does not say %q: %v", flags, want, err)
				}
			}
		}
	})
	t.Run("policy off, explicitly allowed", func(t *testing.T) {
		objs := renderChart(t, "--set", "nodeAgent.admissionPolicy.enabled=false,nodeAgent.admissionPolicy.allowNodeWriteWithoutPolicy=true")
		if _, ok := objs[policy]; ok {
			t.Error("the policy is rendered with nodeAgent.admissionPolicy.enabled=false")
		}
		if !patchesNodes(objs) {
			t.Error("the agent's ClusterRole does not grant patch nodes")
		}
	})
	t.Run("policy off, no agent", func(t *testing.T) {
		objs := renderChart(t, "--set", "nodeAgent.admissionPolicy.enabled=false,nodeAgent.enabled=false")
		if _, ok := objs[role]; ok {
			t.Errorf("%s rendered without the node agent", role)
		}
	})
}

// TestNodeAgentMountsNoProc: the node agent reads pid_max, threads-max and
// loadavg in its container's own /proc, which the DaemonSet's hostPID makes
// the host's (TestRealNodeFiguresAgree checks the figures on a real node):
// neither the kustomize tree nor the chart mounts the host's /proc, or any
// path under it, and the agent runs with the host's PID namespace.
func TestNodeAgentMountsNoProc(t *testing.T) {
	const key = "DaemonSet " + chartNS + "/headroom-node-agent"
	for name, objs := range map[string]map[string]object{
		"kubectl kustomize manifests/":  renderKustomize(t),
		"helm template":                 renderChart(t),
		"helm template, kubelet config": renderChart(t, "--set", "nodeAgent.kubeletConfig.enabled=true"),
	} {
		t.Run(name, func(t *testing.T) {
			ds := decodeTyped[*appsv1.DaemonSet](t, objs, key)
			spec := ds.Spec.Template.Spec
			if !spec.HostPID {
				t.Error("the DaemonSet does not run in the host's PID namespace: its /proc would not be the host's")
			}
			for _, v := range spec.Volumes {
				if v.HostPath == nil {
					continue
				}
				if p := path.Clean(v.HostPath.Path); p == "/proc" || strings.HasPrefix(p, "/proc/") {
					t.Errorf("volume %s mounts the host's %s", v.Name, v.HostPath.Path)
				}
			}
			for _, c := range spec.Containers {
				for _, a := range c.Args {
					if strings.HasPrefix(a, "--proc-root") {
						t.Errorf("container %s runs with %s: the agent reads its own /proc", c.Name, a)
					}
				}
			}
		})
	}
}

// TestChartConventions renders the chart with every component and the
// monitoring objects on and checks Helm's conventions on every object: the
// standard app.kubernetes.io/ labels and helm.sh/chart (on each pod
// template too), commonLabels, imagePullSecrets in every pod, an image
// digest winning over the tag, and logFormat as --logging-format.
func TestChartConventions(t *testing.T) {
	var chart struct{ Name, Version, AppVersion string }
	if err := yaml.Unmarshal(repoFile(t, filepath.Join(chartDir, "Chart.yaml")), &chart); err != nil {
		t.Fatal(err)
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, mode := range []string{"cronJob", "deployment"} {
		t.Run(mode, func(t *testing.T) {
			objs := renderChart(t, "-f", valuesFile(t, `
namespace: {create: true}
commonLabels: {team: infra, example.com/cost-center: "42"}
imagePullSecrets: [{name: regcred}]
scheduler: {logFormat: json, image: {digest: `+digest+`, tag: ignored}}
descheduler: {mode: `+mode+`, logFormat: json}
nodeAgent: {logFormat: json}
metrics: {serviceMonitor: {enabled: true}, podMonitor: {enabled: true}, certManager: {enabled: true, issuerRef: {name: ca}}}
prometheusRule: {enabled: true}
grafanaDashboard: {enabled: true}
`))
			want := map[string]string{
				"app.kubernetes.io/instance":   chartRelease,
				"app.kubernetes.io/version":    chart.AppVersion,
				"app.kubernetes.io/part-of":    "headroom",
				"app.kubernetes.io/managed-by": "Helm",
				"helm.sh/chart":                chart.Name + "-" + chart.Version,
				"team":                         "infra",
				"example.com/cost-center":      "42",
			}
			check := func(where string, labels map[string]any) {
				for k, v := range want {
					if labels[k] != v {
						t.Errorf("%s: label %s = %v, want %q", where, k, labels[k], v)
					}
				}
				for _, k := range []string{"app.kubernetes.io/name", "app.kubernetes.io/component"} {
					if s, _ := labels[k].(string); s == "" {
						t.Errorf("%s: no label %s", where, k)
					}
				}
			}
			for key, o := range objs {
				md, _ := o["metadata"].(map[string]any)
				labels, _ := md["labels"].(map[string]any)
				check(key, labels)
			}
			pts := podTemplates(t, objs)
			if len(pts) != 3 {
				t.Errorf("pod templates %v, want the scheduler's, the descheduler's and the node agent's", keysOf(objs))
			}
			for key, pt := range pts {
				labels := map[string]any{}
				for k, v := range pt.Labels {
					labels[k] = v
				}
				check(key+" pod template", labels)
				if len(pt.Spec.ImagePullSecrets) != 1 || pt.Spec.ImagePullSecrets[0].Name != "regcred" {
					t.Errorf("%s: imagePullSecrets %v", key, pt.Spec.ImagePullSecrets)
				}
				c := pt.Spec.Containers[0]
				if !slices.Contains(c.Args, "--logging-format=json") {
					t.Errorf("%s: args %v: no --logging-format=json", key, c.Args)
				}
				wantImage := "ghcr.io/headroom-k8s/headroom-" + strings.TrimPrefix(c.Name, "") + ":" + chart.AppVersion
				switch c.Name {
				case "scheduler":
					wantImage = "ghcr.io/headroom-k8s/headroom-scheduler@" + digest
				case "node-agent":
					wantImage = "ghcr.io/headroom-k8s/headroom-node-agent:" + chart.AppVersion
				}
				if c.Image != wantImage {
					t.Errorf("%s: image %s, want %s", key, c.Image, wantImage)
				}
			}
		})
	}
}

// renderKustomizeWith is `kubectl kustomize` of a kustomization of its own
// that takes manifests/ and adds components of it (e.g.
// "node-agent/cri-access"), as an operator adds them.
func renderKustomizeWith(t *testing.T, components ...string) map[string]object {
	t.Helper()
	dir := t.TempDir()
	rel, err := filepath.Rel(dir, repoPath(t, "manifests"))
	if err != nil {
		t.Fatal(err)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- " + rel + "\ncomponents:\n"
	for _, c := range components {
		k += "- " + filepath.Join(rel, c) + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(controlplane.DefaultBinDir(), "kubectl"), "kustomize", dir).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("kubectl kustomize with %v: %v\n%s", components, err, stderr)
	}
	return decodeObjects(t, fmt.Sprintf("kubectl kustomize with %v", components), out)
}

// TestNodeAgentLeastPrivilege holds the node agent's DaemonSet to the
// rights its README states, in each of its three shapes, and the chart's
// values to the kustomize components that give them, field by field:
//   - by default: a UID and GID of its own (no other workload's, the image's
//     own user), no supplementary group, every host mount read-only, no
//     container runtime socket, the host's PID namespace (pid_max);
//   - with CRI access: the runtime socket's directory, read-only, with
//     hostPath type Directory, group 0, the endpoint given, and still
//     non-root;
//   - with reclaiming on top: root in the container, capabilities still
//     dropped, host-local's state the one writable mount.
func TestNodeAgentLeastPrivilege(t *testing.T) {
	const key = "DaemonSet " + chartNS + "/headroom-node-agent"
	const socketDir = "/run/containerd"
	shipped := renderKustomize(t)
	otherUsers := map[int64]string{}
	for k, pt := range podTemplates(t, shipped) {
		if k == key {
			continue
		}
		if sc := pt.Spec.SecurityContext; sc != nil && sc.RunAsUser != nil {
			otherUsers[*sc.RunAsUser] = k
		}
	}
	for _, tc := range []struct {
		name       string
		components []string
		values     string
		cri, root  bool
	}{
		{name: "default"},
		{name: "CRI access", components: []string{"node-agent/cri-access"}, values: "nodeAgent: {containerRuntime: {enabled: true}}", cri: true},
		{name: "reclaiming", components: []string{"node-agent/cri-access", "node-agent/reclaim-leaked-ips"},
			values: "nodeAgent: {containerRuntime: {enabled: true}, reclaimLeakedIPs: {enabled: true}}", cri: true, root: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kustomize := shipped
			if len(tc.components) > 0 {
				kustomize = renderKustomizeWith(t, tc.components...)
			}
			chart := renderChart(t)
			if tc.values != "" {
				chart = renderChart(t, "-f", valuesFile(t, tc.values))
			}
			compareObjects(t, map[string]object{key: kustomize[key]}, map[string]object{key: chart[key]})

			ds := decodeTyped[*appsv1.DaemonSet](t, kustomize, key)
			spec := ds.Spec.Template.Spec
			psc, c := spec.SecurityContext, spec.Containers[0]
			if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser != 9809 || psc.RunAsGroup == nil || *psc.RunAsGroup != 9809 ||
				psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
				t.Fatalf("pod security context %+v, want non-root 9809:9809", psc)
			}
			if other, ok := otherUsers[*psc.RunAsUser]; ok {
				t.Errorf("UID %d is %s's too", *psc.RunAsUser, other)
			}
			if want := []int64(nil); tc.cri {
				if !slices.Equal(psc.SupplementalGroups, []int64{0}) {
					t.Errorf("supplementary groups %v, want [0] for the runtime's socket", psc.SupplementalGroups)
				}
			} else if !slices.Equal(psc.SupplementalGroups, want) {
				t.Errorf("supplementary groups %v, want none", psc.SupplementalGroups)
			}
			if !spec.HostPID || !spec.HostNetwork {
				t.Errorf("hostPID %v hostNetwork %v: both are needed (pid_max; a node without pod IPs)", spec.HostPID, spec.HostNetwork)
			}
			csc := c.SecurityContext
			if csc == nil || csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) != 0 ||
				csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation || csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
				t.Errorf("container security context %+v", csc)
			}
			if root := csc.RunAsUser != nil && *csc.RunAsUser == 0; root != tc.root {
				t.Errorf("container runs as root: %v, want %v", root, tc.root)
			}
			hostPaths := map[string]*corev1.HostPathVolumeSource{}
			for _, v := range spec.Volumes {
				if v.HostPath != nil {
					hostPaths[v.Name] = v.HostPath
				}
			}
			var writable []string
			for _, m := range c.VolumeMounts {
				if hostPaths[m.Name] != nil && !m.ReadOnly {
					writable = append(writable, m.Name)
				}
			}
			if want := []string(nil); tc.root {
				if !slices.Equal(writable, []string{"cni-state"}) {
					t.Errorf("writable host mounts %v, want host-local's state only", writable)
				}
			} else if !slices.Equal(writable, want) {
				t.Errorf("writable host mounts %v, want none", writable)
			}
			rt, ok := hostPaths["container-runtime"]
			endpoint := slices.Contains(c.Args, "--container-runtime-endpoint=unix://"+socketDir+"/containerd.sock")
			if ok != tc.cri || endpoint != tc.cri {
				t.Fatalf("runtime socket mounted %v, endpoint given %v; want %v", ok, endpoint, tc.cri)
			}
			if tc.cri && (rt.Path != socketDir || rt.Type == nil || *rt.Type != corev1.HostPathDirectory) {
				t.Errorf("runtime socket volume %+v, want the directory %s, type Directory", rt, socketDir)
			}
			if reclaim := slices.Contains(c.Args, "--reclaim-leaked-ips"); reclaim != tc.root {
				t.Errorf("--reclaim-leaked-ips given: %v, want %v", reclaim, tc.root)
			}
			var podUID bool
			for _, e := range c.Env {
				podUID = podUID || (e.Name == "POD_UID" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.uid")
			}
			if !podUID {
				t.Error("no POD_UID from metadata.uid: the agent cannot tell the node's runtime")
			}
		})
	}
	t.Run("reclaiming without CRI access", func(t *testing.T) {
		out, err := renderChartText(t, "--set", "nodeAgent.reclaimLeakedIPs.enabled=true")
		if err == nil || !strings.Contains(out+err.Error(), "needs nodeAgent.containerRuntime.enabled") {
			t.Errorf("helm template: %v\n%s", err, out)
		}
	})
}

// chartComponents are the values keys of the chart's workloads and the
// object each renders.
var chartComponents = []struct{ values, workload, serviceAccount string }{
	{"scheduler", "Deployment headroom-system/headroom-scheduler", "headroom-scheduler"},
	{"descheduler", "Deployment headroom-system/headroom-descheduler", "headroom-descheduler"},
	{"nodeAgent", "DaemonSet headroom-system/headroom-node-agent", "headroom-node-agent"},
}

// TestChartPodValues: each component's podLabels, podAnnotations,
// securityContext overrides, topologySpreadConstraints, extraEnv, extra
// volumes and ServiceAccount annotations reach its objects, the shipped
// securityContext keys kept under an override.
func TestChartPodValues(t *testing.T) {
	values := strings.Builder{}
	for _, c := range chartComponents {
		fmt.Fprintf(&values, "%s:\n", c.values)
		if c.values == "descheduler" {
			values.WriteString("  mode: deployment\n  logFormat: json\n")
		}
		// The node agent's DaemonSet runs on every node: nothing to spread.
		topology := "  topologySpreadConstraints: [{maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: ScheduleAnyway}]\n"
		if c.values == "nodeAgent" {
			topology = ""
		}
		fmt.Fprintf(&values, `  podLabels: {team: %[1]s}
  podAnnotations: {example.com/owner: %[1]s}
  podSecurityContext: {fsGroup: 2000}
  securityContext: {runAsGroup: 3000}
%[3]s  extraEnv: [{name: EXTRA_%[1]s, value: "1"}]
  extraVolumes: [{name: extra-%[2]s, emptyDir: {}}]
  extraVolumeMounts: [{name: extra-%[2]s, mountPath: /extra}]
  serviceAccount: {annotations: {example.com/role: %[1]s}}
`, c.values, strings.ToLower(c.values), topology)
	}
	objs := renderChart(t, "-f", valuesFile(t, values.String()))
	pts := podTemplates(t, objs)
	for _, c := range chartComponents {
		t.Run(c.values, func(t *testing.T) {
			pt, ok := pts[c.workload]
			if !ok {
				t.Fatalf("no %s", c.workload)
			}
			if pt.Labels["team"] != c.values || pt.Labels["app.kubernetes.io/name"] == "" {
				t.Errorf("pod labels %v", pt.Labels)
			}
			if pt.Annotations["example.com/owner"] != c.values {
				t.Errorf("pod annotations %v", pt.Annotations)
			}
			psc := pt.Spec.SecurityContext
			if psc == nil || ptr.Deref(psc.FSGroup, 0) != 2000 || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod securityContext %+v: want fsGroup 2000 and the shipped RuntimeDefault", psc)
			}
			if c.values == "nodeAgent" && (psc == nil || ptr.Deref(psc.RunAsUser, 0) != 9809) {
				t.Errorf("node agent pod securityContext %+v: want the shipped UID 9809", psc)
			}
			ctr := pt.Spec.Containers[0]
			sc := ctr.SecurityContext
			if sc == nil || ptr.Deref(sc.RunAsGroup, 0) != 3000 || !ptr.Deref(sc.ReadOnlyRootFilesystem, false) ||
				ptr.Deref(sc.AllowPrivilegeEscalation, true) || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
				t.Errorf("container securityContext %+v: want runAsGroup 3000 over the shipped one", sc)
			}
			wantTopology := c.values != "nodeAgent"
			if got := len(pt.Spec.TopologySpreadConstraints) == 1; got != wantTopology {
				t.Errorf("topologySpreadConstraints %v", pt.Spec.TopologySpreadConstraints)
			}
			if !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == "EXTRA_"+c.values && e.Value == "1" }) {
				t.Errorf("env %v", ctr.Env)
			}
			vol := "extra-" + strings.ToLower(c.values)
			if !slices.ContainsFunc(pt.Spec.Volumes, func(v corev1.Volume) bool { return v.Name == vol && v.EmptyDir != nil }) ||
				!slices.ContainsFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.Name == vol && m.MountPath == "/extra" }) {
				t.Errorf("volumes %v, mounts %v", pt.Spec.Volumes, ctr.VolumeMounts)
			}
			if c.values == "nodeAgent" && !slices.ContainsFunc(ctr.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" }) {
				t.Errorf("extraEnv replaced the agent's own env: %v", ctr.Env)
			}
			if c.values == "descheduler" && !slices.Contains(ctr.Args, "--logging-format=json") {
				t.Errorf("descheduler args %q", ctr.Args)
			}
			sa := decodeTyped[*corev1.ServiceAccount](t, objs, "ServiceAccount headroom-system/"+c.serviceAccount)
			if sa.Annotations["example.com/role"] != c.values {
				t.Errorf("ServiceAccount annotations %v", sa.Annotations)
			}
		})
	}

	t.Run("descheduler cronJob", func(t *testing.T) {
		objs := renderChart(t, "--set", "descheduler.suspend=true,descheduler.logFormat=json")
		cj := decodeTyped[*batchv1.CronJob](t, objs, "CronJob headroom-system/headroom-descheduler")
		if !ptr.Deref(cj.Spec.Suspend, false) {
			t.Error("suspend not rendered")
		}
		if args := cj.Spec.JobTemplate.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--logging-format=json") {
			t.Errorf("args %q", args)
		}
		if len(cj.Spec.JobTemplate.Spec.Template.Spec.TopologySpreadConstraints) != 0 {
			t.Error("a CronJob run got topologySpreadConstraints")
		}
	})
	t.Run("podLabels may not change the selector", func(t *testing.T) {
		_, err := renderChartText(t, "--set", `scheduler.podLabels.app\.kubernetes\.io/name=x`)
		if err == nil || !strings.Contains(err.Error(), "app.kubernetes.io/name") {
			t.Errorf("want a refusal naming app.kubernetes.io/name, got %v", err)
		}
	})
}

// TestChartSecurityContextWeakening: an override that weakens a shipped
// securityContext fails the render, naming the value and the key, unless
// allowWeakerSecurityContext accepts it; a stricter one renders.
func TestChartSecurityContextWeakening(t *testing.T) {
	for _, tc := range []struct{ set, value, key string }{
		{"scheduler.securityContext.privileged=true", "scheduler.securityContext", "privileged"},
		{"scheduler.securityContext.readOnlyRootFilesystem=false", "scheduler.securityContext", "readOnlyRootFilesystem"},
		{"descheduler.securityContext.allowPrivilegeEscalation=true", "descheduler.securityContext", "allowPrivilegeEscalation"},
		{"descheduler.podSecurityContext.seccompProfile.type=Unconfined", "descheduler.podSecurityContext", "seccompProfile"},
		{"nodeAgent.podSecurityContext.runAsNonRoot=false", "nodeAgent.podSecurityContext", "runAsNonRoot"},
		{"nodeAgent.securityContext.runAsUser=0", "nodeAgent.securityContext", "runAsUser"},
		{"nodeAgent.securityContext.capabilities.add={SYS_ADMIN}", "nodeAgent.securityContext", "capabilities"},
		{"nodeAgent.securityContext.capabilities.drop={NET_RAW}", "nodeAgent.securityContext", "capabilities"},
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := renderChartText(t, "--set", tc.set)
			if err == nil || !strings.Contains(err.Error(), tc.value) || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("want a refusal naming %s and %s, got %v", tc.value, tc.key, err)
			}
			component, _, _ := strings.Cut(tc.value, ".")
			if _, err := renderChartText(t, "--set", tc.set, "--set", component+".allowWeakerSecurityContext=true"); err != nil {
				t.Fatalf("with allowWeakerSecurityContext: %v", err)
			}
		})
	}
	for _, set := range []string{
		"scheduler.podSecurityContext.runAsUser=65532",
		"nodeAgent.podSecurityContext.seccompProfile.type=Localhost,nodeAgent.podSecurityContext.seccompProfile.localhostProfile=agent.json",
		"nodeAgent.reclaimLeakedIPs.enabled=true,nodeAgent.containerRuntime.enabled=true",
	} {
		if _, err := renderChartText(t, "--set", set); err != nil {
			t.Errorf("--set %s: %v", set, err)
		}
	}
}

// TestChartMonitors: the ServiceMonitors and PodMonitors authorize with a
// Secret's token (the chart's headroom-metrics-reader unless one is given),
// never bearerTokenFile, and take tlsConfig, relabelings and
// metricRelabelings.
func TestChartMonitors(t *testing.T) {
	endpoints := func(t *testing.T, objs map[string]object, key string) []any {
		t.Helper()
		o, ok := objs[key]
		if !ok {
			t.Fatalf("no %s", key)
		}
		spec := o["spec"].(map[string]any)
		if e, ok := spec["endpoints"]; ok {
			return e.([]any)
		}
		return spec["podMetricsEndpoints"].([]any)
	}
	t.Run("defaults", func(t *testing.T) {
		objs := renderChart(t, "--set", "metrics.serviceMonitor.enabled=true,metrics.podMonitor.enabled=true")
		for _, key := range []string{"ServiceMonitor headroom-system/headroom-scheduler", "PodMonitor headroom-system/headroom-node-agent"} {
			ep := endpoints(t, objs, key)[0].(map[string]any)
			if _, ok := ep["bearerTokenFile"]; ok {
				t.Errorf("%s: bearerTokenFile", key)
			}
			want := map[string]any{"type": "Bearer", "credentials": map[string]any{"name": "headroom-metrics-reader", "key": "token"}}
			if !reflect.DeepEqual(ep["authorization"], want) {
				t.Errorf("%s: authorization %v", key, ep["authorization"])
			}
			if !reflect.DeepEqual(ep["tlsConfig"], map[string]any{"insecureSkipVerify": true}) {
				t.Errorf("%s: tlsConfig %v", key, ep["tlsConfig"])
			}
		}
		secret := decodeTyped[*corev1.Secret](t, objs, "Secret headroom-system/headroom-metrics-reader")
		if secret.Type != corev1.SecretTypeServiceAccountToken || secret.Annotations[corev1.ServiceAccountNameKey] != "headroom-metrics-reader" {
			t.Errorf("reader Secret %+v", secret)
		}
		role := decodeTyped[*rbacv1.ClusterRole](t, objs, "ClusterRole headroom-metrics-reader")
		if want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}; !reflect.DeepEqual(role.Rules, want) {
			t.Errorf("reader rules %+v", role.Rules)
		}
		binding := decodeTyped[*rbacv1.ClusterRoleBinding](t, objs, "ClusterRoleBinding headroom-metrics-reader")
		if binding.RoleRef.Name != "headroom-metrics-reader" || len(binding.Subjects) != 1 || binding.Subjects[0].Name != "headroom-metrics-reader" {
			t.Errorf("reader binding %+v", binding)
		}
	})
	t.Run("given", func(t *testing.T) {
		objs := renderChart(t, "-f", valuesFile(t, `
metrics:
  serviceMonitor:
    enabled: true
    authorization: {type: Bearer, credentials: {name: prometheus-token, key: token}}
    tlsConfig: {insecureSkipVerify: null, serverName: headroom-scheduler-metrics, ca: {secret: {name: headroom-ca, key: ca.crt}}}
    relabelings: [{action: labeldrop, regex: pod}]
    metricRelabelings: [{action: drop, sourceLabels: [__name__], regex: go_.*}]
`))
		ep := endpoints(t, objs, "ServiceMonitor headroom-system/headroom-scheduler")[0].(map[string]any)
		if got := ep["authorization"].(map[string]any)["credentials"]; !reflect.DeepEqual(got, map[string]any{"name": "prometheus-token", "key": "token"}) {
			t.Errorf("authorization credentials %v", got)
		}
		tls := ep["tlsConfig"].(map[string]any)
		if _, ok := tls["insecureSkipVerify"]; ok || tls["serverName"] != "headroom-scheduler-metrics" || tls["ca"] == nil {
			t.Errorf("tlsConfig %v", tls)
		}
		if len(ep["relabelings"].([]any)) != 1 || len(ep["metricRelabelings"].([]any)) != 1 {
			t.Errorf("relabelings %v, metricRelabelings %v", ep["relabelings"], ep["metricRelabelings"])
		}
		for key := range objs {
			if strings.Contains(key, "headroom-metrics-reader") {
				t.Errorf("%s rendered with authorization given", key)
			}
		}
	})
	// A CA given, and nothing said of insecureSkipVerify (Helm's merge keeps
	// the default true beside it): the scrape verifies the certificate.
	t.Run("a CA turns verification on", func(t *testing.T) {
		objs := renderChart(t, "-f", valuesFile(t, `
metrics:
  serviceMonitor:
    enabled: true
    tlsConfig: {serverName: headroom-scheduler-metrics.headroom-system.svc, ca: {secret: {name: headroom-metrics-ca, key: ca.crt}}}
  podMonitor:
    enabled: true
    tlsConfig: {serverName: headroom-node-agent, ca: {configMap: {name: headroom-metrics-ca, key: ca.crt}}}
`))
		for key, want := range map[string]string{
			"ServiceMonitor headroom-system/headroom-scheduler": `{"ca":{"secret":{"key":"ca.crt","name":"headroom-metrics-ca"}},"serverName":"headroom-scheduler-metrics.headroom-system.svc"}`,
			"PodMonitor headroom-system/headroom-node-agent":    `{"ca":{"configMap":{"key":"ca.crt","name":"headroom-metrics-ca"}},"serverName":"headroom-node-agent"}`,
		} {
			if got := show(endpoints(t, objs, key)[0].(map[string]any)["tlsConfig"]); got != want {
				t.Errorf("%s: tlsConfig %s, want %s", key, got, want)
			}
		}
	})
}

// TestChartNetworkPolicy: off by default; on, the scheduler's and the
// descheduler's pods take ingress only on their metrics ports from the
// namespaces selected, and egress only to the API server.
func TestChartNetworkPolicy(t *testing.T) {
	for key := range renderChart(t) {
		if strings.HasPrefix(key, "NetworkPolicy ") {
			t.Errorf("%s rendered by default", key)
		}
	}
	objs := renderChart(t, "-f", valuesFile(t, `
descheduler: {mode: deployment}
networkPolicy:
  enabled: true
  metricsNamespaceSelector: {matchLabels: {name: observability}}
  apiServer: {cidrs: [192.0.2.10/32], ports: [6443]}
`))
	for name, port := range map[string]int32{"headroom-scheduler": 10259, "headroom-descheduler": 10258} {
		np := decodeTyped[*networkingv1.NetworkPolicy](t, objs, "NetworkPolicy headroom-system/"+name)
		if np.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != name {
			t.Errorf("%s: podSelector %v", name, np.Spec.PodSelector)
		}
		if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			t.Errorf("%s: policyTypes %v", name, np.Spec.PolicyTypes)
		}
		if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port.IntVal != port ||
			np.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["name"] != "observability" {
			t.Errorf("%s: ingress %+v", name, np.Spec.Ingress)
		}
		if len(np.Spec.Egress) != 1 || np.Spec.Egress[0].To[0].IPBlock.CIDR != "192.0.2.10/32" || np.Spec.Egress[0].Ports[0].Port.IntVal != 6443 {
			t.Errorf("%s: egress %+v", name, np.Spec.Egress)
		}
	}
	// A CronJob run serves no port: no ingress at all.
	np := decodeTyped[*networkingv1.NetworkPolicy](t, renderChart(t, "--set", "networkPolicy.enabled=true"), "NetworkPolicy headroom-system/headroom-descheduler")
	if len(np.Spec.Ingress) != 0 {
		t.Errorf("cronJob mode ingress %+v", np.Spec.Ingress)
	}
}

// TestChartTestPod: `helm test`'s pod is a test hook that only
// headroom-scheduler places, rendered only with tests.enabled.
func TestChartTestPod(t *testing.T) {
	const key = "Pod headroom-system/headroom-scheduler-test"
	if _, ok := renderChart(t)[key]; ok {
		t.Errorf("%s rendered by default", key)
	}
	pod := decodeTyped[*corev1.Pod](t, renderChart(t, "--set", "tests.enabled=true"), key)
	if pod.Annotations["helm.sh/hook"] != "test" {
		t.Errorf("annotations %v", pod.Annotations)
	}
	if pod.Spec.SchedulerName != "headroom-scheduler" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("schedulerName %q, restartPolicy %q", pod.Spec.SchedulerName, pod.Spec.RestartPolicy)
	}
	if _, ok := renderChart(t, "--set", "tests.enabled=true,scheduler.enabled=false")[key]; ok {
		t.Error("test pod rendered without the scheduler")
	}
}

// TestChartValuesDocumented: every key of values.yaml is in
// values.schema.json and in the README's values table. A table row's first
// cell names values as `a.b.c`, `.d` (a sibling of the value before it),
// `a.b.*` (everything under a.b) and "(also `x.`)" or "(also `x.y.`)" (the
// same values with x, or x.y, in place of as many leading keys); a row
// naming a value covers what is under it.
func TestChartValuesDocumented(t *testing.T) {
	var values map[string]any
	if err := yaml.Unmarshal(repoFile(t, filepath.Join(chartDir, "values.yaml")), &values); err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(repoFile(t, filepath.Join(chartDir, "values.schema.json")), &schema); err != nil {
		t.Fatal(err)
	}
	var documented []string
	tick := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(string(repoFile(t, filepath.Join(chartDir, "README.md"))), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell := strings.Split(line, " | ")[0]
		var paths, also []string
		last := ""
		for _, m := range tick.FindAllStringSubmatch(cell, -1) {
			tok := m[1]
			switch {
			case strings.HasSuffix(tok, "."):
				also = append(also, tok)
			case strings.HasPrefix(tok, "."):
				paths = append(paths, path.Dir(strings.ReplaceAll(last, ".", "/"))+tok)
			default:
				paths, last = append(paths, tok), tok
			}
		}
		for i := range paths {
			paths[i] = strings.ReplaceAll(paths[i], "/", ".")
		}
		for _, a := range also {
			for _, p := range paths[:len(paths):len(paths)] {
				segments := strings.Split(p, ".")
				if n := strings.Count(a, "."); n < len(segments) {
					paths = append(paths, a+strings.Join(segments[n:], "."))
				}
			}
		}
		documented = append(documented, paths...)
	}
	inReadme := func(key string) bool {
		for _, d := range documented {
			if d == key || strings.HasPrefix(key, d+".") || (strings.HasSuffix(d, ".*") && strings.HasPrefix(key, strings.TrimSuffix(d, "*"))) {
				return true
			}
		}
		return false
	}
	var walk func(prefix string, v map[string]any, node map[string]any)
	walk = func(prefix string, v map[string]any, node map[string]any) {
		props, _ := node["properties"].(map[string]any)
		for k, val := range v {
			key := strings.TrimPrefix(prefix+"."+k, ".")
			sub, ok := props[k].(map[string]any)
			if !ok {
				t.Errorf("values.yaml key %s is not in values.schema.json", key)
				continue
			}
			if m, isMap := val.(map[string]any); isMap && len(m) > 0 && sub["properties"] != nil {
				walk(key, m, sub)
				continue
			}
			if !inReadme(key) {
				t.Errorf("values.yaml key %s is not in README.md's values table", key)
			}
		}
	}
	walk("", values, schema)
}

// TestChartHelmTest installs the chart with its test pod and runs `helm
// test` against a real API server: it fails while no headroom-scheduler
// runs (the pod stays Pending), and succeeds once headroom-scheduler has
// placed the pod on a Node and the pod has finished (its status is set
// here, as a kubelet would set it).
func TestChartHelmTest(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	kube := func(args ...string) []string {
		return append(args, "--kubeconfig", cp.KubeconfigPath, "--namespace", chartNS)
	}

	if _, err := cp.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: chartNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Only the scheduler: no controllers run here to start the others.
	values := []string{"--set", "tests.enabled=true,descheduler.enabled=false,nodeAgent.enabled=false"}
	if out, err := helmCmd(append(kube("install", chartRelease, repoPath(t, chartDir)), values...)...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	// A Ready Node without taints for the scheduler to choose.
	node, err := cp.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{corev1.LabelOSStable: "linux", corev1.LabelHostname: "node-a"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Spec.Taints = nil
	if node, err = cp.Client.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	allocatable := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4"), corev1.ResourceMemory: resource.MustParse("8Gi"), corev1.ResourcePods: resource.MustParse("110")}
	node.Status = corev1.NodeStatus{
		Capacity: allocatable, Allocatable: allocatable,
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}},
	}
	if _, err := cp.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if out, err := helmCmd(kube("test", chartRelease, "--timeout", "5s")...); err == nil {
		t.Fatalf("helm test succeeded with no headroom-scheduler running:\n%s", out)
	}
	t.Logf("helm test without headroom-scheduler failed, as it should, after %v", time.Since(start).Round(time.Millisecond))
	pod, err := cp.Client.CoreV1().Pods(chartNS).Get(ctx, "headroom-scheduler-test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Spec.NodeName != "" || pod.Spec.SchedulerName != "headroom-scheduler" {
		t.Fatalf("test pod placed on %q by no scheduler; schedulerName %q", pod.Spec.NodeName, pod.Spec.SchedulerName)
	}

	// The next helm test makes a new pod: remove this one before a
	// scheduler can place it (a bound pod waits for a kubelet to go).
	if err := cp.Client.CoreV1().Pods(chartNS).Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}

	// headroom-scheduler with the configuration the chart installed.
	cm, err := cp.Client.CoreV1().ConfigMaps(chartNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=headroom-scheduler"})
	if err != nil || len(cm.Items) != 1 {
		t.Fatalf("scheduler ConfigMaps %v: %v", cm, err)
	}
	schedulerStart := time.Now()
	if _, err := cp.StartSchedulerWith(ctx, controlplane.SchedulerOptions{Kubeconfig: cp.KubeconfigPath}, []byte(cm.Items[0].Data["scheduler-config.yaml"])); err != nil {
		t.Fatal(err)
	}

	helmTest := make(chan error, 1)
	var helmOut string
	go func() {
		var err error
		helmOut, err = helmCmd(kube("test", chartRelease, "--timeout", "90s")...)
		helmTest <- err
	}()
	// The kubelet's part: the container ran and exited 0 on the node the
	// scheduler chose.
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cp.Client.CoreV1().Pods(chartNS).Get(ctx, "headroom-scheduler-test", metav1.GetOptions{})
		if err != nil || p.UID == pod.UID || p.Spec.NodeName == "" {
			return false, nil
		}
		if p.Spec.NodeName != "node-a" {
			return false, fmt.Errorf("test pod placed on %q", p.Spec.NodeName)
		}
		p.Status.Phase = corev1.PodSucceeded
		_, err = cp.Client.CoreV1().Pods(chartNS).UpdateStatus(ctx, p, metav1.UpdateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("headroom-scheduler did not place the test pod: %v", err)
	}
	if err := <-helmTest; err != nil {
		t.Fatalf("helm test: %v\n%s", err, helmOut)
	}
	if !strings.Contains(helmOut, "Succeeded") {
		t.Errorf("helm test:\n%s", helmOut)
	}
	t.Logf("helm test passed %v after headroom-scheduler started", time.Since(schedulerStart).Round(time.Millisecond))
}

// TestNodeAgentWritesAtTheDeschedulersThreshold holds the node agent's
// --pids-threshold-percent and --pressure-samples to the descheduler policy
// shipped beside it, as headroom-descheduler loads it (defaults applied):
// in manifests/ literally, in the chart derived from the policy it renders,
// also when pluginArgs move the threshold. An agent that disagreed would
// write ahead of the hysteresis at the wrong figure.
func TestNodeAgentWritesAtTheDeschedulersThreshold(t *testing.T) {
	const agentKey = "DaemonSet " + chartNS + "/headroom-node-agent"
	const cronKey = "CronJob " + chartNS + "/headroom-descheduler"
	check := func(t *testing.T, objs map[string]object) {
		t.Helper()
		args := deschedulerArgs[*relievenodepressure.RelieveNodePressureArgs](t, deschedulerPolicy(t, objs, cronKey), relievenodepressure.PluginName)
		c := podTemplates(t, objs)[agentKey].Spec.Containers[0]
		for _, want := range []string{
			fmt.Sprintf("--pids-threshold-percent=%d", *args.PIDs.ThresholdPercent),
			fmt.Sprintf("--pressure-samples=%d", *args.PressureSamples),
		} {
			if !slices.Contains(c.Args, want) {
				t.Errorf("node agent args %q lack %s, the policy's", c.Args, want)
			}
		}
	}
	t.Run("kustomize", func(t *testing.T) { check(t, renderKustomize(t)) })
	t.Run("chart", func(t *testing.T) { check(t, renderChart(t)) })
	t.Run("chart with pluginArgs", func(t *testing.T) {
		objs := renderChart(t, "--set", "descheduler.pluginArgs.RelieveNodePressure.pids.thresholdPercent=92,descheduler.pluginArgs.RelieveNodePressure.pids.targetPercent=85,descheduler.pluginArgs.RelieveNodePressure.pressureSamples=3")
		check(t, objs)
		if c := podTemplates(t, objs)[agentKey].Spec.Containers[0]; !slices.Contains(c.Args, "--pids-threshold-percent=92") {
			t.Errorf("node agent args %q: the threshold of pluginArgs (92) not taken", c.Args)
		}
	})
}

// chartNotes is the NOTES.txt a `helm install` of the chart with these
// flags prints (a client-side dry run: no cluster is asked).
func chartNotes(t *testing.T, flags ...string) string {
	t.Helper()
	args := append([]string{"install", chartRelease, repoPath(t, chartDir), "--namespace", chartNS, "--dry-run=client", "--kubeconfig", os.DevNull}, flags...)
	out, err := helmCmd(args...)
	if err != nil {
		t.Fatal(err)
	}
	_, notes, ok := strings.Cut(out, "\nNOTES:\n")
	if !ok {
		t.Fatalf("helm install --dry-run printed no NOTES:\n%s", out)
	}
	return notes
}

// TestChartSchedulerRenamed: scheduler.profile.schedulerName is the one
// value of the scheduler's name. A renamed install names it, and no longer
// headroom-scheduler, wherever the chart speaks of the scheduler's name:
// the profile, RelieveNodePressure's schedulerNames (the descheduler would
// otherwise evict no pod of the renamed scheduler), NOTES, the test pod, the
// alerts' expressions and the dashboard's queries. Object names
// (Deployment, ServiceAccount, Lease headroom-scheduler) are fixed and stay,
// as do job patterns that match them.
func TestChartSchedulerRenamed(t *testing.T) {
	const name = "my-sched"
	flags := []string{"--set", "scheduler.profile.schedulerName=" + name + ",prometheusRule.enabled=true,grafanaDashboard.enabled=true,tests.enabled=true"}
	objs := renderChart(t, flags...)

	cfg := schedulerConfig(t, objs)
	if len(cfg.Profiles) != 1 || cfg.Profiles[0].SchedulerName != name {
		t.Errorf("scheduler profiles %+v, want one named %s", cfg.Profiles, name)
	}
	for _, mode := range []string{"cronJob", "deployment"} {
		objs := renderChart(t, append(flags, "--set", "descheduler.mode="+mode)...)
		workload := "CronJob " + chartNS + "/headroom-descheduler"
		if mode == "deployment" {
			workload = "Deployment " + chartNS + "/headroom-descheduler"
		}
		args := deschedulerArgs[*relievenodepressure.RelieveNodePressureArgs](t, deschedulerPolicy(t, objs, workload), relievenodepressure.PluginName)
		if !reflect.DeepEqual(args.SchedulerNames, []string{name}) {
			t.Errorf("%s: RelieveNodePressure schedulerNames %q, want [%s]", mode, args.SchedulerNames, name)
		}
	}
	// Other names in schedulerNames stay; the shipped one is renamed.
	policyFlags := append(flags, "--set-json", `descheduler.pluginArgs={"RelieveNodePressure":{"schedulerNames":["headroom-scheduler","batch"]}}`)
	args := deschedulerArgs[*relievenodepressure.RelieveNodePressureArgs](t, deschedulerPolicy(t, renderChart(t, policyFlags...), "CronJob "+chartNS+"/headroom-descheduler"), relievenodepressure.PluginName)
	if !reflect.DeepEqual(args.SchedulerNames, []string{name, "batch"}) {
		t.Errorf("RelieveNodePressure schedulerNames %q, want [%s batch]", args.SchedulerNames, name)
	}

	// The namespace opt-in hands pods to the renamed scheduler.
	optIn := renderChart(t, append(flags, "--set", "namespaceOptIn.enabled=true")...)
	policies := 0
	for key, obj := range optIn {
		if !strings.HasPrefix(key, "MutatingAdmissionPolicy ") {
			continue
		}
		policies++
		text := fmt.Sprint(obj)
		if !strings.Contains(text, "schedulerName: '"+name+"'") || strings.Contains(text, "'headroom-scheduler'") {
			t.Errorf("%s does not set schedulerName %s alone: %s", key, name, text)
		}
	}
	if policies != 1 {
		t.Errorf("namespaceOptIn.enabled rendered %d MutatingAdmissionPolicies, want 1", policies)
	}

	pod := decodeTyped[*corev1.Pod](t, objs, "Pod "+chartNS+"/headroom-scheduler-test")
	if pod.Spec.SchedulerName != name {
		t.Errorf("test pod schedulerName %q, want %s", pod.Spec.SchedulerName, name)
	}

	notes := chartNotes(t, flags...)
	if !strings.Contains(notes, "schedulerName: "+name+"\n") || !strings.Contains(notes, "spec.schedulerName is "+name+" ") {
		t.Errorf("NOTES do not tell pods to name %s:\n%s", name, notes)
	}
	if strings.Contains(notes, "schedulerName: headroom-scheduler") || strings.Contains(notes, "schedulerName is headroom-scheduler") {
		t.Errorf("NOTES still name headroom-scheduler as the scheduler's name:\n%s", notes)
	}

	// A PromQL matcher on the scheduler's name: name=, profile= (with its
	// quotes escaped inside the dashboard's JSON strings).
	nameMatcher := regexp.MustCompile(`(?:name|profile)=\\?"([^"\\]*)\\?"`)
	checkQueries := func(what string, queries []string) {
		t.Helper()
		var found bool
		for _, q := range queries {
			for _, m := range nameMatcher.FindAllStringSubmatch(q, -1) {
				if m[1] == "headroom-scheduler" {
					t.Errorf("%s still matches headroom-scheduler: %s", what, q)
				}
				found = found || m[1] == name
			}
		}
		if !found {
			t.Errorf("no query of the %s matches %s", what, name)
		}
	}
	rule := objs["PrometheusRule "+chartNS+"/headroom"]
	var rules struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert, Expr string
					Annotations map[string]string
				}
			}
		}
	}
	data, _ := json.Marshal(rule)
	if err := json.Unmarshal(data, &rules); err != nil || len(rules.Spec.Groups) == 0 {
		t.Fatalf("PrometheusRule %s: %v", show(rule), err)
	}
	var exprs []string
	for _, g := range rules.Spec.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
			for _, text := range []string{r.Annotations["description"], r.Annotations["summary"]} {
				if regexp.MustCompile(`(schedulerName|pod\(s\) of)\s+headroom-scheduler\b`).MatchString(text) {
					t.Errorf("alert %s names headroom-scheduler as the scheduler's name: %s", r.Alert, text)
				}
			}
		}
	}
	checkQueries("alerts", exprs)

	_, dashboard := configMapData(t, objs, "headroom-dashboard.json")
	var queries []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && k == "expr" {
					queries = append(queries, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	var board any
	if err := json.Unmarshal([]byte(dashboard), &board); err != nil {
		t.Fatalf("dashboard is not JSON: %v", err)
	}
	walk(board)
	checkQueries("dashboard", queries)
	if strings.Contains(dashboard, "schedulerName headroom-scheduler") {
		t.Error("the dashboard's text names headroom-scheduler as the scheduler's name")
	}

	// A name no pod could carry fails the render, naming the value.
	if _, err := renderChartText(t, "--set", "scheduler.profile.schedulerName=My_Sched"); err == nil || !strings.Contains(err.Error(), "scheduler.profile.schedulerName") {
		t.Errorf("scheduler.profile.schedulerName=My_Sched: %v", err)
	}
}

// rbacKinds are the objects rbac.create=false leaves out.
var rbacKinds = []string{"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}

// TestChartRBACCreate: rbac.create=false renders no Role, ClusterRole or
// binding, with every optional grant switched on (deployment mode's
// leader election, Azure CNI, Calico IPAM, the metrics reader), and keeps
// the ServiceAccounts and the admission policies.
func TestChartRBACCreate(t *testing.T) {
	values := `
descheduler: {mode: deployment}
nodeAgent: {azureCNI: {enabled: true}}
scheduler: {calicoIPAM: {enabled: true}}
metrics: {serviceMonitor: {enabled: true}}
`
	count := func(objs map[string]object) int {
		n := 0
		for _, o := range objs {
			if slices.Contains(rbacKinds, fmt.Sprint(o["kind"])) {
				n++
			}
		}
		return n
	}
	if n := count(renderChart(t, "-f", valuesFile(t, values))); n == 0 {
		t.Fatal("rbac.create=true renders no RBAC object")
	}
	objs := renderChart(t, "-f", valuesFile(t, values+"rbac: {create: false}\n"))
	for key, o := range objs {
		if slices.Contains(rbacKinds, fmt.Sprint(o["kind"])) {
			t.Errorf("rbac.create=false renders %s", key)
		}
	}
	for _, key := range []string{
		"ServiceAccount " + chartNS + "/headroom-scheduler", "ServiceAccount " + chartNS + "/headroom-descheduler", "ServiceAccount " + chartNS + "/headroom-node-agent",
		"ValidatingAdmissionPolicy headroom-node-agent", "ValidatingAdmissionPolicy headroom-scheduler-leader-election", "ValidatingAdmissionPolicy headroom-descheduler-leader-election",
	} {
		if _, ok := objs[key]; !ok {
			t.Errorf("rbac.create=false renders no %s", key)
		}
	}
}

// TestChartServiceAccounts: per component, serviceAccount.create=false
// renders no ServiceAccount and the pods run as serviceAccount.name; that
// name is the one the RBAC bindings grant and the admission policies
// confine (they match its username), so a ServiceAccount of one's own is
// neither without rights nor unconfined.
func TestChartServiceAccounts(t *testing.T) {
	for _, tc := range []struct {
		component, shipped, workload, policy string
	}{
		{"scheduler", "headroom-scheduler", "Deployment " + chartNS + "/headroom-scheduler", "ValidatingAdmissionPolicy headroom-scheduler-leader-election"},
		{"descheduler", "headroom-descheduler", "Deployment " + chartNS + "/headroom-descheduler", "ValidatingAdmissionPolicy headroom-descheduler-leader-election"},
		{"nodeAgent", "headroom-node-agent", "DaemonSet " + chartNS + "/headroom-node-agent", "ValidatingAdmissionPolicy headroom-node-agent"},
	} {
		t.Run(tc.component, func(t *testing.T) {
			const name = "team-identity"
			for _, create := range []bool{false, true} {
				objs := renderChart(t, "--set", fmt.Sprintf("descheduler.mode=deployment,%s.serviceAccount.create=%t,%s.serviceAccount.name=%s", tc.component, create, tc.component, name))
				if _, ok := objs["ServiceAccount "+chartNS+"/"+tc.shipped]; ok {
					t.Errorf("create=%t: ServiceAccount %s rendered with name %s", create, tc.shipped, name)
				}
				if _, ok := objs["ServiceAccount "+chartNS+"/"+name]; ok != create {
					t.Errorf("create=%t: ServiceAccount %s rendered: %t", create, name, ok)
				}
				if got := podTemplates(t, objs)[tc.workload].Spec.ServiceAccountName; got != name {
					t.Errorf("create=%t: %s runs as %q, want %s", create, tc.workload, got, name)
				}
				var bindings int
				for key, o := range objs {
					if o["kind"] != "RoleBinding" && o["kind"] != "ClusterRoleBinding" {
						continue
					}
					var subjects []rbacv1.Subject
					if o["kind"] == "RoleBinding" {
						subjects = decodeTyped[*rbacv1.RoleBinding](t, objs, key).Subjects
					} else {
						subjects = decodeTyped[*rbacv1.ClusterRoleBinding](t, objs, key).Subjects
					}
					for _, s := range subjects {
						if s.Kind == rbacv1.ServiceAccountKind && s.Name == tc.shipped {
							t.Errorf("%s still binds %s", key, tc.shipped)
						}
						if s.Kind == rbacv1.ServiceAccountKind && s.Name == name {
							bindings++
						}
					}
				}
				if bindings == 0 {
					t.Errorf("no binding grants %s anything", name)
				}
				policy := decodeTyped[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objs, tc.policy)
				var matches string
				for _, mc := range policy.Spec.MatchConditions {
					matches += mc.Expression + "\n"
				}
				if !strings.Contains(matches, "'system:serviceaccount:"+chartNS+":"+name+"'") || strings.Contains(matches, ":"+tc.shipped+"'") {
					t.Errorf("%s matches\n%s\nwant the username of %s", tc.policy, matches, name)
				}
			}
		})
	}
	// By default: the contract's names, created.
	objs := renderChart(t)
	for _, name := range []string{"headroom-scheduler", "headroom-descheduler", "headroom-node-agent"} {
		if _, ok := objs["ServiceAccount "+chartNS+"/"+name]; !ok {
			t.Errorf("no ServiceAccount %s by default", name)
		}
	}
}

// TestChartNameOverridesRefused: the object names are fixed, so
// nameOverride and fullnameOverride fail the render with the reason.
func TestChartNameOverridesRefused(t *testing.T) {
	for _, key := range []string{"nameOverride", "fullnameOverride"} {
		_, err := renderChartText(t, "--set", key+"=other")
		if err == nil || !strings.Contains(err.Error(), key+`="other": refused`) || !strings.Contains(err.Error(), "object names are fixed") {
			t.Errorf("%s=other: %v", key, err)
		}
	}
}

// TestChartCronJobKnobs: each of the CronJob's values lands in the CronJob
// (or its Job template), and the defaults are kustomize's.
func TestChartCronJobKnobs(t *testing.T) {
	const key = "CronJob " + chartNS + "/headroom-descheduler"
	def := decodeTyped[*batchv1.CronJob](t, renderChart(t), key)
	if def.Spec.StartingDeadlineSeconds != nil || def.Spec.TimeZone != nil || def.Spec.JobTemplate.Spec.TTLSecondsAfterFinished != nil ||
		*def.Spec.SuccessfulJobsHistoryLimit != 3 || *def.Spec.FailedJobsHistoryLimit != 3 {
		t.Errorf("default CronJob spec %+v", def.Spec)
	}
	cj := decodeTyped[*batchv1.CronJob](t, renderChart(t, "-f", valuesFile(t, `
descheduler:
  startingDeadlineSeconds: 120
  successfulJobsHistoryLimit: 1
  failedJobsHistoryLimit: 5
  ttlSecondsAfterFinished: 600
  timeZone: Etc/UTC
`)), key)
	if got := cj.Spec.StartingDeadlineSeconds; got == nil || *got != 120 {
		t.Errorf("startingDeadlineSeconds %v", got)
	}
	if got := cj.Spec.SuccessfulJobsHistoryLimit; got == nil || *got != 1 {
		t.Errorf("successfulJobsHistoryLimit %v", got)
	}
	if got := cj.Spec.FailedJobsHistoryLimit; got == nil || *got != 5 {
		t.Errorf("failedJobsHistoryLimit %v", got)
	}
	if got := cj.Spec.JobTemplate.Spec.TTLSecondsAfterFinished; got == nil || *got != 600 {
		t.Errorf("ttlSecondsAfterFinished %v", got)
	}
	if got := cj.Spec.TimeZone; got == nil || *got != "Etc/UTC" {
		t.Errorf("timeZone %v", got)
	}
	// 0 is a value, not "unset".
	cj = decodeTyped[*batchv1.CronJob](t, renderChart(t, "--set", "descheduler.startingDeadlineSeconds=0,descheduler.ttlSecondsAfterFinished=0,descheduler.successfulJobsHistoryLimit=0"), key)
	if cj.Spec.StartingDeadlineSeconds == nil || *cj.Spec.StartingDeadlineSeconds != 0 || cj.Spec.JobTemplate.Spec.TTLSecondsAfterFinished == nil ||
		*cj.Spec.JobTemplate.Spec.TTLSecondsAfterFinished != 0 || *cj.Spec.SuccessfulJobsHistoryLimit != 0 {
		t.Errorf("zero values: %+v", cj.Spec)
	}
	if _, err := renderChartText(t, "--set", "descheduler.failedJobsHistoryLimit=-1"); err == nil || !strings.Contains(err.Error(), "failedJobsHistoryLimit") {
		t.Errorf("failedJobsHistoryLimit=-1: %v", err)
	}
}

// TestChartDeschedulerPDB: off by default; on, a PodDisruptionBudget that
// selects the descheduler Deployment's pods, in deployment mode only.
func TestChartDeschedulerPDB(t *testing.T) {
	const key = "PodDisruptionBudget " + chartNS + "/headroom-descheduler"
	if _, ok := renderChart(t, "--set", "descheduler.mode=deployment")[key]; ok {
		t.Errorf("%s rendered by default", key)
	}
	if _, ok := renderChart(t, "--set", "descheduler.podDisruptionBudget.enabled=true")[key]; ok {
		t.Errorf("%s rendered in cronJob mode", key)
	}
	objs := renderChart(t, "--set", "descheduler.mode=deployment,descheduler.podDisruptionBudget.enabled=true,descheduler.podDisruptionBudget.maxUnavailable=50%")
	pdb := decodeTyped[*policyv1.PodDisruptionBudget](t, objs, key)
	dep := decodeTyped[*appsv1.Deployment](t, objs, "Deployment "+chartNS+"/headroom-descheduler")
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
		t.Errorf("PDB selector %v does not select the Deployment's pods %v: %v", pdb.Spec.Selector, dep.Spec.Template.Labels, err)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.String() != "50%" || pdb.Spec.MinAvailable != nil {
		t.Errorf("PDB maxUnavailable %v, minAvailable %v", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}
}

// TestChartDeschedulerLeaderElectionValues: descheduler.leaderElection's
// values reach the flags the descheduler parses, the Role grants that
// Lease in its namespace, and the admission policy confines the
// descheduler to it; switched off with two replicas, the render fails.
func TestChartDeschedulerLeaderElectionValues(t *testing.T) {
	objs := renderChart(t, "-f", valuesFile(t, `
descheduler:
  mode: deployment
  leaderElection: {leaseName: my-lease, leaseNamespace: leases, leaseDuration: 30s, renewDeadline: 20s, retryPeriod: 4s}
`))
	args := decodeTyped[*appsv1.Deployment](t, objs, "Deployment "+chartNS+"/headroom-descheduler").Spec.Template.Spec.Containers[0].Args
	var le componentbaseconfig.LeaderElectionConfiguration
	fs := pflag.NewFlagSet("headroom-descheduler", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	componentbaseoptions.BindLeaderElectionFlags(&le, fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("descheduler args %q: %v", args, err)
	}
	want := componentbaseconfig.LeaderElectionConfiguration{
		LeaderElect: true, ResourceLock: "leases", ResourceName: "my-lease", ResourceNamespace: "leases",
		LeaseDuration: metav1.Duration{Duration: 30 * time.Second}, RenewDeadline: metav1.Duration{Duration: 20 * time.Second}, RetryPeriod: metav1.Duration{Duration: 4 * time.Second},
	}
	if le != want {
		t.Errorf("leader election %+v, want %+v", le, want)
	}
	role := decodeTyped[*rbacv1.Role](t, objs, "Role leases/headroom-descheduler-leader-election")
	granted := false
	for _, r := range role.Rules {
		granted = granted || (slices.Contains(r.Verbs, "update") && slices.Equal(r.ResourceNames, []string{"my-lease"}))
	}
	if !granted {
		t.Errorf("leader-election Role %+v grants no update of my-lease", role.Rules)
	}
	if rb := decodeTyped[*rbacv1.RoleBinding](t, objs, "RoleBinding leases/headroom-descheduler-leader-election"); rb.Subjects[0].Namespace != chartNS {
		t.Errorf("RoleBinding subjects %+v", rb.Subjects)
	}
	policy := decodeTyped[*admissionregistrationv1.ValidatingAdmissionPolicy](t, objs, "ValidatingAdmissionPolicy headroom-descheduler-leader-election")
	if v := policy.Spec.Validations; len(v) != 1 || v[0].Expression != "variables.lease == 'leases/my-lease'" {
		t.Errorf("policy validations %+v, want the Lease leases/my-lease", v)
	}

	if _, err := renderChartText(t, "--set", "descheduler.mode=deployment,descheduler.leaderElection.enabled=false"); err == nil ||
		!strings.Contains(err.Error(), "descheduler.leaderElection.enabled is false with descheduler.replicas=2") {
		t.Errorf("leader election off with 2 replicas: %v", err)
	}
	objs = renderChart(t, "--set", "descheduler.mode=deployment,descheduler.leaderElection.enabled=false,descheduler.replicas=1")
	args = decodeTyped[*appsv1.Deployment](t, objs, "Deployment "+chartNS+"/headroom-descheduler").Spec.Template.Spec.Containers[0].Args
	if !slices.Contains(args, "--leader-elect=false") || slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--leader-elect-") }) {
		t.Errorf("leader election off: args %q", args)
	}
	for _, key := range []string{"Role " + chartNS + "/headroom-descheduler-leader-election", "ValidatingAdmissionPolicy headroom-descheduler-leader-election"} {
		if _, ok := objs[key]; ok {
			t.Errorf("leader election off renders %s", key)
		}
	}
	if _, err := renderChartText(t, "--set", "descheduler.leaderElection.leaseDuration=15"); err == nil || !strings.Contains(err.Error(), "leaseDuration") {
		t.Errorf("leaseDuration=15: %v", err)
	}
}

// TestChartMetricsCertManager: with metrics.certManager on, each component
// that serves /metrics gets a cert-manager Certificate for its Service's
// names, serves /metrics with its Secret (mounted, --tls-cert-file and
// --tls-private-key-file), and the monitors verify that certificate: the
// Secret's ca.crt and a serverName the Certificate holds. Off, nothing of
// it renders; on, it needs an issuer.
func TestChartMetricsCertManager(t *testing.T) {
	for key, o := range renderChart(t, "--set", "metrics.serviceMonitor.enabled=true,descheduler.mode=deployment") {
		if o["kind"] == "Certificate" {
			t.Errorf("rendered %s with metrics.certManager off", key)
		}
	}
	if out, err := renderChartText(t, "--set", "metrics.certManager.enabled=true"); err == nil || !strings.Contains(err.Error(), "metrics.certManager.issuerRef.name") {
		t.Errorf("no issuer: err %v, want one naming metrics.certManager.issuerRef.name\n%.300s", err, out)
	}

	for mode, want := range map[string][]string{
		"cronJob":    {"headroom-node-agent", "headroom-scheduler"},
		"deployment": {"headroom-descheduler", "headroom-node-agent", "headroom-scheduler"},
	} {
		t.Run(mode, func(t *testing.T) {
			objs := renderChart(t, "--set", "descheduler.mode="+mode, "-f", valuesFile(t, `
metrics:
  certManager: {enabled: true, issuerRef: {name: headroom-ca, kind: ClusterIssuer}, duration: 720h}
  serviceMonitor: {enabled: true}
  podMonitor: {enabled: true}
`))
			var got []string
			for key, o := range objs {
				if o["kind"] != "Certificate" {
					continue
				}
				md := o["metadata"].(map[string]any)
				name := strings.TrimSuffix(md["name"].(string), "-metrics")
				got = append(got, name)
				spec := o["spec"].(map[string]any)
				if show(spec["issuerRef"]) != `{"group":"cert-manager.io","kind":"ClusterIssuer","name":"headroom-ca"}` || spec["duration"] != "720h" {
					t.Errorf("%s: issuerRef %s, duration %v", key, show(spec["issuerRef"]), spec["duration"])
				}
				secret := spec["secretName"].(string)
				serverName := name + "-metrics." + chartNS + ".svc"
				if !slices.Contains(spec["dnsNames"].([]any), any(serverName)) {
					t.Errorf("%s: dnsNames %v lack %s", key, spec["dnsNames"], serverName)
				}
				// The monitors verify this certificate.
				for _, kind := range []string{"ServiceMonitor", "PodMonitor"} {
					mon := objs[kind+" "+chartNS+"/"+name]["spec"].(map[string]any)
					eps, _ := mon["endpoints"].([]any)
					if kind == "PodMonitor" {
						eps, _ = mon["podMetricsEndpoints"].([]any)
					}
					wantTLS := `{"ca":{"secret":{"key":"ca.crt","name":"` + secret + `"}},"serverName":"` + serverName + `"}`
					if tls := show(eps[0].(map[string]any)["tlsConfig"]); tls != wantTLS {
						t.Errorf("%s %s: tlsConfig %s, want %s", kind, name, tls, wantTLS)
					}
				}
				// The component serves /metrics with it.
				found := false
				for ptKey, pt := range podTemplates(t, objs) {
					if pt.Labels["app.kubernetes.io/name"] != name {
						continue
					}
					found = true
					c := pt.Spec.Containers[0]
					mount := ""
					for _, m := range c.VolumeMounts {
						for _, v := range pt.Spec.Volumes {
							if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == secret {
								mount = m.MountPath
							}
						}
					}
					if mount == "" || !slices.Contains(c.Args, "--tls-cert-file="+mount+"/tls.crt") || !slices.Contains(c.Args, "--tls-private-key-file="+mount+"/tls.key") {
						t.Errorf("%s: mounts %v, args %v: want Secret %s mounted and its tls.crt and tls.key served", ptKey, c.VolumeMounts, c.Args, secret)
					}
				}
				if !found {
					t.Errorf("%s: no pod template of %s", key, name)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Errorf("Certificates for %v, want %v", got, want)
			}
			if mode == "cronJob" {
				for key, pt := range podTemplates(t, objs) {
					if strings.Contains(show(pt.Spec), "metrics-tls") && pt.Labels["app.kubernetes.io/name"] == "headroom-descheduler" {
						t.Errorf("%s: the CronJob's runs serve no /metrics, but mount a certificate", key)
					}
				}
			}
		})
	}
}
