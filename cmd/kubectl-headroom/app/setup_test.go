package app

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	headroomconfig "github.com/headroom-k8s/headroom/apis/config"
)

func TestSetup(t *testing.T) {
	client := fake.NewClientset()
	o := &options{newClient: func() (kubernetes.Interface, error) { return client, nil }}
	s, err := o.setup()
	if err != nil {
		t.Fatal(err)
	}
	if s.profile.cfg.SchedulerName != headroomconfig.SchedulerName || s.pidArgs == nil || s.oomArgs == nil || s.client != client {
		t.Errorf("session %+v", s)
	}
	// A profile that does not exist fails before connecting; a client that
	// cannot be made fails the setup.
	o.schedulerName = "nope"
	o.newClient = func() (kubernetes.Interface, error) { t.Fatal("connected for a missing profile"); return nil, nil }
	if _, err := o.setup(); err == nil || !strings.Contains(err.Error(), `no profile with schedulerName "nope"`) {
		t.Errorf("err = %v", err)
	}
	o.schedulerName = ""
	o.newClient = func() (kubernetes.Interface, error) { return nil, errors.New("no kubeconfig") }
	if _, err := o.setup(); err == nil || !strings.Contains(err.Error(), "no kubeconfig") {
		t.Errorf("err = %v", err)
	}
}
