package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"sigs.k8s.io/yaml"
)

// What a release's images are held to (hack/images index writes them so).
const (
	// imageRegistry is the registry and path of every image's name.
	imageRegistry = "ghcr.io/headroom-k8s"
	// imageSourceLabel is the images' org.opencontainers.image.source.
	imageSourceLabel = "https://github.com/headroom-k8s/headroom"
	// sbomMediaType is the SBOMs' artifact type, config and layer media type.
	sbomMediaType = "application/spdx+json"
)

// DefaultPlatforms are the release images' platforms, hack/release.sh's
// default RELEASE_PLATFORMS.
var DefaultPlatforms = []string{"linux/amd64", "linux/arm64"}

// elfMachines are the ELF machines of the GOARCHes an image may hold.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"arm":     elf.EM_ARM,
	"386":     elf.EM_386,
	"ppc64le": elf.EM_PPC64,
	"s390x":   elf.EM_S390,
	"riscv64": elf.EM_RISCV,
}

// commit is a full git commit hash, as the revision label holds it.
var commit = regexp.MustCompile(`^[0-9a-f]{40}$`)

func verifyMain(args []string) error {
	fl := flag.NewFlagSet("release verify", flag.ContinueOnError)
	platforms := fl.String("platforms", strings.Join(DefaultPlatforms, ","), "comma-separated OS/ARCH: the platforms every image index must hold, no more and no fewer")
	identity := fl.String("certificate-identity-regexp", "", "keyless: a regexp the signing certificate's identity (subject alternative name) must match, e.g. the release workflow's ^https://github\\.com/headroom-k8s/headroom/\\.github/workflows/release\\.yaml@refs/tags/v; with -certificate-oidc-issuer, instead of the release's cosign.pub")
	issuer := fl.String("certificate-oidc-issuer", "", "keyless: the OIDC issuer the certificate must name, e.g. https://token.actions.githubusercontent.com")
	minorsFlag := fl.String("minors", "", "comma-separated Kubernetes minors, e.g. 1.35,1.36,1.37: images/ must hold exactly these (default: any, each with the same images)")
	trustedRoot := fl.String("trusted-root", "", "keyless: a Sigstore trusted root (JSON) holding the Fulcio and Rekor keys; default Sigstore's public one, fetched through TUF")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if fl.NArg() != 1 {
		return fmt.Errorf("want one directory, got %q", fl.Args())
	}
	dir := fl.Arg(0)
	ps, err := ParsePlatforms(*platforms)
	if err != nil {
		return fmt.Errorf("-platforms: %w", err)
	}
	minors, err := ParseMinors(*minorsFlag)
	if err != nil {
		return fmt.Errorf("-minors: %w", err)
	}
	// Keyless when an identity is given; else the release's own key.
	var rv *ReleaseVerifier
	switch {
	case *identity != "" || *issuer != "":
		if *identity == "" || *issuer == "" {
			return errors.New("-certificate-identity-regexp and -certificate-oidc-issuer: keyless verification needs both")
		}
		trusted, err := LoadTrustedRoot(*trustedRoot)
		if err != nil {
			return fmt.Errorf("-trusted-root: %w", err)
		}
		if rv, err = NewKeylessVerifier(trusted, *identity, *issuer); err != nil {
			return err
		}
	case *trustedRoot != "":
		return errors.New("-trusted-root is for keyless verification: give -certificate-identity-regexp and -certificate-oidc-issuer too")
	}
	rel, err := Verify(dir, ps, minors, rv)
	if err != nil {
		return fmt.Errorf("%s:\n%w", dir, err)
	}
	for _, img := range rel.Images {
		fmt.Printf("%s: %s@%s (%s), each with its SBOM; signed, with provenance\n", img.File, img.Tag, img.Index, strings.Join(img.Platforms, ", "))
	}
	for _, a := range rel.Plugin {
		fmt.Printf("%s: in plugins/headroom.yaml\n", a)
	}
	fmt.Printf("%s: every file as %s lists it\n", dir, ChecksumsFile)
	return nil
}

