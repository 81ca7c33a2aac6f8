package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	schedconfig "k8s.io/kubernetes/pkg/scheduler/apis/config"
	schedscheme "k8s.io/kubernetes/pkg/scheduler/apis/config/scheme"

	_ "github.com/headroom-k8s/headroom/apis/config/scheme"
	"github.com/headroom-k8s/headroom/test/controlplane"
)

// TestManifestsApply applies the shipped kustomize tree (kubectl apply -k
// manifests/) to a real API server, so every object passes the server's
// schema validation, and checks that the scheduler ConfigMap it created
// holds a KubeSchedulerConfiguration the scheduler accepts.
func TestManifestsApply(t *testing.T) {
	cp := controlplane.StartForTest(t, controlplane.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	_, file, _, _ := runtime.Caller(0)
	manifests := filepath.Join(filepath.Dir(file), "..", "..", "manifests")
	kubectl := filepath.Join(cp.BinDir, "kubectl")
	for _, verb := range []string{"apply", "get"} {
		out, err := exec.CommandContext(ctx, kubectl, "--kubeconfig", cp.KubeconfigPath, verb, "-k", manifests).CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl %s -k manifests/: %v\n%s", verb, err, out)
		}
	}

	cms, err := cp.Client.CoreV1().ConfigMaps("headroom-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cm := range cms.Items {
		data, ok := cm.Data["scheduler-config.yaml"]
		if !ok {
			continue
		}
		found = true
		obj, _, err := schedscheme.Codecs.UniversalDecoder().Decode([]byte(data), nil, nil)
		if err != nil {
			t.Fatalf("ConfigMap %s: scheduler config does not decode: %v", cm.Name, err)
		}
		cfg := obj.(*schedconfig.KubeSchedulerConfiguration)
		var names []string
		for _, p := range cfg.Profiles {
			names = append(names, p.SchedulerName)
		}
		if !strings.Contains(strings.Join(names, ","), "headroom-scheduler") {
			t.Errorf("shipped profiles %v lack schedulerName headroom-scheduler", names)
		}
	}
	if !found {
		t.Error("no ConfigMap in headroom-system holds scheduler-config.yaml")
	}
}
