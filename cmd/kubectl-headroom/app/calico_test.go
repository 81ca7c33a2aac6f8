package app

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"

	"github.com/headroom-k8s/headroom/pkg/calicoipam"
	"github.com/headroom-k8s/headroom/pkg/calicoipam/calicotest"
)

const calicoSchedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: headroom-scheduler
  plugins:
    multiPoint:
      enabled:
      - name: NodeIPs
  pluginConfig:
  - name: NodeIPs
    args:
      ipSource: CalicoIPAM
`

// With NodeIPs' ipSource CalicoIPAM, nodes shows the pod-IP figures of
// Calico's objects, listed once, for a node without annotations ("blank":
// 10 of its block's 16 used, no block left to claim); where they cannot
// be listed, it says why and shows them unknown.
func TestNodesWithCalicoIPAMSource(t *testing.T) {
	obj := func(m map[string]any) runtime.Object { return &unstructured.Unstructured{Object: m} }
	calico := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		calicoipam.IPAMBlocks: "IPAMBlockList", calicoipam.IPPools: "IPPoolList", calicoipam.IPAMConfigs: "IPAMConfigList",
	}, obj(calicotest.IPPool("p", "10.0.0.0/28", 28)), obj(calicotest.IPAMConfig(true, 1)),
		obj(calicotest.Block("10.0.0.0/28", "host:blank", calicotest.Pods("blank", 0, 10))))
	cfg := writeFile(t, "config.yaml", calicoSchedulerConfig)
	nodes := func(dyn func() (dynamic.Interface, error)) (string, string) {
		var out, errOut bytes.Buffer
		o := &options{
			streams:          genericiooptions.IOStreams{In: &bytes.Buffer{}, Out: &out, ErrOut: &errOut},
			config:           genericclioptions.NewConfigFlags(false),
			newClient:        func() (kubernetes.Interface, error) { return headroomCluster(), nil },
			newDynamicClient: dyn,
		}
		cmd := newCommand(o)
		cmd.SetArgs([]string{"nodes", "--config", cfg})
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			t.Fatal(err)
		}
		return out.String(), errOut.String()
	}
	row := func(out, node string) []string {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == node {
				return f
			}
		}
		t.Fatalf("no row for %s in\n%s", node, out)
		return nil
	}
	out, _ := nodes(func() (dynamic.Interface, error) { return calico, nil })
	header := strings.Fields(strings.SplitN(out, "\n", 2)[0])
	col := func(name string) int {
		for i, h := range header {
			if h == name {
				return i
			}
		}
		t.Fatalf("no column %s in %v", name, header)
		return -1
	}
	blank := row(out, "blank")
	if got := blank[col("POD-IPS")] + " " + blank[col("POD-IPS-FREE(EST)")]; got != "16 6" {
		t.Errorf("blank's pod IPs %q, want capacity 16 and 6 free from Calico's block\n%s", got, out)
	}

	out, errOut := nodes(func() (dynamic.Interface, error) { return nil, errors.New("no kubeconfig") })
	if !strings.Contains(errOut, "ipSource CalicoIPAM") || !strings.Contains(errOut, "no kubeconfig") {
		t.Errorf("stderr %q, want why Calico's objects could not be listed", errOut)
	}
	if blank := row(out, "blank"); blank[col("POD-IPS")] == "16" {
		t.Errorf("blank's pod IPs known without Calico's objects:\n%s", out)
	}
}