// ParsePlatforms reads a comma-separated list of OS/ARCH; "" is none.
func ParsePlatforms(s string) ([]string, error) {
	return parseList(s, func(f string) error {
		goos, goarch, ok := strings.Cut(f, "/")
		if !ok || goos == "" || goarch == "" || strings.Contains(goarch, "/") {
			return fmt.Errorf("%q is not OS/ARCH", f)
		}
		return nil
	})
}

// parseList reads a comma-separated list ("" is none), each entry checked
// by valid and given once, sorted.
func parseList(s string, valid func(string) error) ([]string, error) {
	var list []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if err := valid(f); err != nil {
			return nil, err
		}
		if slices.Contains(list, f) {
			return nil, fmt.Errorf("%s given twice", f)
		}
		list = append(list, f)
	}
	slices.Sort(list)
	return list, nil
}

// Release is what Verify found in a release directory.
type Release struct {
	// Images are the images/<minor>/*.oci.tar archives.
	Images []ArchivedImage
	// Plugin are kubectl-headroom's krew archives, relative to the
	// release directory.
	Plugin []string
}

// ArchivedImage is one image archive of a release.
type ArchivedImage struct {
	// File is the archive's path relative to the release directory.
	File string
	// Tag is the image's name, Index its image index's digest.
	Tag   name.Tag
	Index v1.Hash
	// Platforms are the image index's platforms, sorted.
	Platforms []string
}

// PlatformImage is one platform's image of an index as CheckIndex read it.
type PlatformImage struct {
	Digest v1.Hash
	// Binary is the image's executable, SBOM the SPDX document of its
	// referrer (nil where they could not be read).
	Binary, SBOM []byte
}

// ImageSource is where a release image's manifests are read from: the OCI
// image layout of its archive, or the registry it was pushed to.
type ImageSource interface {
	// Image is the manifest of digest h: a platform's image or an SBOM.
	Image(h v1.Hash) (v1.Image, error)
	// Referrers are the descriptors of the manifests whose subject is h.
	Referrers(h v1.Hash) ([]v1.Descriptor, error)
}

// Verify checks the release in dir: SHA256SUMS (VerifyChecksums); the
// signatures with rv (nil: the release's PublicKeyFile, offline);
// every images/<minor>/*.oci.tar (VerifyImageArchive), its image index
// holding exactly platforms, tagged for its minor (CheckMinors; minors
// nil: any, else exactly those); and kubectl-headroom's krew archives against
// plugins/headroom.yaml (VerifyKubectlPlugin). It reports every problem it
// finds, each naming its file relative to dir, joined.
func Verify(dir string, platforms, minors []string, rv *ReleaseVerifier) (*Release, error) {
	var errs []error
	if err := VerifyChecksums(dir); err != nil {
		errs = append(errs, err)
	}
	rel := &Release{}
	// Every release is signed: without its key nothing else can be trusted,
	// but the rest is still checked and reported.
	if rv == nil {
		if pem, err := os.ReadFile(filepath.Join(dir, PublicKeyFile)); err != nil {
			errs = append(errs, fmt.Errorf("%s: the release's public key: %w", PublicKeyFile, err))
		} else if rv, err = NewReleaseVerifier(pem); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", PublicKeyFile, err))
		}
	}
	if rv != nil {
		errs = append(errs, VerifyFileSignatures(dir, rv))
	}
	stray, err := filepath.Glob(filepath.Join(dir, "images", "*.oci.tar"))
	if err != nil {
		return nil, err
	}
	for _, a := range stray {
		errs = append(errs, fmt.Errorf("images/%s: not in a minor's directory, %s", filepath.Base(a), ImageArchives))
	}
	archives, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(ImageArchives)))
	if err != nil {
		return nil, err
	}
	for _, a := range archives {
		file := "images/" + filepath.Base(filepath.Dir(a)) + "/" + filepath.Base(a)
		img, err := VerifyImageArchive(a, platforms, rv)
		errs = append(errs, prefixed(file, err))
		if img != nil {
			img.File = file
			rel.Images = append(rel.Images, *img)
		}
	}
	errs = append(errs, CheckMinors(rel.Images, minors))
	plugin, err := VerifyKubectlPlugin(dir)
	errs = append(errs, err)
	rel.Plugin = plugin
	return rel, errors.Join(errs...)
}

