// Package controlplane starts a real, local Kubernetes control plane for
// Headroom's integration tests and demo: etcd, kube-apiserver and, on request,
// kube-controller-manager and kwok, all as processes on free loopback ports in
// one directory. The binaries come from bin/ (hack/build-tools.sh).
package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	certutil "k8s.io/client-go/util/cert"
)

// Options selects what to start besides etcd and kube-apiserver.
type Options struct {
	// ControllerManager starts kube-controller-manager (ReplicaSets,
	// Deployments, ServiceAccounts, garbage collection, node lifecycle).
	// Without it, the ServiceAccount admission plugin is disabled so that pods
	// are accepted without a default ServiceAccount.
	ControllerManager bool
	// Kwok starts kwok, which runs the nodes made by CreateNode and the pods
	// bound to them.
	Kwok bool
	// Dir holds data, certificates, kubeconfig and logs. Empty: a new
	// temporary directory, removed by Stop.
	Dir string
	// BinDir holds the binaries. Empty: $HEADROOM_BIN_DIR, else bin/ at the
	// root of the Headroom checkout this package is built from.
	BinDir string
	// Detached leaves the processes running when this process exits (the
	// demo); they record <name>.pid in Dir for StopDetached.
	Detached bool
	// RealNode readies the control plane for a real kubelet
	// (test/realnode): node identities signed by a client CA
	// (NodeKubeconfig), the Node authorizer and NodeRestriction admission,
	// a client certificate the API server presents to kubelets (logs,
	// exec, the Summary API), and the API server served at the address of
	// the default/kubernetes Service (ServiceIP:443, added to lo), which is
	// where a host-network pod's in-cluster configuration points: no
	// kube-proxy runs to forward it. One such control plane per machine.
	RealNode bool
	// APIServerArgs are appended to kube-apiserver's flags (a later flag
	// wins), e.g. --admission-control-config-file.
	APIServerArgs []string
}

// ControlPlane is a running local control plane.
type ControlPlane struct {
	Dir            string
	BinDir         string
	KubeconfigPath string
	Config         *rest.Config
	Client         kubernetes.Interface

	opts      Options
	ownsDir   bool
	etcdURL   string
	mu        sync.Mutex // guards processes and stopped
	processes []*Process
	stopped   bool

	apiServer         *Process
	clientCA          *clientCA
	serviceIPAdded    bool
	apiServerReady    func(context.Context, *Process) error
	identitiesApplied map[string]bool // by kustomize directory
}

const adminToken = "headroom-admin-token"

// Start starts the control plane and waits until it serves. On error,
// everything already started is stopped.
func Start(ctx context.Context, opts Options) (_ *ControlPlane, err error) {
	cp := &ControlPlane{opts: opts, Dir: opts.Dir, BinDir: opts.BinDir}
	if cp.BinDir == "" {
		cp.BinDir = DefaultBinDir()
	}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "headroom-cp-"); err != nil {
			return nil, err
		}
		cp.ownsDir = true
	} else if err := os.MkdirAll(cp.Dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, cp.logTails())
			cp.Stop()
		}
	}()
	for _, name := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(cp.BinDir, name)); err != nil {
			return nil, fmt.Errorf("%s not built (run hack/build-tools.sh): %w", name, err)
		}
	}

	if err := cp.startEtcd(ctx); err != nil {
		return nil, err
	}
	if err := cp.startAPIServer(ctx); err != nil {
		return nil, err
	}
	if opts.ControllerManager {
		if err := cp.startControllerManager(ctx); err != nil {
			return nil, err
		}
	}
	if opts.Kwok {
		if err := cp.startKwok(); err != nil {
			return nil, err
		}
	}
	return cp, nil
}

// DefaultBinDir is $HEADROOM_BIN_DIR, else bin/ of the checkout.
func DefaultBinDir() string {
	if dir := os.Getenv("HEADROOM_BIN_DIR"); dir != "" {
		return dir
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "bin")
}

// StartProcess starts a binary from BinDir (a Headroom binary, usually)
// against this control plane; it is stopped with the control plane.
func (cp *ControlPlane) StartProcess(name string, args ...string) (*Process, error) {
	return cp.StartProcessAs(name, name, args...)
}

// StartProcessAs is StartProcess with a log name other than the binary's.
func (cp *ControlPlane) StartProcessAs(logName, bin string, args ...string) (*Process, error) {
	return cp.StartProcessEnv(logName, bin, nil, args...)
}

// StartProcessEnv is StartProcessAs with env added to the process's
// environment.
func (cp *ControlPlane) StartProcessEnv(logName, bin string, env []string, args ...string) (*Process, error) {
	return cp.StartProcessIn(cp.Dir, logName, bin, env, args...)
}

