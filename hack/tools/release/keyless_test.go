package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	"github.com/sigstore/rekor/pkg/generated/client/entries"
	"github.com/sigstore/rekor/pkg/generated/models"
	"github.com/sigstore/rekor/pkg/types"
	trust "github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"github.com/sigstore/sigstore-go/pkg/testing/ca"
	"github.com/sigstore/sigstore-go/pkg/tlog"
	"google.golang.org/protobuf/encoding/protojson"
)

const (
	// The identity the release workflow signs with, and the one release
	// verify is told to expect (docs/release.md).
	workflowIdentity       = "https://github.com/headroom-k8s/headroom/.github/workflows/release.yaml@refs/tags/v1.36.3-headroom.0.0.0"
	workflowIdentityRegexp = `^https://github\.com/headroom-k8s/headroom/\.github/workflows/release\.yaml@refs/tags/v`
	githubIssuer           = "https://token.actions.githubusercontent.com"
	// smallChart is the one file of writeSmallRelease's release.
	smallChart = "headroom-0.0.0.tgz"
)

// TestKeyless signs a small release keyless, as `release sign -keyless`
// does (sign.Bundle with a certificate provider and sign.NewRekor), against
// sigstore-go's in-memory Sigstore (testing/ca.VirtualSigstore): its Fulcio
// CA issues the certificate, its Rekor log records every signature. Then
// `release verify` with that Sigstore's trusted root (a file, as
// -trusted-root reads it) and the workflow's identity passes it, and
// refuses it for another identity or issuer, a bundle whose log entry was
// removed, a certificate of another CA with the right identity, entries
// of another log, and a release signed with a key.
func TestKeyless(t *testing.T) {
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	rootFile := writeTrustedRoot(t, vs)
	release, fulcio, rekor := signKeyless(t, vs, vs, workflowIdentity, githubIssuer)
	if fulcio.calls != 1 {
		t.Errorf("%d certificate requests, want one for the release", fulcio.calls)
	}
	if rekor.entries != 2 { // the chart, the provenance
		t.Errorf("%d log entries, want 2", rekor.entries)
	}
	if _, err := os.Stat(filepath.Join(release, PublicKeyFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a keyless release has a %s (%v)", PublicKeyFile, err)
	}
	if _, err := WriteChecksums(release); err != nil {
		t.Fatal(err)
	}
	trusted, err := LoadTrustedRoot(rootFile)
	if err != nil {
		t.Fatal(err)
	}
	keyless := func(t *testing.T, sanRegexp, issuer string) *ReleaseVerifier {
		t.Helper()
		rv, err := NewKeylessVerifier(trusted, sanRegexp, issuer)
		if err != nil {
			t.Fatal(err)
		}
		return rv
	}

	// As make release and make push run it, flags and all.
	verifyArgs := []string{"-platforms", "", "-certificate-identity-regexp", workflowIdentityRegexp,
		"-certificate-oidc-issuer", githubIssuer, "-trusted-root", rootFile, release}
	if err := verifyMain(verifyArgs); err != nil {
		t.Fatalf("release verify %s:\n%v", strings.Join(verifyArgs, " "), err)
	}
	// Without the identity it wants the release's key, which there is not.
	if err := verifyMain([]string{"-platforms", "", release}); err == nil || !strings.Contains(err.Error(), PublicKeyFile+": the release's public key") {
		t.Errorf("release verify without an identity: %v, want no %s", err, PublicKeyFile)
	}
	if err := verifyMain([]string{"-platforms", "", "-certificate-oidc-issuer", githubIssuer, release}); err == nil || !strings.Contains(err.Error(), "needs both") {
		t.Errorf("release verify with an issuer and no identity: %v", err)
	}

	const chart = smallChart
	for _, tc := range []struct {
		name string
		// dir is the release to verify (default: the keyless one), rv the
		// verifier (default: the workflow's identity and issuer).
		dir  func(t *testing.T) string
		rv   func(t *testing.T) *ReleaseVerifier
		want []string
	}{{
		name: "another repository's workflow",
		rv: func(t *testing.T) *ReleaseVerifier {
			return keyless(t, `^https://github\.com/someone/headroom/\.github/workflows/release\.yaml@refs/tags/v`, githubIssuer)
		},
		want: []string{chart + ": signature ", chart + ": provenance ", "expected SAN value to match regex"},
	}, {
		name: "another issuer",
		rv: func(t *testing.T) *ReleaseVerifier {
			return keyless(t, workflowIdentityRegexp, "https://accounts.google.com")
		},
		want: []string{chart + ": signature ", chart + ": provenance ", "expected issuer value"},
	}, {
		// The chart's signature and the provenance without their log
		// entries: still signed by the certificate, but not in the log.
		name: "no log entry",
		dir: func(t *testing.T) string {
			dir := t.TempDir()
			copyTree(t, release, dir)
			dropLogEntries(t, filepath.Join(dir, chart+BundleSuffix))
			dropLogEntries(t, filepath.Join(dir, ProvenanceFile))
			return dir
		},
		want: []string{chart + ": signature " + chart + BundleSuffix + ": ", chart + ": provenance "},
	}, {
		// The right identity and issuer, from a CA the trusted root does
		// not hold, logged in the trusted log.
		name: "another CA",
		dir: func(t *testing.T) string {
			dir, _, _ := signKeyless(t, otherSigstore(t), vs, workflowIdentity, githubIssuer)
			return dir
		},
		want: []string{chart + ": signature ", chart + ": provenance ", "failed to verify leaf certificate"},
	}, {
		// The trusted CA's certificate, logged in another log.
		name: "another log",
		dir: func(t *testing.T) string {
			dir, _, _ := signKeyless(t, vs, otherSigstore(t), workflowIdentity, githubIssuer)
			return dir
		},
		want: []string{chart + ": signature ", chart + ": provenance ", "failed to verify log inclusion"},
	}, {
		// Signed with a key, as make release signs without an identity:
		// no certificate, no log entry.
		name: "signed with a key",
		dir: func(t *testing.T) string {
			dir := t.TempDir()
			writeSmallRelease(t, dir)
			if _, err := SignRelease(dir, newKeySigner(t, nil), ProvenanceOptions{Version: "v0", Revision: strings.Repeat("ab", 20), Builder: DefaultBuilderID}); err != nil {
				t.Fatal(err)
			}
			return dir
		},
		want: []string{chart + ": signature ", chart + ": provenance "},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := release
			if tc.dir != nil {
				dir = tc.dir(t)
			}
			rv := keyless(t, workflowIdentityRegexp, githubIssuer)
			if tc.rv != nil {
				rv = tc.rv(t)
			}
			err := VerifyFileSignatures(dir, rv)
			if err == nil {
				t.Fatal("verified")
			}
			t.Logf("verify:\n%v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("verify:\n%v\nwant a problem with %q", err, w)
				}
			}
		})
	}
}

