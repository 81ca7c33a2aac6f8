package main

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	slsa "github.com/in-toto/attestation/go/predicates/provenance/v1"
	intoto "github.com/in-toto/attestation/go/v1"
	protobundle "github.com/sigstore/protobuf-specs/gen/pb-go/bundle/v1"
	protocommon "github.com/sigstore/protobuf-specs/gen/pb-go/common/v1"
	"github.com/sigstore/sigstore-go/pkg/sign"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// The release's signatures, as cosign (v3, its default bundle format) writes
// and reads them: Sigstore bundles (v0.3), verified with the key in
// PublicKeyFile and no transparency log, or keyless (keyless.go).
const (
	// PublicKeyFile is the release's public key, PEM (cosign.pub).
	PublicKeyFile = "cosign.pub"
	// BundleSuffix names a file's signature: FILE.sigstore.json.
	BundleSuffix = ".sigstore.json"
	// ProvenanceFile is the signed SLSA provenance of the release's files
	// (the chart, the krew archives and manifest).
	ProvenanceFile = "provenance" + BundleSuffix

	bundleMediaType = "application/vnd.dev.sigstore.bundle.v0.3+json"
	// inTotoPayloadType is the DSSE payload type of an in-toto statement.
	inTotoPayloadType = "application/vnd.in-toto+json"
	// cosignSignPredicate is the predicate of cosign's image signature:
	// the statement says only "this digest is signed".
	cosignSignPredicate     = "https://sigstore.dev/cosign/sign/v1"
	slsaProvenancePredicate = "https://slsa.dev/provenance/v1"
	// bundlePredicateAnnotation is where cosign puts a bundle's predicate
	// type on its referrer manifest.
	bundlePredicateAnnotation = "dev.sigstore.bundle.predicateType"
	// buildType names how the release is built: docs/release.md describes
	// make release, and the provenance's source commit holds it.
	buildType = imageSourceLabel + "/blob/main/docs/release.md"
	// DefaultBuilderID is the provenance's builder where RELEASE_BUILDER_ID
	// names none: make release on someone's machine.
	DefaultBuilderID = imageSourceLabel + "/hack/release.sh"
)

// ProvenanceOptions is what the provenance of a release says of its build.
type ProvenanceOptions struct {
	Version  string
	Revision string // the commit built
	Builder  string // builder.id: who ran the build (a URI)
	Started  time.Time
}

func signMain(args []string) error {
	fl := flag.NewFlagSet("release sign", flag.ContinueOnError)
	keyFile := fl.String("key", "", "cosign private key (cosign generate-key-pair; its password in COSIGN_PASSWORD); none: a new key pair for this release, whose private key is thrown away")
	keyless := fl.Bool("keyless", false, "sign without a key: a short-lived Fulcio certificate for the environment's OIDC identity (SIGSTORE_ID_TOKEN, or GitHub Actions' ACTIONS_ID_TOKEN_REQUEST_URL and ACTIONS_ID_TOKEN_REQUEST_TOKEN, audience sigstore), each signature recorded in Rekor; no cosign.pub")
	fulcioURL := fl.String("fulcio-url", DefaultFulcioURL, "the Fulcio instance of -keyless")
	rekorURL := fl.String("rekor-url", DefaultRekorURL, "the Rekor instance of -keyless")
	var o ProvenanceOptions
	fl.StringVar(&o.Version, "version", "", "the release's version (required)")
	fl.StringVar(&o.Revision, "revision", "", "the commit built (required)")
	fl.StringVar(&o.Builder, "builder-id", DefaultBuilderID, "the provenance's builder.id")
	started := fl.String("started", "", "RFC 3339 time the build started (default now)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() != 1 || o.Version == "" || o.Revision == "" {
		return errors.New("want -version V -revision COMMIT DIR")
	}
	if *keyless && *keyFile != "" {
		return errors.New("-key and -keyless: sign with one or the other")
	}
	o.Started = time.Now()
	if *started != "" {
		t, err := time.Parse(time.RFC3339, *started)
		if err != nil {
			return fmt.Errorf("-started: %w", err)
		}
		o.Started = t
	}
	var s *Signer
	var err error
	switch {
	case *keyless:
		s, err = newPublicKeylessSigner(context.Background(), *fulcioURL, *rekorURL)
	case *keyFile != "":
		var key *ecdsa.PrivateKey
		if key, err = LoadCosignKey(*keyFile, []byte(os.Getenv("COSIGN_PASSWORD"))); err == nil {
			s, err = NewKeySigner(key)
		}
	default:
		s, err = NewKeySigner(nil)
	}
	if err != nil {
		return err
	}
	signed, err := SignRelease(fl.Arg(0), s, o)
	for _, line := range signed {
		fmt.Println(line)
	}
	return err
}

