package app

import (
	"context"
	"fmt"
	"path"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The shipped workloads (manifests/, the Helm chart) whose configuration
// kubectl-headroom reads by default, and the flags that name their files.
const (
	defaultSystemNamespace = "headroom-system"
	schedulerWorkload      = "headroom-scheduler"
	schedulerConfigFlag    = "--config"
	deschedulerWorkload    = "headroom-descheduler"
	deschedulerPolicyFlag  = "--policy-config-file"
)

// configFile is a configuration file a workload of the cluster reads: the
// data of the ConfigMap key mounted where its flag points.
type configFile struct {
	data []byte
	// source says where it came from, for the output.
	source string
}

// schedulerConfigOf reads the configuration the running headroom-scheduler
// was started with: its Deployment's --config, the volume mounted there, and
// that volume's ConfigMap (headroom-scheduler-config-<hash>).
func schedulerConfigOf(ctx context.Context, client kubernetes.Interface, ns string) (*configFile, error) {
	d, err := client.AppsV1().Deployments(ns).Get(ctx, schedulerWorkload, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	return mountedFile(ctx, client, ns, "Deployment "+ns+"/"+d.Name, &d.Spec.Template.Spec, schedulerConfigFlag)
}

// deschedulerPolicyOf reads the policy the shipped headroom-descheduler
// runs: the CronJob's, or the Deployment's where the descheduler runs as
// one (manifests/descheduler-deployment, the chart's descheduler.mode).
func deschedulerPolicyOf(ctx context.Context, client kubernetes.Interface, ns string) (*configFile, error) {
	cj, err := client.BatchV1().CronJobs(ns).Get(ctx, deschedulerWorkload, metav1.GetOptions{})
	if err == nil {
		return mountedFile(ctx, client, ns, "CronJob "+ns+"/"+cj.Name, &cj.Spec.JobTemplate.Spec.Template.Spec, deschedulerPolicyFlag)
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	d, err2 := client.AppsV1().Deployments(ns).Get(ctx, deschedulerWorkload, metav1.GetOptions{})
	if err2 != nil {
		if apierrors.IsNotFound(err2) {
			return nil, fmt.Errorf("neither CronJob nor Deployment %s/%s found", ns, deschedulerWorkload)
		}
		return nil, err2
	}
	return mountedFile(ctx, client, ns, "Deployment "+ns+"/"+d.Name, &d.Spec.Template.Spec, deschedulerPolicyFlag)
}

// mountedFile follows a container's flag (--flag=PATH or --flag PATH) to
// the ConfigMap volume mounted at PATH or above it, and reads the key the
// file is.
func mountedFile(ctx context.Context, client kubernetes.Interface, ns, workload string, spec *corev1.PodSpec, flag string) (*configFile, error) {
	for _, c := range spec.Containers {
		file := flagValue(append(append([]string{}, c.Command...), c.Args...), flag)
		if file == "" {
			continue
		}
		cmName, key, err := configMapKey(spec, &c, file)
		if err != nil {
			return nil, fmt.Errorf("%s: %s=%s: %w", workload, flag, file, err)
		}
		cm, err := client.CoreV1().ConfigMaps(ns).Get(ctx, cmName, metav1.GetOptions{})
		if err != nil {
			return nil, fmt.Errorf("%s mounts ConfigMap %s/%s: %w", workload, ns, cmName, err)
		}
		data, ok := cm.Data[key]
		if !ok {
			return nil, fmt.Errorf("ConfigMap %s/%s (mounted by %s) has no key %q", ns, cmName, workload, key)
		}
		return &configFile{
			data:   []byte(data),
			source: fmt.Sprintf("ConfigMap %s/%s (key %s, mounted by %s)", ns, cmName, key, workload),
		}, nil
	}
	return nil, fmt.Errorf("%s: no container has a %s flag", workload, flag)
}

// flagValue is the value of flag in args, the last one given, as pflag
// reads it; "" when absent.
func flagValue(args []string, flag string) string {
	v := ""
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, flag+"="):
			v = strings.TrimPrefix(a, flag+"=")
		case a == flag && i+1 < len(args):
			v = args[i+1]
		}
	}
	return v
}

// configMapKey finds the ConfigMap volume mounted in container c that holds
// file, and the key of the ConfigMap the file is.
func configMapKey(spec *corev1.PodSpec, c *corev1.Container, file string) (name, key string, err error) {
	file = path.Clean(file)
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		m := &c.VolumeMounts[i]
		mp := path.Clean(m.MountPath)
		if (m.SubPath != "" && file == mp) || (m.SubPath == "" && strings.HasPrefix(file, mp+"/")) {
			if mount == nil || len(mp) > len(path.Clean(mount.MountPath)) {
				mount = m
			}
		}
	}
	if mount == nil {
		return "", "", fmt.Errorf("no volume is mounted there")
	}
	for _, v := range spec.Volumes {
		if v.Name != mount.Name {
			continue
		}
		if v.ConfigMap == nil {
			return "", "", fmt.Errorf("volume %s is not a ConfigMap", v.Name)
		}
		rel := mount.SubPath
		if rel == "" {
			rel = strings.TrimPrefix(file, path.Clean(mount.MountPath)+"/")
		}
		if len(v.ConfigMap.Items) == 0 {
			return v.ConfigMap.Name, rel, nil
		}
		for _, it := range v.ConfigMap.Items {
			if path.Clean(it.Path) == rel {
				return v.ConfigMap.Name, it.Key, nil
			}
		}
		return "", "", fmt.Errorf("ConfigMap volume %s projects no item to %s", v.Name, rel)
	}
	return "", "", fmt.Errorf("volume %s not found", mount.Name)
}
