package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
)

// TestLoadCosignKey reads a key pair in cosign generate-key-pair's format
// (an encrypted PEM): its password opens it, another does not, and what it
// signs verifies with its public key.
func TestLoadCosignKey(t *testing.T) {
	dir := t.TempDir()
	password := []byte("correct horse")
	priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), cryptoutils.StaticPasswordFunc(password))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(priv), "ENCRYPTED SIGSTORE PRIVATE KEY") {
		t.Fatalf("not cosign's key format:\n%s", priv)
	}
	keyFile := filepath.Join(dir, "cosign.key")
	if err := os.WriteFile(keyFile, priv, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCosignKey(keyFile, []byte("wrong")); err == nil {
		t.Error("a wrong password opened the key")
	}
	key, err := LoadCosignKey(keyFile, password)
	if err != nil {
		t.Fatal(err)
	}
	release := t.TempDir()
	chart := filepath.Join(release, "headroom-0.0.0.tgz")
	if err := os.WriteFile(chart, []byte("a chart\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := SignRelease(release, newKeySigner(t, key), ProvenanceOptions{Version: "v0", Revision: strings.Repeat("ab", 20), Builder: DefaultBuilderID}); err != nil {
		t.Fatal(err)
	}
	written, err := os.ReadFile(filepath.Join(release, PublicKeyFile))
	if err != nil || string(written) != string(pub) {
		t.Fatalf("%s is %q (%v), want the key pair's public key %q", PublicKeyFile, written, err, pub)
	}
	rv, err := NewReleaseVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyFileSignatures(release, rv); err != nil {
		t.Fatal(err)
	}
}

// newKeySigner is NewKeySigner, failing the test on an error.
func newKeySigner(t *testing.T, key *ecdsa.PrivateKey) *Signer {
	t.Helper()
	s, err := NewKeySigner(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// tamperImage changes the amd64 image of the image archive (one more
// environment variable in its config) and writes the layout again with
// every digest above the config made to match: a new config blob, image
// manifest and index, index.json naming the new index; the SBOMs and
// bundles are carried over as they were.
func tamperImage(t *testing.T, archive string) {
	t.Helper()
	dir := t.TempDir()
	if err := untar(archive, dir); err != nil {
		t.Fatal(err)
	}
	l, err := readLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	mtime, err := firstModTime(archive)
	if err != nil {
		t.Fatal(err)
	}
	im, err := l.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var adds []mutate.IndexAddendum
	for _, d := range im.Manifests {
		img, err := l.Index.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if d.Platform.Architecture == "amd64" {
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			cf = cf.DeepCopy()
			cf.Config.Env = append(cf.Config.Env, "TAMPERED=1")
			if img, err = mutate.ConfigFile(img, cf); err != nil {
				t.Fatal(err)
			}
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: d.Platform}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, im.MediaType), adds...)
	idx = mutate.Annotations(idx, im.Annotations).(v1.ImageIndex)
	out := t.TempDir()
	p, err := layout.Write(out, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{imageNameAnnotation: l.Tag.String(), refNameAnnotation: l.Tag.TagStr()})); err != nil {
		t.Fatal(err)
	}
	for _, r := range l.Refs {
		if err := p.AppendImage(r.Image); err != nil {
			t.Fatal(err)
		}
	}
	if err := writeTar(out, archive, mtime); err != nil {
		t.Fatal(err)
	}
}