// VerifyImageArchive checks an image archive of hack/images index: every
// blob of its OCI image layout is what its name says; index.json names one
// image, ghcr.io/headroom-k8s/NAME:TAG for the archive NAME.oci.tar, an
// image index of exactly platforms, each platform's image with one SBOM
// (CheckIndex); the index is signed by rv's key and has its provenance
// (CheckIndexSignatures; rv nil: not checked); and every other manifest of
// index.json is one of those SBOMs or bundles. It returns what it read even
// when it finds problems.
func VerifyImageArchive(archive string, platforms []string, rv *ReleaseVerifier) (*ArchivedImage, error) {
	dir, remove, err := unpack(archive)
	if err != nil {
		return nil, err
	}
	defer remove()
	errs := []error{checkBlobs(dir)}
	l, err := readLayout(dir)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	image := strings.TrimSuffix(filepath.Base(archive), ".oci.tar")
	if want := imageRegistry + "/" + image + ":" + l.Tag.TagStr(); l.Tag.String() != want {
		errs = append(errs, fmt.Errorf("index.json names %s, want %s", l.Tag, want))
	}
	got, err := CheckIndex(l, l.Index, image, l.Tag.TagStr(), platforms)
	errs = append(errs, prefixed("image index", err))
	img := &ArchivedImage{Tag: l.Tag, Index: l.IndexDigest}
	images := map[v1.Hash]bool{}
	for p, pi := range got {
		img.Platforms = append(img.Platforms, p)
		images[pi.Digest] = true
	}
	slices.Sort(img.Platforms)
	if rv != nil {
		errs = append(errs, prefixed("image index "+l.IndexDigest.String(), CheckIndexSignatures(l, l.IndexDigest, rv)))
	}
	for _, r := range l.Refs {
		if isBundleRef(r) && r.Manifest.Subject.Digest == l.IndexDigest {
			continue
		}
		if !images[r.Manifest.Subject.Digest] {
			errs = append(errs, fmt.Errorf("index.json: manifest %s refers to %s, no image of the index", r.Desc.Digest, r.Manifest.Subject.Digest))
		}
	}
	return img, errors.Join(errs...)
}

