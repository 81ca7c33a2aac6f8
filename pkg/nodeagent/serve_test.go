package nodeagent

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// TestServeEveryAddress serves on ":port" (every address, as the DaemonSet
// does) without an API server to ask: /healthz answers anyone, /metrics
// nobody, since no identity can be authorized. (TestNodeAgent in
// test/integration checks authorized scrapes against a real API server.)
func TestServeEveryAddress(t *testing.T) {
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	if err := NewServingOptions().Serve(ctx, ":"+port, "", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "metrics")
	}), ok); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path string) (int, string) {
		resp, err := client.Get("https://127.0.0.1:" + port + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var code int
	var body string
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		code, body = get("/healthz")
		return code != 0, nil
	}); err != nil {
		t.Fatalf("/healthz never answered: %s", body)
	}
	if code != http.StatusOK || body != "ok" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	if code, body := get("/metrics"); code != http.StatusForbidden {
		t.Errorf("/metrics without credentials: %d %q, want 403", code, body)
	}
}