// LoadCosignKey reads a private key as cosign generate-key-pair writes it
// (ENCRYPTED SIGSTORE PRIVATE KEY), or an unencrypted PKCS #8 one.
func LoadCosignKey(path string, password []byte) (*ecdsa.PrivateKey, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := cryptoutils.UnmarshalPEMToPrivateKey(data, cryptoutils.StaticPasswordFunc(password))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%s: a %T, want an ECDSA P-256 key (cosign's)", path, k)
	}
	return ek, nil
}

// Signer makes the release's Sigstore bundles: with a key (each bundle
// names it by its hint, and the release holds its PublicKeyFile) or
// keyless (each bundle holds a Fulcio certificate of the signer's OIDC
// identity and the signature's Rekor entry: keyless.go).
type Signer struct {
	keypair sign.Keypair
	opts    sign.BundleOptions
	// publicKeyPEM is the key's, written to PublicKeyFile; "" keyless.
	publicKeyPEM string
}

// NewKeySigner signs with key (nil: a new P-256 key, used for this
// release alone).
func NewKeySigner(key *ecdsa.PrivateKey) (*Signer, error) {
	if key == nil {
		var err error
		if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
			return nil, err
		}
	}
	kp, err := newReleaseKeypair(key)
	if err != nil {
		return nil, err
	}
	pem, err := kp.GetPublicKeyPem()
	if err != nil {
		return nil, err
	}
	return &Signer{keypair: kp, publicKeyPEM: pem}, nil
}

// bundle signs content.
func (s *Signer) bundle(content sign.Content) (*protobundle.Bundle, error) {
	return sign.Bundle(content, s.keypair, s.opts)
}

// SignRelease signs the release in dir with s; with a key, it writes the
// public key to dir/PublicKeyFile:
//   - each images/<minor>/*.oci.tar gains two referrers of its image index, each a
//     Sigstore bundle of a DSSE-signed in-toto statement about the index's
//     digest: cosign's signature, and SLSA v1 provenance;
//   - the chart (headroom-*.tgz) and every krew archive get a bundle of
//     their own next to them (FILE.sigstore.json, cosign sign-blob's);
//   - ProvenanceFile holds one signed SLSA v1 statement whose subjects are
//     those files and the krew manifest.
//
// Run it before WriteChecksums, which then lists what it wrote.
func SignRelease(dir string, s *Signer, o ProvenanceOptions) ([]string, error) {
	var done []string
	if s.publicKeyPEM != "" {
		if err := os.WriteFile(filepath.Join(dir, PublicKeyFile), []byte(s.publicKeyPEM), 0o644); err != nil {
			return nil, err
		}
		done = append(done, PublicKeyFile+": the public key")
	} else if err := os.Remove(filepath.Join(dir, PublicKeyFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		// Keyless: no key of an earlier signing may look like this one's.
		return nil, err
	}
	archives, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(ImageArchives)))
	if err != nil {
		return nil, err
	}
	for _, a := range archives {
		d, err := signImageArchive(a, s, o)
		if err != nil {
			return done, fmt.Errorf("%s: %w", a, err)
		}
		done = append(done, fmt.Sprintf("images/%s/%s: %s signed, with provenance", filepath.Base(filepath.Dir(a)), filepath.Base(a), d))
	}
	files, err := signedFiles(dir)
	if err != nil {
		return done, err
	}
	var subjects []*intoto.ResourceDescriptor
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return done, err
		}
		sum := sha256.Sum256(data)
		subjects = append(subjects, &intoto.ResourceDescriptor{Name: f, Digest: map[string]string{"sha256": hex.EncodeToString(sum[:])}})
		if f == krewManifestFile {
			continue // covered by the provenance, and its sha256s cover the archives
		}
		b, err := s.bundle(&sign.PlainData{Data: data})
		if err != nil {
			return done, err
		}
		if err := writeBundle(filepath.Join(dir, f+BundleSuffix), b); err != nil {
			return done, err
		}
		done = append(done, f+BundleSuffix)
	}
	if len(subjects) > 0 {
		b, err := signStatement(s, subjects, slsaProvenancePredicate, provenance(o))
		if err != nil {
			return done, err
		}
		if err := os.WriteFile(filepath.Join(dir, ProvenanceFile), b, 0o644); err != nil {
			return done, err
		}
		done = append(done, fmt.Sprintf("%s: SLSA provenance of %d files", ProvenanceFile, len(subjects)))
	}
	if id := s.identity(); id != "" {
		done = append(done, "signed keyless, every signature in the transparency log, with the certificate of "+id)
	}
	return done, nil
}