// StartProcessIn is StartProcessEnv with workDir as the process's working
// directory instead of Dir (its log and pid file stay in Dir).
func (cp *ControlPlane) StartProcessIn(workDir, logName, bin string, env []string, args ...string) (*Process, error) {
	p, err := startProcess(cp.Dir, workDir, logName, filepath.Join(cp.BinDir, bin), cp.opts.Detached, env, args...)
	if err != nil {
		return nil, err
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	cp.processes = append(cp.processes, p)
	return p, nil
}

// Restart starts p's binary again with the same arguments and log, once p
// has ended (it stops p first if it has not), as a kubelet restarts a
// container. The new process takes p's place in Processes.
func (cp *ControlPlane) Restart(p *Process) (*Process, error) {
	p.Stop(10 * time.Second)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if cp.stopped {
		return nil, errors.New("control plane stopped")
	}
	np, err := startProcess(cp.Dir, p.cmd.Dir, p.Name, p.cmd.Path, cp.opts.Detached, p.env, p.cmd.Args[1:]...)
	if err != nil {
		return nil, err
	}
	np.Port = p.Port
	for i := range cp.processes {
		if cp.processes[i] == p {
			cp.processes[i] = np
			return np, nil
		}
	}
	cp.processes = append(cp.processes, np)
	return np, nil
}

// Stop stops every process, newest first, and removes a temporary Dir.
func (cp *ControlPlane) Stop() {
	cp.mu.Lock()
	cp.stopped = true
	processes := cp.processes
	cp.processes = nil
	cp.mu.Unlock()
	for i := len(processes) - 1; i >= 0; i-- {
		processes[i].Stop(10 * time.Second)
	}
	if cp.serviceIPAdded {
		_ = removeServiceIP()
	}
	if cp.ownsDir {
		os.RemoveAll(cp.Dir)
	}
}

// Processes lists what runs, oldest first.
func (cp *ControlPlane) Processes() []*Process {
	cp.mu.Lock()
	defer cp.mu.Unlock()
	return append([]*Process(nil), cp.processes...)
}

func (cp *ControlPlane) logTails() string {
	var s string
	for _, p := range cp.Processes() {
		s += fmt.Sprintf("\n--- %s (last 3 KiB of %s) ---\n%s", p.Name, p.LogPath, p.Log(3<<10))
	}
	return s
}

// LogTails returns the end of every process's log, for a failing test.
func (cp *ControlPlane) LogTails() string { return cp.logTails() }

func (cp *ControlPlane) startEtcd(ctx context.Context) error {
	client, peer := freePort(), freePort()
	clientURL := "http://127.0.0.1:" + strconv.Itoa(client)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peer)
	p, err := cp.StartProcess("etcd",
		"--name=headroom",
		"--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls="+clientURL,
		"--advertise-client-urls="+clientURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=headroom="+peerURL,
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	cp.etcdURL = clientURL
	return waitHTTP(ctx, p, clientURL+"/health", nil)
}

func (cp *ControlPlane) startAPIServer(ctx context.Context) error {
	port := freePort()
	certDir := filepath.Join(cp.Dir, "pki")
	if err := os.MkdirAll(certDir, 0o700); err != nil {
		return err
	}
	bindIP, ips := "127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}
	if cp.opts.RealNode {
		if err := cp.addServiceIP(); err != nil {
			return err
		}
		bindIP, port = ServiceIP, 443
		ips = append(ips, net.ParseIP(ServiceIP))
	}
	cert, key, err := certutil.GenerateSelfSignedCertKey(bindIP, ips, []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"})
	if err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		ServingCertFile: cert,
		"serving.key":   key,
		"sa.key":        pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		"tokens.csv":    []byte(adminToken + ",admin,admin,system:masters\n"),
		"audit.yaml":    []byte(auditPolicy),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(certDir, name), data, 0o600); err != nil {
			return err
		}
	}
	// The Node authorizer lets a kubelet's node identity do what its node
	// needs (its pods, secrets they mount); a list flag, given once.
	authorizationModes := "RBAC"
	if cp.opts.RealNode {
		authorizationModes = "Node,RBAC"
	}
	args := []string{
		"--etcd-servers=" + cp.etcdURL,
		"--etcd-prefix=/headroom-" + randomSuffix(),
		"--bind-address=" + bindIP,
		"--advertise-address=" + bindIP,
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + certDir,
		"--tls-cert-file=" + filepath.Join(certDir, "serving.crt"),
		"--tls-private-key-file=" + filepath.Join(certDir, "serving.key"),
		"--token-auth-file=" + filepath.Join(certDir, "tokens.csv"),
		"--authorization-mode=" + authorizationModes,
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + filepath.Join(certDir, "sa.key"),
		"--service-account-signing-key-file=" + filepath.Join(certDir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		// On loopback the endpoint reconciler only logs errors every 10 s.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
		"--audit-policy-file=" + filepath.Join(certDir, "audit.yaml"),
		"--audit-log-path=" + filepath.Join(cp.Dir, AuditLog),
		"--audit-log-format=json",
	}
	if cp.opts.RealNode {
		if cp.clientCA, err = newClientCA(certDir); err != nil {
			return err
		}
		kcCert, kcKey, err := cp.clientCA.issue(certDir, "apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
		if err != nil {
			return err
		}
		args = append(args,
			"--client-ca-file="+filepath.Join(certDir, ClientCAFile),
			"--enable-admission-plugins=NodeRestriction",
			"--kubelet-client-certificate="+kcCert,
			"--kubelet-client-key="+kcKey,
			// The node's InternalIP is the host's own address, where its
			// kubelet serves.
			"--kubelet-preferred-address-types=InternalIP",
		)
	}
	if !cp.opts.ControllerManager {
		// Nobody would create the default ServiceAccount pods need.
		args = append(args, "--disable-admission-plugins=ServiceAccount")
	}
	args = append(args, cp.opts.APIServerArgs...)
	p, err := cp.StartProcess("kube-apiserver", args...)
	if err != nil {
		return err
	}
	cp.apiServer = p

	host := "https://" + net.JoinHostPort(bindIP, strconv.Itoa(port))
	cp.Config = &rest.Config{
		Host:            host,
		BearerToken:     adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: cert},
		QPS:             200,
		Burst:           400,
	}
	cp.KubeconfigPath = filepath.Join(cp.Dir, "kubeconfig")
	if err := writeKubeconfig(cp.KubeconfigPath, host, cert); err != nil {
		return err
	}
	transport, err := rest.TransportFor(cp.Config)
	if err != nil {
		return err
	}
	cp.apiServerReady = func(ctx context.Context, p *Process) error {
		return waitHTTP(ctx, p, host+"/readyz", &http.Client{Transport: transport})
	}
	if err := cp.apiServerReady(ctx, p); err != nil {
		return err
	}
	cp.Client, err = kubernetes.NewForConfig(cp.Config)
	return err
}

// StopAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 10 s),
// leaving etcd and every other process running.
func (cp *ControlPlane) StopAPIServer() {
	cp.apiServer.Stop(10 * time.Second)
}

// RestartAPIServer starts kube-apiserver again after StopAPIServer, with
// the same flags: the same port, certificates, ServiceAccount signing key
// and etcd prefix, so clients reconnect to what they knew and tokens stay
// valid. It waits until /readyz answers.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context) error {
	p, err := cp.Restart(cp.apiServer)
	if err != nil {
		return err
	}
	cp.apiServer = p
	return cp.apiServerReady(ctx, p)
}

