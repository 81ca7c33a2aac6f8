package app

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/headroom-k8s/headroom/apis/kubectl/v1alpha1"
	"github.com/headroom-k8s/headroom/manifests"
)

// podSpec mounts ConfigMap cm at /etc/headroom and runs args.
func podSpec(cm string, args ...string) corev1.PodSpec {
	return corev1.PodSpec{
		Containers: []corev1.Container{{Name: "main", Image: "x", Args: args,
			VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/headroom", ReadOnly: true}}}},
		Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
			ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm}}}}},
	}
}

// schedulerObjects are the shipped scheduler's Deployment and its
// ConfigMap, whose configuration is the shipped one edited by edit.
func schedulerObjects(edit func(string) string) []runtime.Object {
	return []runtime.Object{
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "headroom-system", Name: "headroom-scheduler"},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: podSpec("headroom-scheduler-config-abc", "--config=/etc/headroom/scheduler-config.yaml", "--v=2")}}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "headroom-system", Name: "headroom-scheduler-config-abc"},
			Data: map[string]string{"scheduler-config.yaml": edit(string(manifests.SchedulerConfig))}},
	}
}

// The cluster's scheduler configuration is the default: its NodePIDs
// maxSampleAge of 30s makes short's minute-old PID sample stale, and the
// output says which ConfigMap it used. --config overrides it.
func TestNodesUseTheClusterSchedulerConfiguration(t *testing.T) {
	shortAge := func(s string) string {
		// The first maxSampleAge is NodePIDs'.
		i := strings.Index(s, "\n  - name: NodePIDs\n")
		j := strings.Index(s, "\n  - name: NodeIPs\n")
		if i < 0 || j < i || !strings.Contains(s[i:j], "maxSampleAge: 10m\n") {
			t.Fatal("the shipped configuration no longer sets NodePIDs' maxSampleAge: 10m")
		}
		return s[:i] + strings.Replace(s[i:j], "maxSampleAge: 10m\n", "maxSampleAge: 30s\n", 1) + s[j:]
	}
	client := headroomCluster()
	for _, o := range schedulerObjects(shortAge) {
		if err := client.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, err := runStreams(t, client, "nodes", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	const source = "ConfigMap headroom-system/headroom-scheduler-config-abc (key scheduler-config.yaml, mounted by Deployment headroom-system/headroom-scheduler)"
	if want := `Using profile "headroom-scheduler" of ` + source; !strings.Contains(errOut, want) || strings.Contains(errOut, "Note:") {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
	list := decodeList(t, out)
	if list.SchedulerConfiguration != source {
		t.Errorf("schedulerConfiguration %q", list.SchedulerConfiguration)
	}
	if st := item(t, list, "short").PIDs.State; st != v1alpha1.StateStale {
		t.Errorf("short's PIDs with maxSampleAge 30s: %s, want stale", st)
	}
	// The same cluster with --config of the shipped file: known.
	file := writeFile(t, "config.yaml", string(manifests.SchedulerConfig))
	out, errOut, err = runStreams(t, client, "nodes", "-o", "json", "--config", file)
	if err != nil {
		t.Fatal(err)
	}
	if st := item(t, decodeList(t, out), "short").PIDs.State; st != v1alpha1.StateKnown || !strings.Contains(errOut, "of "+file) {
		t.Errorf("--config: short's PIDs %s, stderr %q", st, errOut)
	}
	// A ConfigMap that is gone: the built-in default, and why.
	if err := client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("configmaps"), "headroom-system", "headroom-scheduler-config-abc"); err != nil {
		t.Fatal(err)
	}
	out, errOut, err = runStreams(t, client, "nodes", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, `Note: the running headroom-scheduler's configuration could not be read (Deployment headroom-system/headroom-scheduler mounts ConfigMap headroom-system/headroom-scheduler-config-abc: configmaps "headroom-scheduler-config-abc" not found)`) ||
		item(t, decodeList(t, out), "short").PIDs.State != v1alpha1.StateKnown {
		t.Errorf("without the ConfigMap: stderr %q", errOut)
	}
}

func decodeList(t *testing.T, out string) *v1alpha1.NodeHeadroomList {
	t.Helper()
	obj, _, err := v1alpha1.Codecs.UniversalDeserializer().Decode([]byte(out), nil, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return obj.(*v1alpha1.NodeHeadroomList)
}

func item(t *testing.T, l *v1alpha1.NodeHeadroomList, name string) *v1alpha1.NodeHeadroom {
	t.Helper()
	for i := range l.Items {
		if l.Items[i].Name == name {
			return &l.Items[i]
		}
	}
	t.Fatalf("no item %s", name)
	return nil
}

// The descheduler's policy is the CronJob's, else the Deployment's: with a
// threshold of 100 % in the cluster's policy, hot (99 % used) is within
// it.
func TestEvictionsUseTheClusterPolicy(t *testing.T) {
	policy := strings.Replace(string(manifests.DeschedulerPolicy), "thresholdPercent: 95", "thresholdPercent: 100", 1)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "headroom-system", Name: "headroom-descheduler-policy-xyz"},
		Data: map[string]string{"policy.yaml": policy}}
	spec := podSpec("headroom-descheduler-policy-xyz", "--policy-config-file", "/etc/headroom/policy.yaml", "--descheduling-interval=0")
	for _, tc := range []struct {
		name     string
		workload runtime.Object
		source   string
	}{
		{"CronJob", &batchv1.CronJob{ObjectMeta: metav1.ObjectMeta{Namespace: "headroom-system", Name: "headroom-descheduler"},
			Spec: batchv1.CronJobSpec{JobTemplate: batchv1.JobTemplateSpec{Spec: batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}}},
			"ConfigMap headroom-system/headroom-descheduler-policy-xyz (key policy.yaml, mounted by CronJob headroom-system/headroom-descheduler)"},
		{"Deployment", &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "headroom-system", Name: "headroom-descheduler"},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: spec}}},
			"ConfigMap headroom-system/headroom-descheduler-policy-xyz (key policy.yaml, mounted by Deployment headroom-system/headroom-descheduler)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := evictionsCluster()
			for _, o := range []runtime.Object{cm, tc.workload} {
				if err := client.Tracker().Add(o); err != nil {
					t.Fatal(err)
				}
			}
			out, errOut, err := runStreams(t, client, "evictions", "hot")
			if err != nil {
				t.Fatalf("%v\n%s", err, errOut)
			}
			if !strings.Contains(errOut, "Using the DeschedulerPolicy of "+tc.source) || !strings.Contains(out, `profile "headroom" of `+tc.source) {
				t.Errorf("stderr %q, output\n%s\nwant %s", errOut, out, tc.source)
			}
			if !strings.Contains(out, "within thresholds: nothing to evict") {
				t.Errorf("with the cluster's threshold of 100 %%:\n%s", out)
			}
		})
	}
	// Without either: the built-in policy, and why.
	out, errOut, err := runStreams(t, evictionsCluster(), "evictions", "hot")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut, "Note: the running headroom-descheduler's policy could not be read (neither CronJob nor Deployment headroom-system/headroom-descheduler found)") ||
		!strings.Contains(out, "plan: 3 eviction(s)") {
		t.Errorf("stderr %q, output\n%s", errOut, out)
	}
}