// krewManifestFile is the krew manifest WriteKubectlPlugin writes.
const krewManifestFile = "plugins/headroom.yaml"

// signedFiles are the release's files that are signed as blobs, relative
// to dir, sorted: the chart, the krew archives and the krew manifest.
func signedFiles(dir string) ([]string, error) {
	var files []string
	for _, pattern := range []string{"headroom-*.tgz", "kubectl-headroom/*", krewManifestFile} {
		m, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(pattern)))
		if err != nil {
			return nil, err
		}
		for _, p := range m {
			if strings.HasSuffix(p, BundleSuffix) {
				continue
			}
			rel, _ := filepath.Rel(dir, p)
			files = append(files, filepath.ToSlash(rel))
		}
	}
	slices.Sort(files)
	return files, nil
}

// signImageArchive adds the signature and provenance referrers of the image
// index to the OCI layout archive, and returns the index's digest.
func signImageArchive(archive string, s *Signer, o ProvenanceOptions) (v1.Hash, error) {
	dir, remove, err := unpack(archive)
	if err != nil {
		return v1.Hash{}, err
	}
	defer remove()
	l, err := readLayout(dir)
	if err != nil {
		return v1.Hash{}, err
	}
	mtime, err := firstModTime(archive)
	if err != nil {
		return v1.Hash{}, err
	}
	im, err := l.Index.IndexManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	if rev := im.Annotations["org.opencontainers.image.revision"]; rev != o.Revision {
		return v1.Hash{}, fmt.Errorf("the image index's revision is %q, the provenance's %q", rev, o.Revision)
	}
	idxSize, err := l.Index.Size()
	if err != nil {
		return v1.Hash{}, err
	}
	subject := v1.Descriptor{MediaType: im.MediaType, Size: idxSize, Digest: l.IndexDigest}
	if subject.MediaType == "" {
		subject.MediaType = types.OCIImageIndex
	}
	// cosign names the subject by the repository the image is pushed to;
	// the archive's name is the one it carries.
	about := []*intoto.ResourceDescriptor{{
		Name:   l.Tag.Context().Name(),
		Digest: map[string]string{"sha256": l.IndexDigest.Hex},
	}}
	p, err := layout.FromPath(dir)
	if err != nil {
		return v1.Hash{}, err
	}
	for _, st := range []struct {
		predicateType string
		predicate     proto.Message
	}{{cosignSignPredicate, nil}, {slsaProvenancePredicate, provenance(o)}} {
		b, err := signStatement(s, about, st.predicateType, st.predicate)
		if err != nil {
			return v1.Hash{}, err
		}
		img, err := bundleArtifact(b, st.predicateType, subject, mtime)
		if err != nil {
			return v1.Hash{}, err
		}
		if err := p.AppendImage(img); err != nil {
			return v1.Hash{}, err
		}
	}
	return l.IndexDigest, writeTar(dir, archive, mtime)
}

// provenance is the SLSA v1 predicate of a release build.
func provenance(o ProvenanceOptions) *slsa.Provenance {
	external, _ := structpb.NewStruct(map[string]any{
		"version": o.Version,
		"source":  "git+" + imageSourceLabel + "@" + o.Revision,
	})
	internal, _ := structpb.NewStruct(map[string]any{"goVersion": runtime.Version()})
	return &slsa.Provenance{
		BuildDefinition: &slsa.BuildDefinition{
			BuildType:          buildType,
			ExternalParameters: external,
			InternalParameters: internal,
			ResolvedDependencies: []*intoto.ResourceDescriptor{{
				Uri:    "git+" + imageSourceLabel,
				Digest: map[string]string{"gitCommit": o.Revision},
			}},
		},
		RunDetails: &slsa.RunDetails{
			Builder:  &slsa.Builder{Id: o.Builder},
			Metadata: &slsa.BuildMetadata{StartedOn: timestamppb.New(o.Started), FinishedOn: timestamppb.Now()},
		},
	}
}

// signStatement signs an in-toto statement (DSSE) and returns its bundle
// as JSON.
func signStatement(s *Signer, subjects []*intoto.ResourceDescriptor, predicateType string, predicate proto.Message) ([]byte, error) {
	st := &intoto.Statement{Type: intoto.StatementTypeUri, Subject: subjects, PredicateType: predicateType, Predicate: &structpb.Struct{}}
	if predicate != nil {
		raw, err := protojson.Marshal(predicate)
		if err != nil {
			return nil, err
		}
		if err := protojson.Unmarshal(raw, st.Predicate); err != nil {
			return nil, err
		}
	}
	payload, err := protojson.Marshal(st)
	if err != nil {
		return nil, err
	}
	b, err := s.bundle(&sign.DSSEData{Data: payload, PayloadType: inTotoPayloadType})
	if err != nil {
		return nil, err
	}
	return protojson.Marshal(b)
}

