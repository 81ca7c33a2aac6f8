package app

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"

	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	headroomconfig "github.com/headroom-k8s/headroom/apis/config"
)

func TestSetup(t *testing.T) {
	ctx := context.Background()
	client := fake.NewClientset()
	var errOut bytes.Buffer
	o := &options{
		streams:         genericiooptions.IOStreams{ErrOut: &errOut},
		systemNamespace: defaultSystemNamespace,
		newClient:       func() (kubernetes.Interface, error) { return client, nil },
	}
	s, err := o.setup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.profile.cfg.SchedulerName != headroomconfig.SchedulerName || s.pidArgs == nil || s.oomArgs == nil || s.client != client {
		t.Errorf("session %+v", s)
	}
	// Without a headroom-scheduler in the cluster: the built-in default,
	// and a note that says why.
	if got := errOut.String(); !strings.Contains(got, `Note: the running headroom-scheduler's configuration could not be read (deployments.apps "headroom-scheduler" not found)`) ||
		!strings.Contains(got, `Using profile "headroom-scheduler" of the built-in default`) {
		t.Errorf("stderr:\n%s", got)
	}
	// A profile that the file given lacks fails before connecting; a
	// client that cannot be made fails the setup.
	o.schedulerConfig = writeFile(t, "config.yaml", "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n")
	o.schedulerName = "nope"
	o.newClient = func() (kubernetes.Interface, error) { t.Fatal("connected for a missing profile"); return nil, nil }
	if _, err := o.setup(ctx); err == nil || !strings.Contains(err.Error(), `no profile with schedulerName "nope"`) {
		t.Errorf("err = %v", err)
	}
	o.schedulerConfig, o.schedulerName = "", ""
	o.newClient = func() (kubernetes.Interface, error) { return nil, errors.New("no kubeconfig") }
	if _, err := o.setup(ctx); err == nil || !strings.Contains(err.Error(), "no kubeconfig") {
		t.Errorf("err = %v", err)
	}
}