func (cp *ControlPlane) startControllerManager(ctx context.Context) error {
	certDir := filepath.Join(cp.Dir, "pki")
	p, err := cp.StartProcess("kube-controller-manager",
		"--kubeconfig="+cp.KubeconfigPath,
		"--authentication-kubeconfig="+cp.KubeconfigPath,
		"--authorization-kubeconfig="+cp.KubeconfigPath,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(freePort()),
		"--leader-elect=false",
		"--use-service-account-credentials=false",
		"--service-account-private-key-file="+filepath.Join(certDir, "sa.key"),
		"--root-ca-file="+filepath.Join(certDir, "serving.crt"),
		"--controllers=*,-bootstrapsigner,-tokencleaner,-csrsigning,-csrapproving,-csrcleaner",
		// kwok nodes heartbeat; keep the default grace so a stalled kwok
		// shows as NotReady in a test rather than evicting immediately.
		"--concurrent-replicaset-syncs=5",
		"--concurrent-deployment-syncs=5",
	)
	if err != nil {
		return err
	}
	// Pods are refused until the service-account controller has created the
	// default ServiceAccount.
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, fmt.Errorf("kube-controller-manager exited: %v", err)
		}
		_, err := cp.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		return err == nil, nil
	})
}

func (cp *ControlPlane) startKwok() error {
	stages := filepath.Join(cp.BinDir, "kwok-stages.yaml")
	if _, err := os.Stat(stages); err != nil {
		return fmt.Errorf("kwok stages not found (run hack/build-tools.sh): %w", err)
	}
	port := freePort()
	p, err := cp.StartProcess("kwok",
		"--kubeconfig="+cp.KubeconfigPath,
		"--config="+stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+KwokNodeAnnotation+"=fake",
		// Pods with this annotation keep the status a test writes.
		"--disregard-status-with-annotation-selector="+KwokCustomStatusAnnotation+"=custom",
		"--cidr=10.0.0.1/16",
		"--node-ip=127.0.0.1",
		"--server-address=127.0.0.1:"+strconv.Itoa(port),
	)
	if err != nil {
		return err
	}
	// kwok v0.8.0 sometimes dies while it starts ("concurrent map writes" in
	// its CEL type registry, before it serves). A kubelet would restart it;
	// so does the harness, a few times, until kwok serves /healthz.
	healthz := "http://127.0.0.1:" + strconv.Itoa(port) + "/healthz"
	for restarts := 0; ; {
		err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			if exited, err := p.Exited(); exited {
				return false, fmt.Errorf("kwok exited while starting (log %s): %v", p.LogPath, err)
			}
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, healthz, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK, nil
		})
		if err == nil {
			return nil
		}
		if exited, _ := p.Exited(); !exited || restarts == 3 {
			return err
		}
		restarts++
		if p, err = cp.Restart(p); err != nil {
			return err
		}
	}
}

