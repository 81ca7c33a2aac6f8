package main

import (
	"bytes"
	"crypto"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	"github.com/sigstore/sigstore-go/pkg/bundle"
	trust "github.com/sigstore/sigstore-go/pkg/root"
	"github.com/sigstore/sigstore-go/pkg/verify"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
)

// ReleaseVerifier checks the release's Sigstore bundles: against its public
// key, offline, as `cosign verify --key cosign.pub --insecure-ignore-tlog`
// does (no transparency log, no timestamps, the key trusted for all time),
// or keyless (NewKeylessVerifier).
type ReleaseVerifier struct {
	verifier *verify.Verifier
	// policy is what signed: the key, or a certificate identity.
	policy verify.PolicyOption
}

// NewReleaseVerifier reads a PEM public key (the release's cosign.pub).
func NewReleaseVerifier(publicKeyPEM []byte) (*ReleaseVerifier, error) {
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(publicKeyPEM)
	if err != nil {
		return nil, err
	}
	sv, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, err
	}
	key := trust.NewExpiringKey(sv, time.Time{}, time.Time{})
	trusted := trust.NewTrustedPublicKeyMaterial(func(string) (trust.TimeConstrainedVerifier, error) { return key, nil })
	v, err := verify.NewVerifier(trusted, verify.WithNoObserverTimestamps())
	if err != nil {
		return nil, err
	}
	return &ReleaseVerifier{verifier: v, policy: verify.WithKey()}, nil
}

// VerifyBundle checks that the bundle (JSON) is signed as rv trusts (the
// release's key, or the keyless identity) and is about the artifact with
// this sha256 (hex), and returns its in-toto statement (nil for a plain
// signature).
func (rv *ReleaseVerifier) VerifyBundle(raw []byte, sha256Hex string) (*intoto.Statement, error) {
	var b bundle.Bundle
	if err := b.UnmarshalJSON(raw); err != nil {
		return nil, err
	}
	digest, err := hex.DecodeString(sha256Hex)
	if err != nil {
		return nil, err
	}
	res, err := rv.verifier.Verify(&b, verify.NewPolicy(verify.WithArtifactDigest("sha256", digest), rv.policy))
	if err != nil {
		return nil, err
	}
	return res.Statement, nil
}

// VerifyFileSignatures checks the signatures of the release's files in dir
// with rv: every chart and krew archive has a bundle
// FILE.sigstore.json of its own that verifies against it, and the signed
// ProvenanceFile lists each of them and the krew manifest with its sha256.
// Each problem names its file.
func VerifyFileSignatures(dir string, rv *ReleaseVerifier) error {
	files, err := signedFiles(dir)
	if err != nil {
		return err
	}
	var errs []error
	sums := map[string]string{}
	for _, f := range files {
		sum, err := sha256File(filepath.Join(dir, f))
		if err != nil {
			return err
		}
		sums[f] = sum
		if f == krewManifestFile {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, f+BundleSuffix))
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: no signature: %w", f, err))
			continue
		}
		if _, err := rv.VerifyBundle(raw, sum); err != nil {
			errs = append(errs, fmt.Errorf("%s: signature %s: %w", f, f+BundleSuffix, err))
		}
	}
	if len(files) == 0 {
		return errors.Join(errs...)
	}
	raw, err := os.ReadFile(filepath.Join(dir, ProvenanceFile))
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("%s: %w", ProvenanceFile, err))...)
	}
	for _, f := range files {
		st, err := rv.VerifyBundle(raw, sums[f])
		if err == nil && st.GetPredicateType() != slsaProvenancePredicate {
			err = fmt.Errorf("predicate type %q, want %s", st.GetPredicateType(), slsaProvenancePredicate)
		}
		// The digest is a subject's; it must be this file's (an archive
		// renamed to another platform's keeps its digest).
		if err == nil && !slices.ContainsFunc(st.GetSubject(), func(s *intoto.ResourceDescriptor) bool {
			return s.GetName() == f && s.GetDigest()["sha256"] == sums[f]
		}) {
			err = fmt.Errorf("no subject %s with sha256 %s", f, sums[f])
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: provenance %s: %w", f, ProvenanceFile, err))
		}
	}
	return errors.Join(errs...)
}

// CheckIndexSignatures checks the Sigstore bundles that refer to the image
// index idx, read from src (the archive's layout, or the registry it was
// pushed to): at least one is cosign's signature of idx and one its SLSA
// provenance, both signed as rv trusts; a bundle that fails is a
// problem even beside good ones.
func CheckIndexSignatures(src ImageSource, idx v1.Hash, rv *ReleaseVerifier) error {
	refs, err := src.Referrers(idx)
	if err != nil {
		return err
	}
	var errs []error
	found := map[string]bool{}
	for _, d := range refs {
		// A registry may report the config's media type (the OCI empty
		// one) rather than the manifest's artifactType, as
		// go-containerregistry's does: every referrer is read, as cosign
		// reads them, and only one that says it is a bundle must be one.
		raw, err := bundleOf(src, d.Digest)
		if errors.Is(err, errNotBundle) && d.ArtifactType != bundleMediaType {
			continue // an SBOM, or another tool's artifact
		}
		if err == nil {
			var st *intoto.Statement
			st, err = rv.VerifyBundle(raw, idx.Hex)
			found[st.GetPredicateType()] = found[st.GetPredicateType()] || err == nil
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("bundle %s: %w", d.Digest, err))
		}
	}
	for _, pt := range []string{cosignSignPredicate, slsaProvenancePredicate} {
		if !found[pt] {
			var seen []string
			for _, d := range refs {
				seen = append(seen, fmt.Sprintf("%s (%s)", d.Digest, d.ArtifactType))
			}
			errs = append(errs, fmt.Errorf("no valid %s bundle of %s (referrers: %s)", pt, idx, strings.Join(seen, ", ")))
		}
	}
	return errors.Join(errs...)
}

var errNotBundle = errors.New("not a Sigstore bundle")

// bundleOf reads the bundle, the one layer of the artifact h.
func bundleOf(src ImageSource, h v1.Hash) ([]byte, error) {
	img, err := src.Image(h)
	if err != nil {
		return nil, err
	}
	layers, err := img.Layers()
	if err != nil {
		return nil, err
	}
	if len(layers) != 1 {
		return nil, fmt.Errorf("%w: %d layers", errNotBundle, len(layers))
	}
	if mt, err := layers[0].MediaType(); err != nil || !strings.HasPrefix(string(mt), "application/vnd.dev.sigstore.bundle") {
		return nil, fmt.Errorf("%w: layer of media type %q (%v)", errNotBundle, mt, err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := io.Copy(&buf, rc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// isBundleRef says whether a manifest of the layout is a Sigstore bundle.
func isBundleRef(r referrer) bool {
	return r.Manifest.ArtifactType == bundleMediaType || r.Desc.ArtifactType == bundleMediaType ||
		slices.ContainsFunc(r.Manifest.Layers, func(l v1.Descriptor) bool { return l.MediaType == bundleMediaType })
}