// checkBlobs checks that every blob of the OCI image layout in dir has the
// SHA-256 its name says.
func checkBlobs(dir string) error {
	var errs []error
	err := filepath.WalkDir(filepath.Join(dir, "blobs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		want, ok := strings.CutPrefix(rel, "blobs/sha256/")
		if !ok {
			errs = append(errs, fmt.Errorf("%s: not a sha256 blob", rel))
			return nil
		}
		sum, err := sha256File(p)
		if err != nil {
			return err
		}
		if sum != want {
			errs = append(errs, fmt.Errorf("%s: the content's sha256 is %s", rel, sum))
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}

// CheckIndex checks the image index idx of the release image NAME:version
// (its version annotation) and each of its platform images
// (CheckPlatformImage), read from src: one image per platform, exactly the
// platforms given. It returns the images it read, by platform, even when
// it finds problems.
func CheckIndex(src ImageSource, idx v1.ImageIndex, image, version string, platforms []string) (map[string]PlatformImage, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var errs []error
	if v := im.Annotations["org.opencontainers.image.version"]; v != version {
		errs = append(errs, fmt.Errorf("annotation org.opencontainers.image.version %q, want %q", v, version))
	}
	got := map[string]PlatformImage{}
	for _, d := range im.Manifests {
		if d.Platform == nil {
			errs = append(errs, fmt.Errorf("entry %s has no platform", d.Digest))
			continue
		}
		p := d.Platform.String()
		if _, dup := got[p]; dup {
			errs = append(errs, fmt.Errorf("two images for %s", p))
			continue
		}
		pi, err := CheckPlatformImage(src, d, image, version)
		got[p] = pi
		errs = append(errs, prefixed(p+" image "+d.Digest.String(), err))
	}
	for _, p := range platforms {
		if _, ok := got[p]; !ok {
			errs = append(errs, fmt.Errorf("no %s image (platforms wanted: %s)", p, strings.Join(platforms, ", ")))
		}
	}
	for p := range got {
		if !slices.Contains(platforms, p) {
			errs = append(errs, fmt.Errorf("a %s image, not among the platforms wanted (%s)", p, strings.Join(platforms, ", ")))
		}
	}
	return got, errors.Join(errs...)
}

// CheckPlatformImage checks the image d of an index, read from src: its
// config is the platform's, with the release's OCI labels (version, a
// commit as revision, the source, an RFC 3339 creation time) and /NAME as
// entrypoint; its one layer holds only the executable NAME, a statically
// linked ELF binary of the platform's machine; and exactly one
// application/spdx+json manifest refers to it, an SBOM of that binary
// (CheckSBOM). It returns the binary and the SBOM where it could read
// them, even when it finds problems.
func CheckPlatformImage(src ImageSource, d v1.Descriptor, image, version string) (PlatformImage, error) {
	pi := PlatformImage{Digest: d.Digest}
	img, err := manifestAt(src, d.Digest)
	if err != nil {
		return pi, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return pi, fmt.Errorf("config: %w", err)
	}
	var errs []error
	if d.Platform.OS != "linux" {
		errs = append(errs, fmt.Errorf("platform %s: the images hold linux binaries", d.Platform))
	}
	if cf.OS != d.Platform.OS || cf.Architecture != d.Platform.Architecture {
		errs = append(errs, fmt.Errorf("config is %s/%s, the index says %s", cf.OS, cf.Architecture, d.Platform))
	}
	labels := cf.Config.Labels
	if v := labels["org.opencontainers.image.version"]; v != version {
		errs = append(errs, fmt.Errorf("label org.opencontainers.image.version %q, want %q", v, version))
	}
	if rev := labels["org.opencontainers.image.revision"]; !commit.MatchString(rev) {
		errs = append(errs, fmt.Errorf("label org.opencontainers.image.revision %q, want a commit", rev))
	}
	if s := labels["org.opencontainers.image.source"]; s != imageSourceLabel {
		errs = append(errs, fmt.Errorf("label org.opencontainers.image.source %q, want %s", s, imageSourceLabel))
	}
	if _, err := time.Parse(time.RFC3339, labels["org.opencontainers.image.created"]); err != nil {
		errs = append(errs, fmt.Errorf("label org.opencontainers.image.created: %w", err))
	}
	if got := strings.Join(cf.Config.Entrypoint, " "); got != "/"+image {
		errs = append(errs, fmt.Errorf("entrypoint %q, want /%s", got, image))
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		return pi, errors.Join(append(errs, fmt.Errorf("%d layers (%v), want 1", len(layers), err))...)
	}
	pi.Binary, err = onlyExecutable(layers[0], image)
	if err != nil {
		return pi, errors.Join(append(errs, fmt.Errorf("layer: %w", err))...)
	}
	errs = append(errs, checkELF(pi.Binary, d.Platform.Architecture))

	ref, err := sbomOf(src, d.Digest)
	if err != nil {
		return pi, errors.Join(append(errs, err)...)
	}
	pi.SBOM, err = readSBOM(src, ref, d.Digest)
	if err == nil {
		err = CheckSBOM(pi.SBOM, pi.Binary)
	}
	errs = append(errs, prefixed("SBOM "+ref.Digest.String(), err))
	return pi, errors.Join(errs...)
}

// onlyExecutable is the content of the layer's only entry, which must be
// the executable /NAME.
func onlyExecutable(l v1.Layer, name string) ([]byte, error) {
	rc, err := l.Uncompressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	var data []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if path.Clean("/"+h.Name) != "/"+name || h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 || data != nil {
			return nil, fmt.Errorf("entry %q (mode %o), want only the executable /%s", h.Name, h.Mode, name)
		}
		if data, err = io.ReadAll(tr); err != nil {
			return nil, err
		}
	}
	if data == nil {
		return nil, fmt.Errorf("no /%s", name)
	}
	return data, nil
}

// checkELF checks that bin is a statically linked ELF binary for goarch.
func checkELF(bin []byte, goarch string) error {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("the binary is not ELF: %w", err)
	}
	defer f.Close()
	var errs []error
	if want, ok := elfMachines[goarch]; !ok {
		errs = append(errs, fmt.Errorf("no ELF machine known for %s", goarch))
	} else if f.Machine != want {
		errs = append(errs, fmt.Errorf("the binary is for %s, the image for %s", f.Machine, goarch))
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			errs = append(errs, errors.New("the binary is dynamically linked: it cannot run on an empty base"))
		}
	}
	return errors.Join(errs...)
}