const (
	// KwokNodeAnnotation marks the nodes kwok runs.
	KwokNodeAnnotation = "kwok.x-k8s.io/node"
	// KwokCustomStatusAnnotation, set to "custom" on a pod, leaves its
	// status to the test (phase, readiness, restarts).
	KwokCustomStatusAnnotation = "kwok.x-k8s.io/status"
)

func writeKubeconfig(path, host string, ca []byte) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["headroom"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: adminToken}
	cfg.Contexts["headroom"] = &clientcmdapi.Context{Cluster: "headroom", AuthInfo: "admin"}
	cfg.CurrentContext = "headroom"
	return clientcmd.WriteToFile(*cfg, path)
}

// writeCertKubeconfig writes a kubeconfig that authenticates with a client
// certificate.
func writeCertKubeconfig(path, host, caFile, certFile, keyFile string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["headroom"] = &clientcmdapi.Cluster{Server: host, CertificateAuthority: caFile}
	cfg.AuthInfos["node"] = &clientcmdapi.AuthInfo{ClientCertificate: certFile, ClientKey: keyFile}
	cfg.Contexts["headroom"] = &clientcmdapi.Context{Cluster: "headroom", AuthInfo: "node"}
	cfg.CurrentContext = "headroom"
	return clientcmd.WriteToFile(*cfg, path)
}

func waitHTTP(ctx context.Context, p *Process, url string, client *http.Client) error {
	if client == nil {
		client = http.DefaultClient
	}
	return wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		if exited, err := p.Exited(); exited {
			return false, fmt.Errorf("%s exited: %v", p.Name, err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

// freePort asks the kernel for a free loopback port. Another process could
// take it before the server binds; on loopback in a test run that is rare and
// shows as a clear start-up error.
func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("no free loopback port: %v", err))
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var errNodeNotReady = errors.New("node not ready")

// CreateNode creates a node that kwok runs, with the given allocatable (also
// its capacity) and annotations, and waits until it is Ready and schedulable.
// Without kube-controller-manager nobody lifts the not-ready taint admission
// puts on new nodes, so CreateNode removes it itself.
func (cp *ControlPlane) CreateNode(ctx context.Context, name string, allocatable corev1.ResourceList, annotations map[string]string) (*corev1.Node, error) {
	ann := map[string]string{KwokNodeAnnotation: "fake"}
	for k, v := range annotations {
		ann[k] = v
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: ann,
			Labels:      map[string]string{"type": "kwok", corev1.LabelHostname: name},
		},
		Status: corev1.NodeStatus{Capacity: allocatable, Allocatable: allocatable},
	}
	if _, err := cp.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	var ready *corev1.Node
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := cp.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		if !nodeReady(n) {
			return false, nil
		}
		var kept []corev1.Taint
		for _, t := range n.Spec.Taints {
			if t.Key != corev1.TaintNodeNotReady {
				kept = append(kept, t)
			}
		}
		if len(kept) != len(n.Spec.Taints) {
			n.Spec.Taints = kept
			if _, err := cp.Client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
				return false, nil // conflict with kwok's status update: retry
			}
			return false, nil
		}
		ready = n
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("node %s: %w: %v", name, errNodeNotReady, err)
	}
	return ready, nil
}

func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// APIServerMinor is the Kubernetes minor ("1.35") of DefaultBinDir's
// kube-apiserver, from its --version: which minor a test runs against
// (make test-minor puts another minor's binaries there).
func APIServerMinor() (string, error) {
	out, err := exec.Command(filepath.Join(DefaultBinDir(), "kube-apiserver"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("kube-apiserver --version: %w", err)
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes v")
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return "", fmt.Errorf("kube-apiserver --version: %q is not Kubernetes vMAJOR.MINOR…", out)
	}
	return parts[0] + "." + parts[1], nil
}
