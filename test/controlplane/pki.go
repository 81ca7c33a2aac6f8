package controlplane

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// clientCA signs the client certificates of identities that are not tokens:
// a kubelet's node identity (system:node:<name> in system:nodes, which the
// Node authorizer and NodeRestriction admission key on) and the API
// server's own identity towards kubelets.
type clientCA struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
}

// Files of the client CA in the control plane's pki directory.
const (
	ClientCAFile = "client-ca.crt"
	// ServingCertFile is the API server's self-signed serving certificate:
	// what clients, kubelets and pods trust.
	ServingCertFile = "serving.crt"
)

func newClientCA(dir string) (*clientCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: "headroom-client-ca"}, key)
	if err != nil {
		return nil, err
	}
	ca := &clientCA{cert: cert, key: key, certPEM: pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: cert.Raw})}
	if err := os.WriteFile(filepath.Join(dir, ClientCAFile), ca.certPEM, 0o644); err != nil {
		return nil, err
	}
	return ca, nil
}

// issue signs a client certificate for user cn in groups and writes
// <name>.crt and <name>.key to dir.
func (ca *clientCA) issue(dir, name, cn string, groups ...string) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: groups},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return "", "", fmt.Errorf("signing the certificate of %s: %w", cn, err)
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: certutil.CertificateBlockType, Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, keyPEM, 0o600)
}

// NodeKubeconfig writes a kubeconfig with which a kubelet joins as Node
// name: a client certificate for system:node:<name> in system:nodes, signed
// by the control plane's client CA. It needs Options.RealNode.
func (cp *ControlPlane) NodeKubeconfig(name string) (string, error) {
	if cp.clientCA == nil {
		return "", fmt.Errorf("the control plane was started without Options.RealNode")
	}
	dir := filepath.Join(cp.Dir, "pki")
	certFile, keyFile, err := cp.clientCA.issue(dir, "kubelet-"+name, "system:node:"+name, "system:nodes")
	if err != nil {
		return "", err
	}
	path := filepath.Join(cp.Dir, "kubelet-"+name+".kubeconfig")
	return path, writeCertKubeconfig(path, cp.Config.Host, filepath.Join(dir, ServingCertFile), certFile, keyFile)
}

// PKIFile is the path of a file of the control plane's pki directory.
func (cp *ControlPlane) PKIFile(name string) string { return filepath.Join(cp.Dir, "pki", name) }