// sbomOf is the one application/spdx+json referrer of subject in src.
func sbomOf(src ImageSource, subject v1.Hash) (v1.Descriptor, error) {
	refs, err := src.Referrers(subject)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("referrers: %w", err)
	}
	var sboms []v1.Descriptor
	var all []string
	for _, r := range refs {
		all = append(all, fmt.Sprintf("%s %q", r.Digest, r.ArtifactType))
		if r.ArtifactType == sbomMediaType {
			sboms = append(sboms, r)
		}
	}
	if len(sboms) != 1 {
		return v1.Descriptor{}, fmt.Errorf("%d %s referrers, want one (referrers: %s)", len(sboms), sbomMediaType, strings.Join(all, ", "))
	}
	return sboms[0], nil
}

// manifestAt reads the manifest of digest h from src and checks that its
// bytes are what h names.
func manifestAt(src ImageSource, h v1.Hash) (v1.Image, error) {
	img, err := src.Image(h)
	if err != nil {
		return nil, err
	}
	if got, err := img.Digest(); err != nil || got != h {
		return nil, fmt.Errorf("manifest digest %s (%v), want %s", got, err, h)
	}
	return img, nil
}

// readSBOM reads the SBOM artifact ref from src: a manifest whose subject
// is the image and whose config and only layer are the SPDX document.
func readSBOM(src ImageSource, ref v1.Descriptor, subject v1.Hash) ([]byte, error) {
	art, err := manifestAt(src, ref.Digest)
	if err != nil {
		return nil, err
	}
	m, err := art.Manifest()
	if err != nil {
		return nil, err
	}
	var errs []error
	if m.Subject == nil || m.Subject.Digest != subject {
		errs = append(errs, fmt.Errorf("subject %+v, want %s", m.Subject, subject))
	}
	if m.Config.MediaType != sbomMediaType {
		errs = append(errs, fmt.Errorf("config media type %s, want %s", m.Config.MediaType, sbomMediaType))
	}
	layers, err := art.Layers()
	if err != nil || len(layers) != 1 {
		return nil, errors.Join(append(errs, fmt.Errorf("%d layers (%v), want 1", len(layers), err))...)
	}
	if mt, _ := layers[0].MediaType(); mt != sbomMediaType {
		errs = append(errs, fmt.Errorf("layer media type %s, want %s", mt, sbomMediaType))
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	defer rc.Close()
	doc, err := io.ReadAll(rc)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	return doc, errors.Join(errs...)
}

// spdx is the part of an SPDX 2.3 document the checks read.
type spdx struct {
	SPDXVersion string `json:"spdxVersion"`
	Packages    []struct {
		Name         string `json:"name"`
		SPDXID       string `json:"SPDXID"`
		VersionInfo  string `json:"versionInfo"`
		Checksums    []struct{ Algorithm, ChecksumValue string }
		ExternalRefs []struct{ ReferenceType, ReferenceLocator string }
	} `json:"packages"`
	Relationships []struct {
		Element string `json:"spdxElementId"`
		Type    string `json:"relationshipType"`
		Related string `json:"relatedSpdxElement"`
	} `json:"relationships"`
}

// parseSPDX reads an SPDX JSON document.
func parseSPDX(data []byte) (*spdx, error) {
	var doc spdx
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	return &doc, nil
}

// versions are the versions of the document's packages, by name.
func (doc *spdx) versions() map[string]string {
	v := map[string]string{}
	for _, p := range doc.Packages {
		v[p.Name] = p.VersionInfo
	}
	return v
}

// CheckSBOM holds the SPDX 2.3 document data to the Go binary bin: it
// describes the binary, with the binary's SHA-256, and lists the Go
// toolchain, the main module and every module of the binary's own build
// information at its version (the replacement where one is replaced),
// each module with its package URL.
func CheckSBOM(data, bin []byte) error {
	doc, err := parseSPDX(data)
	if err != nil {
		return err
	}
	bi, err := buildinfo.Read(bytes.NewReader(bin))
	if err != nil {
		return fmt.Errorf("the binary has no Go build information: %w", err)
	}
	var errs []error
	if doc.SPDXVersion != "SPDX-2.3" {
		errs = append(errs, fmt.Errorf("spdxVersion %q, want SPDX-2.3", doc.SPDXVersion))
	}
	sum := sha256.Sum256(bin)
	hexSum := hex.EncodeToString(sum[:])
	versions := doc.versions()
	purls := map[string]bool{}
	binaryFound := false
	for _, p := range doc.Packages {
		for _, r := range p.ExternalRefs {
			if r.ReferenceType == "purl" {
				purls[r.ReferenceLocator] = true
			}
		}
		if p.SPDXID == "SPDXRef-Binary" {
			binaryFound = true
			if len(p.Checksums) != 1 || p.Checksums[0].ChecksumValue != hexSum {
				errs = append(errs, fmt.Errorf("the binary's checksums %+v, its sha256 is %s", p.Checksums, hexSum))
			}
		}
	}
	if !binaryFound {
		errs = append(errs, errors.New("describes no binary (no package SPDXRef-Binary)"))
	}
	if versions["stdlib"] != bi.GoVersion {
		errs = append(errs, fmt.Errorf("lists stdlib %q, the binary was built with %s", versions["stdlib"], bi.GoVersion))
	}
	for _, dep := range bi.Deps {
		m := *dep
		if m.Replace != nil {
			m = *m.Replace
		}
		if versions[m.Path] != m.Version {
			errs = append(errs, fmt.Errorf("lists %s at %q, the binary holds %s", m.Path, versions[m.Path], m.Version))
		}
		if !purls["pkg:golang/"+m.Path+"@"+m.Version] {
			errs = append(errs, fmt.Errorf("has no purl pkg:golang/%s@%s", m.Path, m.Version))
		}
	}
	if versions[bi.Main.Path] != bi.Main.Version {
		errs = append(errs, fmt.Errorf("lists the main module %s at %q, the binary %s", bi.Main.Path, versions[bi.Main.Path], bi.Main.Version))
	}
	described := 0
	for _, r := range doc.Relationships {
		if r.Element == "SPDXRef-DOCUMENT" && r.Type == "DESCRIBES" && r.Related == "SPDXRef-Binary" {
			described++
		}
	}
	if described != 1 {
		errs = append(errs, fmt.Errorf("%d DESCRIBES relationships of the binary, want 1", described))
	}
	return errors.Join(errs...)
}

// VerifyKubectlPlugin checks the krew manifest plugins/headroom.yaml of the
// release in dir against the archives in kubectl-headroom/: each platform's
// archive is there under its name with the manifest's sha256 and holds the
// files the manifest copies, no others, its bin an executable Go binary of
// the platform's os/arch; and every archive there is in the manifest. A
// release with neither is fine. It returns the archives, relative to dir.
func VerifyKubectlPlugin(dir string) ([]string, error) {
	const manifest, archives = "plugins/headroom.yaml", "kubectl-headroom"
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(manifest)))
	entries, derr := os.ReadDir(filepath.Join(dir, archives))
	switch {
	case errors.Is(err, fs.ErrNotExist) && errors.Is(derr, fs.ErrNotExist):
		return nil, nil
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: missing, and %s/ holds krew archives", manifest, archives)
	case err != nil:
		return nil, err
	}
	var p KrewPlugin
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", manifest, err)
	}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if p.APIVersion != "krew.googlecontainertools.github.com/v1alpha2" || p.Kind != "Plugin" || p.Metadata.Name != "headroom" {
		fail("%s: %s %s %q, want krew.googlecontainertools.github.com/v1alpha2 Plugin \"headroom\"", manifest, p.APIVersion, p.Kind, p.Metadata.Name)
	}
	if p.Spec.Version == "" || p.Spec.ShortDescription == "" || p.Spec.Homepage == "" {
		fail("%s: spec.version %q, shortDescription %q, homepage %q: want all three", manifest, p.Spec.Version, p.Spec.ShortDescription, p.Spec.Homepage)
	}
	if len(p.Spec.Platforms) == 0 {
		fail("%s: no platforms", manifest)
	}
	var found []string
	listed := map[string]bool{}
	for _, pl := range p.Spec.Platforms {
		goos, goarch := pl.Selector.MatchLabels["os"], pl.Selector.MatchLabels["arch"]
		if goos == "" || goarch == "" {
			fail("%s: a platform selects %v, want os and arch", manifest, pl.Selector.MatchLabels)
			continue
		}
		archive, exe := krewArchive(p.Spec.Version, goos, goarch)
		if listed[archive] {
			fail("%s: %s/%s twice", manifest, goos, goarch)
			continue
		}
		listed[archive] = true
		file := archives + "/" + archive
		if path.Base(pl.URI) != archive {
			fail("%s: %s/%s's uri %s, want one ending in /%s", manifest, goos, goarch, pl.URI, archive)
		}
		if pl.Bin != exe {
			fail("%s: %s/%s's bin %q, want %s", manifest, goos, goarch, pl.Bin, exe)
		}
		sum, err := sha256File(filepath.Join(dir, filepath.FromSlash(file)))
		if err != nil {
			fail("%s: %s/%s's archive: %v", manifest, goos, goarch, err)
			continue
		}
		found = append(found, file)
		if sum != pl.SHA256 {
			fail("%s: %s/%s's sha256 %s, %s's is %s", manifest, goos, goarch, pl.SHA256, file, sum)
		}
		files, err := readKrewArchive(filepath.Join(dir, filepath.FromSlash(file)))
		if err != nil {
			fail("%s: %v", file, err)
			continue
		}
		copied := map[string]bool{}
		for _, f := range pl.Files {
			copied[f.From] = true
			if files[f.From] == nil {
				fail("%s: %s copies %s, which the archive does not hold", file, manifest, f.From)
			}
			if f.To != "." {
				fail("%s: %s copies %s to %q, want \".\"", file, manifest, f.From, f.To)
			}
		}
		for _, n := range slices.Sorted(maps.Keys(files)) {
			if !copied[n] {
				fail("%s: holds %s, which %s does not copy", file, n, manifest)
			}
		}
		b := files[pl.Bin]
		switch {
		case b == nil:
			fail("%s: no %s", file, pl.Bin)
		case !copied[pl.Bin]:
			fail("%s: %s does not copy the bin %s", file, manifest, pl.Bin)
		case b.mode&0o111 == 0:
			fail("%s: %s is not executable (mode %o)", file, pl.Bin, b.mode)
		}
		if b != nil {
			if gotOS, gotArch, err := goPlatform(bytes.NewReader(b.data)); err != nil {
				fail("%s: %s: %v", file, pl.Bin, err)
			} else if gotOS != goos || gotArch != goarch {
				fail("%s: %s is a %s/%s binary, %s says %s/%s", file, pl.Bin, gotOS, gotArch, manifest, goos, goarch)
			}
		}
	}
	if derr != nil && !errors.Is(derr, fs.ErrNotExist) {
		fail("%s/: %v", archives, derr)
	}
	for _, e := range entries {
		// An archive's signature (FILE.sigstore.json) is held to it by
		// VerifyFileSignatures.
		if !listed[e.Name()] && !strings.HasSuffix(e.Name(), BundleSuffix) {
			fail("%s/%s is not in %s", archives, e.Name(), manifest)
		}
	}
	return found, errors.Join(errs...)
}

// prefixed puts prefix before each problem of err (each error
// errors.Join joined), so that every line of the report says where.
func prefixed(prefix string, err error) error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		var errs []error
		for _, e := range j.Unwrap() {
			errs = append(errs, prefixed(prefix, e))
		}
		return errors.Join(errs...)
	}
	return fmt.Errorf("%s: %w", prefix, err)
}