func writeBundle(path string, b proto.Message) error {
	raw, err := protojson.Marshal(b)
	if err != nil {
		return err
	}
	return os.WriteFile(path, raw, 0o644)
}

// releaseKeypair is the release's key as sigstore-go signs with it: ECDSA
// P-256 with SHA-256, its hint the public key's SHA-256 (as cosign's).
type releaseKeypair struct {
	key  *ecdsa.PrivateKey
	hint []byte
}

func newReleaseKeypair(key *ecdsa.PrivateKey) (*releaseKeypair, error) {
	der, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(der)
	return &releaseKeypair{key: key, hint: []byte(base64.StdEncoding.EncodeToString(sum[:]))}, nil
}

func (k *releaseKeypair) GetHashAlgorithm() protocommon.HashAlgorithm {
	return protocommon.HashAlgorithm_SHA2_256
}
func (k *releaseKeypair) GetSigningAlgorithm() protocommon.PublicKeyDetails {
	return protocommon.PublicKeyDetails_PKIX_ECDSA_P256_SHA_256
}
func (k *releaseKeypair) GetHint() []byte                { return k.hint }
func (k *releaseKeypair) GetKeyAlgorithm() string        { return "ECDSA" }
func (k *releaseKeypair) GetPublicKey() crypto.PublicKey { return k.key.Public() }
func (k *releaseKeypair) GetPublicKeyPem() (string, error) {
	pem, err := cryptoutils.MarshalPublicKeyToPEM(k.key.Public())
	return string(pem), err
}

// SignData signs data's SHA-256 and returns the signature and the digest.
func (k *releaseKeypair) SignData(_ context.Context, data []byte) ([]byte, []byte, error) {
	signer, err := signature.LoadECDSASignerVerifier(k.key, crypto.SHA256)
	if err != nil {
		return nil, nil, err
	}
	sum := sha256.Sum256(data)
	sig, err := signer.SignMessage(bytes.NewReader(data))
	return sig, sum[:], err
}

// bundleArtifact is the OCI artifact cosign attaches a bundle as: its only
// layer is the bundle, its config the empty descriptor, its artifact type
// the bundle's media type, its subject the signed manifest.
func bundleArtifact(bundle []byte, predicateType string, subject v1.Descriptor, created time.Time) (v1.Image, error) {
	layer := static.NewLayer(bundle, bundleMediaType)
	d, err := layer.Digest()
	if err != nil {
		return nil, err
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  bundleMediaType,
		Config:        v1.Descriptor{MediaType: types.MediaType(emptyConfigMediaType), Size: int64(len(emptyConfig)), Digest: emptyConfigDigest()},
		Layers:        []v1.Descriptor{{MediaType: bundleMediaType, Size: int64(len(bundle)), Digest: d}},
		Annotations: map[string]string{
			"org.opencontainers.image.created": created.UTC().Format(time.RFC3339),
			"dev.sigstore.bundle.content":      "dsse-envelope",
			bundlePredicateAnnotation:          predicateType,
		},
		Subject: &subject,
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&bundleImage{manifest: raw, layer: layer})
}

// The OCI empty descriptor's content, an artifact's config that says nothing.
const emptyConfigMediaType = "application/vnd.oci.empty.v1+json"

var emptyConfig = []byte("{}")

func emptyConfigDigest() v1.Hash {
	h, _, _ := v1.SHA256(bytes.NewReader(emptyConfig))
	return h
}

// bundleImage is the go-containerregistry image of bundleArtifact.
type bundleImage struct {
	manifest []byte
	layer    v1.Layer
}

func (b *bundleImage) RawConfigFile() ([]byte, error)      { return emptyConfig, nil }
func (b *bundleImage) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (b *bundleImage) RawManifest() ([]byte, error)        { return b.manifest, nil }
func (b *bundleImage) ArtifactType() (string, error)       { return bundleMediaType, nil }
func (b *bundleImage) Manifest() (*v1.Manifest, error) {
	return v1.ParseManifest(bytes.NewReader(b.manifest))
}
func (b *bundleImage) ConfigName() (v1.Hash, error)        { return emptyConfigDigest(), nil }
func (b *bundleImage) ConfigFile() (*v1.ConfigFile, error) { return &v1.ConfigFile{}, nil }
func (b *bundleImage) Digest() (v1.Hash, error)            { return partial.Digest(b) }
func (b *bundleImage) Size() (int64, error)                { return int64(len(b.manifest)), nil }
func (b *bundleImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, _ := b.layer.Digest(); d == h {
		return b.layer, nil
	}
	return nil, fmt.Errorf("bundle artifact has no blob %s", h)
}
