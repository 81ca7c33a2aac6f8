package app

import (
	"k8s.io/client-go/kubernetes"

	headroomconfig "github.com/headroom-k8s/headroom/apis/config"
)

// session is what a subcommand works with: the profile (--config,
// --scheduler-name), the args of its Headroom plugins as the profile sets
// them, and a client of the API server.
type session struct {
	profile *profile
	pidArgs *headroomconfig.NodePIDsArgs
	ipArgs  *headroomconfig.NodeIPsArgs
	oomArgs *headroomconfig.OOMRiskArgs
	client  kubernetes.Interface
}

// setup loads the profile and its args and connects, the first step of
// every subcommand.
func (o *options) setup() (*session, error) {
	p, err := loadProfile(o.schedulerConfig, o.schedulerName)
	if err != nil {
		return nil, err
	}
	s := &session{profile: p}
	if s.pidArgs, err = p.nodePIDsArgs(); err != nil {
		return nil, err
	}
	if s.ipArgs, err = p.nodeIPsArgs(); err != nil {
		return nil, err
	}
	if s.oomArgs, err = p.oomRiskArgs(); err != nil {
		return nil, err
	}
	if s.client, err = o.newClient(); err != nil {
		return nil, err
	}
	return s, nil
}
