package controlplane

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"
)

// SchedulerOptions say how StartSchedulerWith runs headroom-scheduler.
type SchedulerOptions struct {
	// Name of the process and of its log and config files; default
	// headroom-scheduler. Two replicas need two names.
	Name string
	// Kubeconfig the scheduler connects, authenticates and authorizes
	// with. Empty: a token of the shipped headroom-scheduler ServiceAccount,
	// bound through the shipped RBAC (ShippedIdentityKubeconfig).
	Kubeconfig string
	// LeaderElection keeps the config's leaderElection section (the
	// shipped config's lease); false turns leader election off.
	LeaderElection bool
}

// StartScheduler starts bin/headroom-scheduler with the
// KubeSchedulerConfiguration in config (YAML), pointed at this control plane
// under the shipped headroom-scheduler identity, leader election off. See
// StartSchedulerWith.
func (cp *ControlPlane) StartScheduler(ctx context.Context, config []byte, extraArgs ...string) (*Process, error) {
	return cp.StartSchedulerWith(ctx, SchedulerOptions{}, config, extraArgs...)
}

// StartSchedulerWith starts bin/headroom-scheduler with the
// KubeSchedulerConfiguration in config (YAML): its clientConnection and,
// unless opts.LeaderElection, its leader election are set here, everything
// else is the caller's. It waits until /healthz answers.
func (cp *ControlPlane) StartSchedulerWith(ctx context.Context, opts SchedulerOptions, config []byte, extraArgs ...string) (*Process, error) {
	if opts.Name == "" {
		opts.Name = "headroom-scheduler"
	}
	if opts.Kubeconfig == "" {
		var err error
		if opts.Kubeconfig, err = cp.ShippedIdentityKubeconfig(ctx, "headroom-scheduler"); err != nil {
			return nil, err
		}
	}
	var cfg map[string]interface{}
	if err := yaml.Unmarshal(config, &cfg); err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	cfg["clientConnection"] = map[string]interface{}{"kubeconfig": opts.Kubeconfig, "qps": 200, "burst": 400}
	if !opts.LeaderElection {
		cfg["leaderElection"] = map[string]interface{}{"leaderElect": false}
	}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(cp.Dir, opts.Name+"-config.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return nil, err
	}
	port := freePort()
	args := append([]string{
		"--config=" + path,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--authentication-kubeconfig=" + opts.Kubeconfig,
		"--authorization-kubeconfig=" + opts.Kubeconfig,
		"--cert-dir=" + filepath.Join(cp.Dir, opts.Name+"-pki"),
	}, extraArgs...)
	p, err := cp.StartProcessAs(opts.Name, "headroom-scheduler", args...)
	if err != nil {
		return nil, err
	}
	// The scheduler serves a self-signed certificate on loopback.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := waitHTTP(ctx, p, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", client); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, p.Log(4<<10))
	}
	p.Port = port
	return p, nil
}

// defaultSchedulerConfig is kube-scheduler's own default profile alone.
const defaultSchedulerConfig = `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
`

// StartDefaultScheduler runs the cluster's default scheduler: the upstream
// kube-scheduler app (headroom-scheduler is that app with Headroom's
// plugins registered) with only kube-scheduler's default profile, as
// kube-scheduler with the cluster admin's credentials. It places pods
// that name no scheduler, DaemonSet pods among them.
func (cp *ControlPlane) StartDefaultScheduler(ctx context.Context) (*Process, error) {
	return cp.StartSchedulerWith(ctx, SchedulerOptions{Name: "kube-scheduler", Kubeconfig: cp.KubeconfigPath}, []byte(defaultSchedulerConfig))
}