// otherSigstore is a VirtualSigstore that no test's trusted root holds.
func otherSigstore(t *testing.T) *ca.VirtualSigstore {
	t.Helper()
	vs, err := ca.NewVirtualSigstore()
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// signKeyless writes a small release (writeSmallRelease) and signs it
// keyless with a certificate of certs's CA for identity and issuer, each
// signature recorded in log's transparency log.
func signKeyless(t *testing.T, certs, log *ca.VirtualSigstore, identity, issuer string) (string, *virtualFulcio, *virtualRekor) {
	t.Helper()
	// The CA makes the leaf's key with its certificate; the release is
	// signed with that key, as with the ephemeral key Fulcio certifies.
	cert, priv, err := certs.GenerateLeafCert(identity, issuer)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := newReleaseKeypair(priv.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	fulcio, rekor := &virtualFulcio{cert: cert}, &virtualRekor{vs: log}
	s, err := NewKeylessSigner(kp, fulcio, "an identity token", sign.NewRekor(&sign.RekorOptions{Client: rekor}))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeSmallRelease(t, dir)
	// A key of an earlier signing is no key of this one.
	if err := os.WriteFile(filepath.Join(dir, PublicKeyFile), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	signed, err := SignRelease(dir, s, ProvenanceOptions{Version: "v0", Revision: strings.Repeat("ab", 20), Builder: DefaultBuilderID, Started: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("signed:\n%s", strings.Join(signed, "\n"))
	return dir, fulcio, rekor
}

// writeSmallRelease writes a chart stand-in: release sign signs it as a
// blob (a hashedrekord log entry) and its provenance as an in-toto
// statement (a dsse entry).
func writeSmallRelease(t *testing.T, dir string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, smallChart), []byte("a chart\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeTrustedRoot writes vs's Fulcio CA, Rekor and CT logs and timestamp
// authority as a trusted root file (trusted_root.json, as -trusted-root
// reads it).
func writeTrustedRoot(t *testing.T, vs *ca.VirtualSigstore) string {
	t.Helper()
	// A log's ID is the SHA-256 of its key; the virtual log's holds it in
	// hex, which a trusted root file would hex-encode again.
	logs := map[string]*trust.TransparencyLog{}
	for id, l := range vs.RekorLogs() {
		raw, err := hex.DecodeString(id)
		if err != nil {
			t.Fatal(err)
		}
		l.ID = raw
		logs[id] = l
	}
	tr, err := trust.NewTrustedRoot(trust.TrustedRootMediaType01, vs.FulcioCertificateAuthorities(), vs.CTLogs(), vs.TimestampingAuthorities(), logs)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := tr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "trusted_root.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// dropLogEntries removes the transparency log entries of the bundle file.
func dropLogEntries(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var b protobundle.Bundle
	if err := protojson.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	if len(b.GetVerificationMaterial().GetTlogEntries()) == 0 {
		t.Fatalf("%s has no log entry to drop", path)
	}
	b.VerificationMaterial.TlogEntries = nil
	if err := writeBundle(path, &b); err != nil {
		t.Fatal(err)
	}
}

// virtualFulcio is a sign.CertificateProvider: it hands out the virtual
// CA's certificate for the keypair, as Fulcio certifies the signer's key
// for the identity of its token.
type virtualFulcio struct {
	cert  *x509.Certificate
	calls int
}

func (f *virtualFulcio) GetCertificate(ctx context.Context, kp sign.Keypair, opts *sign.CertificateProviderOptions) ([]byte, error) {
	f.calls++
	if opts == nil || opts.IDToken == "" {
		return nil, errors.New("no identity token")
	}
	pub, ok := kp.GetPublicKey().(*ecdsa.PublicKey)
	if !ok || !pub.Equal(f.cert.PublicKey) {
		return nil, errors.New("the keypair is not the certificate's")
	}
	return f.cert.Raw, nil
}

// virtualRekor is the Rekor client of sign.NewRekor: it turns the proposed
// entry into the canonical one as Rekor does, and answers it with the
// virtual log's signed entry timestamp and inclusion proof.
type virtualRekor struct {
	vs      *ca.VirtualSigstore
	mu      sync.Mutex
	entries int
}

func (r *virtualRekor) CreateLogEntry(params *entries.CreateLogEntryParams, _ ...entries.ClientOption) (*entries.CreateLogEntryCreated, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	impl, err := types.CreateVersionedEntry(params.ProposedEntry)
	if err != nil {
		return nil, err
	}
	body, err := types.CanonicalizeEntry(context.Background(), impl)
	if err != nil {
		return nil, err
	}
	logID, err := r.vs.RekorLogID()
	if err != nil {
		return nil, err
	}
	index, now := int64(r.entries), time.Now().Unix()
	encoded := base64.StdEncoding.EncodeToString(body)
	set, err := r.vs.RekorSignPayload(tlog.RekorPayload{Body: encoded, IntegratedTime: now, LogIndex: index, LogID: logID})
	if err != nil {
		return nil, err
	}
	proof, err := r.vs.GetInclusionProof(body)
	if err != nil {
		return nil, err
	}
	r.entries++
	leaf := sha256.Sum256(append([]byte{0}, body...))
	uuid := hex.EncodeToString(leaf[:])
	return &entries.CreateLogEntryCreated{ETag: uuid, Payload: models.LogEntry{uuid: models.LogEntryAnon{
		Body:           encoded,
		IntegratedTime: &now,
		LogID:          &logID,
		LogIndex:       &index,
		Verification:   &models.LogEntryAnonVerification{SignedEntryTimestamp: set, InclusionProof: proof},
	}}}, nil
}

// TestOIDCToken: SIGSTORE_ID_TOKEN where set; else GitHub Actions' token,
// asked for with the job's request token and the audience sigstore; a
// clear error outside both.
func TestOIDCToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer request-token" || r.URL.Query().Get("audience") != "sigstore" || r.URL.Query().Get("api-version") != "2.0" {
			http.Error(w, "bad request "+r.URL.String(), http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(`{"count":1,"value":"a.github.token"}`))
	}))
	defer srv.Close()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	actions := map[string]string{"ACTIONS_ID_TOKEN_REQUEST_URL": srv.URL + "/token?api-version=2.0", "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "request-token"}
	if tok, err := OIDCToken(context.Background(), env(actions), srv.Client()); err != nil || tok != "a.github.token" {
		t.Errorf("GitHub Actions: %q, %v", tok, err)
	}
	actions["SIGSTORE_ID_TOKEN"] = "a.given.token"
	if tok, err := OIDCToken(context.Background(), env(actions), srv.Client()); err != nil || tok != "a.given.token" {
		t.Errorf("SIGSTORE_ID_TOKEN: %q, %v", tok, err)
	}
	wrong := map[string]string{"ACTIONS_ID_TOKEN_REQUEST_URL": srv.URL + "/token?api-version=2.0", "ACTIONS_ID_TOKEN_REQUEST_TOKEN": "another"}
	if tok, err := OIDCToken(context.Background(), env(wrong), srv.Client()); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a refused request token: %q, %v", tok, err)
	}
	if tok, err := OIDCToken(context.Background(), env(nil), srv.Client()); err == nil || !strings.Contains(err.Error(), "id-token: write") {
		t.Errorf("no identity: %q, %v", tok, err)
	}
}
