package main

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/sigstore/sigstore-go/pkg/fulcio/certificate"
	trust "github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"github.com/sigstore/sigstore-go/pkg/verify"
)

// Keyless signing (docs/release.md, "Keyless, instead of a key"): an
// ephemeral key, a short-lived Fulcio certificate that names the signer's
// OIDC identity, and each signature recorded in Rekor, whose entry dates it
// within the certificate's ten minutes.
const (
	// DefaultFulcioURL and DefaultRekorURL are Sigstore's public instances,
	// whose keys root.FetchTrustedRoot fetches (TUF).
	DefaultFulcioURL = "https://fulcio.sigstore.dev"
	DefaultRekorURL  = "https://rekor.sigstore.dev"
	// oidcAudience is the audience Fulcio accepts tokens for.
	oidcAudience = "sigstore"
)

// newPublicKeylessSigner signs with the environment's OIDC identity
// (OIDCToken) through the Fulcio and Rekor at these URLs.
func newPublicKeylessSigner(ctx context.Context, fulcioURL, rekorURL string) (*Signer, error) {
	token, err := OIDCToken(ctx, os.Getenv, http.DefaultClient)
	if err != nil {
		return nil, err
	}
	kp, err := sign.NewEphemeralKeypair(nil)
	if err != nil {
		return nil, err
	}
	return NewKeylessSigner(kp,
		sign.NewFulcio(&sign.FulcioOptions{BaseURL: fulcioURL, Retries: 3}), token,
		sign.NewRekor(&sign.RekorOptions{BaseURL: rekorURL, Retries: 3}))
}

// NewKeylessSigner signs with keypair, whose certificate ca issues for
// idToken's identity, and records every signature in tlog. The certificate
// is asked for once: every bundle of the release holds the same one (one
// identity token, one Fulcio request).
func NewKeylessSigner(keypair sign.Keypair, ca sign.CertificateProvider, idToken string, tlog sign.Transparency) (*Signer, error) {
	if idToken == "" {
		return nil, errors.New("keyless signing needs an OIDC identity token")
	}
	return &Signer{keypair: keypair, opts: sign.BundleOptions{
		CertificateProvider:        &onceCertificate{provider: ca},
		CertificateProviderOptions: &sign.CertificateProviderOptions{IDToken: idToken},
		TransparencyLogs:           []sign.Transparency{tlog},
	}}, nil
}

// identity says whose certificate a keyless signer signed with, once it
// has one: "" for a key.
func (s *Signer) identity() string {
	oc, ok := s.opts.CertificateProvider.(*onceCertificate)
	if !ok || oc.der == nil {
		return ""
	}
	c, err := x509.ParseCertificate(oc.der)
	if err != nil {
		return err.Error()
	}
	sum, err := certificate.SummarizeCertificate(c)
	if err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%s (issuer %s), valid until %s", sum.SubjectAlternativeName, sum.Issuer, c.NotAfter.UTC().Format(time.RFC3339))
}

// onceCertificate asks its provider for a certificate once and answers
// every later request with it: the signer's keypair does not change.
type onceCertificate struct {
	provider sign.CertificateProvider
	mu       sync.Mutex
	der      []byte
}

func (o *onceCertificate) GetCertificate(ctx context.Context, kp sign.Keypair, opts *sign.CertificateProviderOptions) ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.der == nil {
		der, err := o.provider.GetCertificate(ctx, kp, opts)
		if err != nil {
			return nil, fmt.Errorf("certificate: %w", err)
		}
		o.der = der
	}
	return o.der, nil
}

// OIDCToken is the signer's identity token for Fulcio, from the
// environment: SIGSTORE_ID_TOKEN (cosign's variable) where set, else, in a
// GitHub Actions job with `permissions: id-token: write`, one requested
// from ACTIONS_ID_TOKEN_REQUEST_URL with ACTIONS_ID_TOKEN_REQUEST_TOKEN for
// the audience "sigstore".
func OIDCToken(ctx context.Context, getenv func(string) string, client *http.Client) (string, error) {
	if t := getenv("SIGSTORE_ID_TOKEN"); t != "" {
		return t, nil
	}
	reqURL, reqToken := getenv("ACTIONS_ID_TOKEN_REQUEST_URL"), getenv("ACTIONS_ID_TOKEN_REQUEST_TOKEN")
	if reqURL == "" || reqToken == "" {
		return "", errors.New("no OIDC identity: set SIGSTORE_ID_TOKEN, or run in a GitHub Actions job with permissions id-token: write (ACTIONS_ID_TOKEN_REQUEST_URL and ACTIONS_ID_TOKEN_REQUEST_TOKEN)")
	}
	u, err := url.Parse(reqURL)
	if err != nil {
		return "", fmt.Errorf("ACTIONS_ID_TOKEN_REQUEST_URL: %w", err)
	}
	q := u.Query()
	q.Set("audience", oidcAudience)
	u.RawQuery = q.Encode()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+reqToken)
	resp, err := client.Do(req)
	if err != nil {
		return "", fmt.Errorf("GitHub Actions' OIDC token: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", fmt.Errorf("GitHub Actions' OIDC token: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GitHub Actions' OIDC token: %s: %s", resp.Status, body)
	}
	var t struct {
		Value string `json:"value"`
	}
	if err := json.Unmarshal(body, &t); err != nil || t.Value == "" {
		return "", fmt.Errorf("GitHub Actions' OIDC token: no token in the answer (%v)", err)
	}
	return t.Value, nil
}

// NewKeylessVerifier checks bundles as keyless signatures: each signed
// with a certificate that one of trusted's Fulcio authorities issued to
// an identity (its subject alternative name) that sanRegexp matches, from
// the OIDC issuer issuer exactly, with an entry in one of trusted's Rekor
// logs whose signed time lies within the certificate's validity. A bundle
// signed with a key, or without a log entry, fails.
func NewKeylessVerifier(trusted trust.TrustedMaterial, sanRegexp, issuer string) (*ReleaseVerifier, error) {
	if sanRegexp == "" || issuer == "" {
		return nil, errors.New("keyless verification needs a certificate identity (regexp) and an OIDC issuer")
	}
	id, err := verify.NewShortCertificateIdentity(issuer, "", "", sanRegexp)
	if err != nil {
		return nil, err
	}
	// The log's signed entry time is the observer timestamp that dates
	// the signature within the short-lived certificate.
	v, err := verify.NewVerifier(trusted, verify.WithTransparencyLog(1), verify.WithObserverTimestamps(1))
	if err != nil {
		return nil, err
	}
	return &ReleaseVerifier{verifier: v, policy: verify.WithCertificateIdentity(id)}, nil
}

// LoadTrustedRoot reads a Sigstore trusted root (trusted_root.json, as
// `cosign trusted-root create` writes it); "" is Sigstore's public one,
// fetched and checked through its TUF repository.
func LoadTrustedRoot(path string) (trust.TrustedMaterial, error) {
	if path == "" {
		tr, err := trust.FetchTrustedRoot()
		if err != nil {
			return nil, fmt.Errorf("Sigstore's public trusted root: %w", err)
		}
		return tr, nil
	}
	tr, err := trust.NewTrustedRootFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return tr, nil
}