// configMapKey follows the mount to the key: a directory mount, a subPath
// mount, a volume that projects items, and the longest mount path wins.
func TestConfigMapKey(t *testing.T) {
	vol := func(name, cm string, items ...corev1.KeyToPath) corev1.Volume {
		return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Items: items}}}
	}
	spec := &corev1.PodSpec{Volumes: []corev1.Volume{
		vol("dir", "cm-dir"),
		vol("sub", "cm-sub"),
		vol("items", "cm-items", corev1.KeyToPath{Key: "the-key", Path: "nested/config.yaml"}),
		vol("inner", "cm-inner"),
		{Name: "empty", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
	}}
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "dir", MountPath: "/etc/a"},
		{Name: "inner", MountPath: "/etc/a/inner/"},
		{Name: "sub", MountPath: "/etc/b/config.yaml", SubPath: "sub-key"},
		{Name: "items", MountPath: "/etc/c"},
		{Name: "empty", MountPath: "/tmp"},
	}}
	for _, tc := range []struct{ file, want string }{
		{"/etc/a/config.yaml", "cm-dir config.yaml"},
		{"/etc/a/inner/x.yaml", "cm-inner x.yaml"},
		{"/etc/b/config.yaml", "cm-sub sub-key"},
		{"/etc/c/nested/config.yaml", "cm-items the-key"},
		{"/etc/c/other.yaml", "error: projects no item"},
		{"/tmp/config.yaml", "error: not a ConfigMap"},
		{"/opt/config.yaml", "error: no volume is mounted there"},
	} {
		name, key, err := configMapKey(spec, c, tc.file)
		got := name + " " + key
		if err != nil {
			got = "error: " + err.Error()
		}
		if !strings.HasPrefix(got, tc.want) && !(strings.HasPrefix(tc.want, "error: ") && strings.Contains(got, strings.TrimPrefix(tc.want, "error: "))) {
			t.Errorf("%s: %q, want %q", tc.file, got, tc.want)
		}
	}
	if got := flagValue([]string{"--config", "/a", "--v=2", "--config=/b"}, "--config"); got != "/b" {
		t.Errorf("flagValue: %q, want the last one, /b", got)
	}
}
