package nodeagent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReservedFromKubeletConfig(t *testing.T) {
	tests := []struct {
		name      string
		data      string
		want      int64
		wantErrIn string
	}{
		{name: "both", data: `
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
systemReserved:
  cpu: 500m
  pid: "1000"
kubeReserved:
  memory: 1Gi
  pid: "500"
`, want: 1500},
		{name: "system only, quantity suffix", data: `
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
systemReserved:
  pid: 2k
`, want: 2000},
		{name: "kube only", data: `
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
kubeReserved:
  pid: "300"
`, want: 300},
		{name: "none", data: `
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
systemReserved:
  memory: 1Gi
`, want: 0},
		{name: "json", data: `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","systemReserved":{"pid":"10"},"kubeReserved":{"pid":"20"}}`, want: 30},
		{name: "unknown fields from a newer kubelet are ignored", data: `
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
someFutureField: true
systemReserved:
  pid: "42"
`, want: 42},

		{name: "empty", data: ``, wantErrIn: "decoding"},
		{name: "not yaml", data: "\t: :\n", wantErrIn: "decoding"},
		{name: "no kind", data: "systemReserved:\n  pid: \"1\"\n", wantErrIn: "Kind"},
		{name: "wrong version", data: "apiVersion: kubelet.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", wantErrIn: "decoding"},
		{name: "wrong kind", data: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: CredentialProviderConfig\n", wantErrIn: "want kind KubeletConfiguration"},
		{name: "bad quantity", data: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsystemReserved:\n  pid: lots\n", wantErrIn: `systemReserved.pid "lots"`},
		{name: "negative", data: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nkubeReserved:\n  pid: \"-5\"\n", wantErrIn: `kubeReserved.pid "-5"`},
		{name: "fractional", data: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nkubeReserved:\n  pid: 1500m\n", wantErrIn: `kubeReserved.pid "1500m"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReservedFromKubeletConfig([]byte(tc.data))
			if tc.wantErrIn == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got != tc.want {
					t.Errorf("reserved = %d, want %d", got, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErrIn) {
				t.Errorf("err = %v, want one containing %q", err, tc.wantErrIn)
			}
		})
	}
}

func TestReservedFromKubeletConfigFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(good, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsystemReserved:\n  pid: \"7\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := ReservedFromKubeletConfigFile(good); err != nil || n != 7 {
		t.Errorf("good file: %d, %v", n, err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("kind: Nope\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReservedFromKubeletConfigFile(bad); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("bad file: err %v should name the file", err)
	}
	if _, err := ReservedFromKubeletConfigFile(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: err %v should name the file", err)
	}
}
