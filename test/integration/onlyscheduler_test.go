package integration

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/plugins/nodepids"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// The samples of docs/scheduling.md: Headroom's profile as the cluster's
// only scheduler.
const (
	onlySchedulerConfig    = "manifests/samples/default-scheduler-config.yaml"
	onlySchedulerStaticPod = "manifests/samples/kube-scheduler-static-pod.yaml"
)

// decodeSchedulerConfig decodes a KubeSchedulerConfiguration with
// kube-scheduler's defaults, Headroom's args typed.
func decodeSchedulerConfig(t *testing.T, rel string) *schedconfig.KubeSchedulerConfiguration {
	t.Helper()
	obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode(repoFile(t, rel), nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return obj.(*schedconfig.KubeSchedulerConfiguration)
}

// TestHeadroomAsOnlyScheduler holds the samples of a self-managed control
// plane to what docs/scheduling.md says: the one profile,
// default-scheduler, has the shipped profile's plugins and args; the
// static pod mounts the files the flags and the config name; run as the
// user system:kube-scheduler with its built-in RBAC alone, on its default
// Lease, headroom-scheduler places a pod that names no scheduler, keeping
// it off a node short of PIDs (NodePIDs' Filter), and reports the
// placement as default-scheduler.
func TestHeadroomAsOnlyScheduler(t *testing.T) {
	shipped := decodeSchedulerConfig(t, "manifests/scheduler/scheduler-config.yaml")
	sample := decodeSchedulerConfig(t, onlySchedulerConfig)
	if len(sample.Profiles) != 1 || sample.Profiles[0].SchedulerName != corev1.DefaultSchedulerName {
		t.Fatalf("%s has profiles %v, want one, default-scheduler", onlySchedulerConfig, sample.Profiles)
	}
	if !apiequality.Semantic.DeepEqual(sample.Profiles[0].Plugins, shipped.Profiles[0].Plugins) ||
		!apiequality.Semantic.DeepEqual(sample.Profiles[0].PluginConfig, shipped.Profiles[0].PluginConfig) {
		t.Errorf("%s: the profile's plugins or pluginConfig differ from manifests/scheduler/scheduler-config.yaml's", onlySchedulerConfig)
	}
	le := sample.LeaderElection
	if !le.LeaderElect || le.ResourceNamespace != metav1.NamespaceSystem || le.ResourceName != "kube-scheduler" {
		t.Errorf("leader election %+v, want kube-scheduler's Lease kube-system/kube-scheduler", le)
	}

	// The static pod: --config and the config's kubeconfig are mounted.
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(repoFile(t, onlySchedulerStaticPod), nil, nil)
	if err != nil {
		t.Fatalf("%s: %v", onlySchedulerStaticPod, err)
	}
	pod := obj.(*corev1.Pod)
	c := pod.Spec.Containers[0]
	var mounted []string
	for _, m := range c.VolumeMounts {
		mounted = append(mounted, m.MountPath)
	}
	want := []string{sample.ClientConnection.Kubeconfig}
	for _, arg := range c.Command {
		for _, flag := range []string{"--config=", "--authentication-kubeconfig=", "--authorization-kubeconfig="} {
			if path, ok := strings.CutPrefix(arg, flag); ok {
				want = append(want, path)
			}
		}
	}
	for _, path := range want {
		if !slices.Contains(mounted, path) {
			t.Errorf("%s mounts %v, not %s", onlySchedulerStaticPod, mounted, path)
		}
	}
	if len(want) != 4 || c.Command[0] != "/headroom-scheduler" {
		t.Errorf("%s runs %v", onlySchedulerStaticPod, c.Command)
	}

	cp := controlplane.StartForTest(t, controlplane.Options{Kwok: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The admin's kubeconfig, acting as the user kubeadm's scheduler.conf
	// authenticates as.
	kc, err := clientcmd.LoadFromFile(cp.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range kc.AuthInfos {
		a.Impersonate = "system:kube-scheduler"
	}
	kubeconfig := filepath.Join(cp.Dir, "scheduler.conf")
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		t.Fatal(err)
	}
	if _, err := cp.StartSchedulerWith(ctx, controlplane.SchedulerOptions{Name: "kube-scheduler", Kubeconfig: kubeconfig, LeaderElection: true},
		repoFile(t, onlySchedulerConfig)); err != nil {
		t.Fatal(err)
	}

	sample0 := time.Now().Add(-30 * time.Second).UTC().Truncate(time.Second)
	pidNode(ctx, t, cp, "short", &pidstats.NodeStats{Capacity: 32768, Used: 32000, SampledAt: sample0})
	pods := cp.Client.CoreV1().Pods(metav1.NamespaceDefault)
	if _, err := pods.Create(ctx, newPod("app", "", nil, nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cond := waitUnschedulable(ctx, t, cp.Client, metav1.NamespaceDefault, "app", "which is short of PIDs")
	if !strings.Contains(cond.Message, nodepids.ErrReasonTooFewPIDs) {
		t.Errorf("PodScheduled condition %q, want NodePIDs' %q", cond.Message, nodepids.ErrReasonTooFewPIDs)
	}
	pidNode(ctx, t, cp, "roomy", &pidstats.NodeStats{Capacity: 32768, Used: 1000, SampledAt: time.Now().UTC()})
	if node := waitBound(ctx, t, cp.Client, metav1.NamespaceDefault, "app"); node != "roomy" {
		t.Errorf("app bound to %q, want roomy", node)
	}
	if by := scheduledBy(ctx, t, cp, metav1.NamespaceDefault, "app"); by != corev1.DefaultSchedulerName {
		t.Errorf("Scheduled Event of app reported by %q, want %s", by, corev1.DefaultSchedulerName)
	}
	var holder string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		lease, err := cp.Client.CoordinationV1().Leases(metav1.NamespaceSystem).Get(ctx, "kube-scheduler", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		if lease.Spec.HolderIdentity != nil {
			holder = *lease.Spec.HolderIdentity
		}
		return holder != "", nil
	})
	if err != nil {
		t.Errorf("no holder of the Lease kube-system/kube-scheduler: %v", err)
	}
}
