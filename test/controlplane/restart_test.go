package controlplane

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// TestRestartAPIServer stops and restarts kube-apiserver: it comes back on
// the same address with the same data (etcd and its prefix) and the same
// ServiceAccount signing key, so a token issued before still works.
func TestRestartAPIServer(t *testing.T) {
	requireBinaries(t)
	cp := StartForTest(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := cp.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubeconfig, err := cp.ServiceAccountKubeconfig(ctx, metav1.NamespaceDefault, "probe", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := cp.apiServer.Pid()
	cp.StopAPIServer()
	if _, err := cp.Client.CoreV1().Namespaces().Get(ctx, metav1.NamespaceDefault, metav1.GetOptions{}); err == nil {
		t.Fatal("the API server still answers after StopAPIServer")
	}
	if err := cp.RestartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}
	if cp.apiServer.Pid() == before {
		t.Error("same process after RestartAPIServer")
	}
	if _, err := cp.Client.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "probe", metav1.GetOptions{}); err != nil {
		t.Errorf("data written before the restart: %v", err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token issued before the restart: %v", err)
	}
	if got := review.Status.UserInfo.Username; got != "system:serviceaccount:default:probe" {
		t.Errorf("token authenticates as %q", got)
	}
}

// TestSupervise restarts a process that exits, with back-off, until Stop.
func TestSupervise(t *testing.T) {
	requireBinaries(t)
	cp := &ControlPlane{Dir: t.TempDir(), BinDir: DefaultBinDir()}
	defer cp.Stop()
	p, err := cp.StartProcess("etcd", "--version") // exits at once
	if err != nil {
		t.Fatal(err)
	}
	s := cp.Supervise(p, 100*time.Millisecond)
	deadline := time.Now().Add(30 * time.Second)
	for len(s.Restarts()) < 3 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	s.Stop()
	r := s.Restarts()
	if len(r) < 3 {
		t.Fatalf("%d restarts, want at least 3", len(r))
	}
	// Back-off doubles: 100 ms, 200 ms, 400 ms between exits and restarts.
	if gap := r[2].Sub(r[1]); gap < 350*time.Millisecond {
		t.Errorf("third restart %s after the second, want the doubled back-off of 400 ms", gap)
	}
	n := len(s.Restarts())
	time.Sleep(500 * time.Millisecond)
	if len(s.Restarts()) != n {
		t.Error("restarted after Stop")
	}
}
