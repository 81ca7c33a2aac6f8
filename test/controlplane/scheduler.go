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

// StartScheduler starts bin/headroom-scheduler with the
// KubeSchedulerConfiguration in config (YAML), pointed at this control plane:
// its clientConnection and leader election are set here, everything else is
// the caller's. It waits until /healthz answers.
func (cp *ControlPlane) StartScheduler(ctx context.Context, config []byte, extraArgs ...string) (*Process, error) {
	var cfg map[string]interface{}
	if err := yaml.Unmarshal(config, &cfg); err != nil {
		return nil, fmt.Errorf("scheduler config: %w", err)
	}
	cfg["clientConnection"] = map[string]interface{}{"kubeconfig": cp.KubeconfigPath, "qps": 200, "burst": 400}
	cfg["leaderElection"] = map[string]interface{}{"leaderElect": false}
	data, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, err
	}
	path := filepath.Join(cp.Dir, "scheduler-config.yaml")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return nil, err
	}
	port := freePort()
	args := append([]string{
		"--config=" + path,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--authentication-kubeconfig=" + cp.KubeconfigPath,
		"--authorization-kubeconfig=" + cp.KubeconfigPath,
		"--cert-dir=" + filepath.Join(cp.Dir, "scheduler-pki"),
	}, extraArgs...)
	p, err := cp.StartProcess("headroom-scheduler", args...)
	if err != nil {
		return nil, err
	}
	// The scheduler serves a self-signed certificate on loopback.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	if err := waitHTTP(ctx, p, "https://127.0.0.1:"+strconv.Itoa(port)+"/healthz", client); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, p.Log(4<<10))
	}
	return p, nil
}
