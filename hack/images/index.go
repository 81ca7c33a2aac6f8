package main

import (
	"archive/tar"
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Annotations of the top-level descriptors in a release archive's
// index.json. ImageNameAnnotation (containerd's) carries the full name
// `ctr images import` gives the image; RefNameAnnotation (the OCI image
// layout's) the tag, as skopeo and oras read it.
const (
	ImageNameAnnotation = "io.containerd.image.name"
	RefNameAnnotation   = "org.opencontainers.image.ref.name"
)

// indexMain is `images index`: one multi-platform image per binary name,
// written as an OCI image layout in a tar archive NAME.oci.tar:
//
//	go run ./hack/images index -out bin/release/images -version V -revision SHA \
//	  build/linux_amd64/headroom-node-agent build/linux_arm64/headroom-node-agent ...
//
// Binaries of the same name (one per platform, read from the binary's Go
// build information) make one image index; each platform's image carries
// an SPDX SBOM of its binary as an OCI referrer (a manifest whose subject
// is the image).
func indexMain(args []string) error {
	fl := flag.NewFlagSet("images index", flag.ContinueOnError)
	var o Options
	var out, created string
	fl.StringVar(&out, "out", "bin/release/images", "directory the NAME.oci.tar archives are written to")
	fl.StringVar(&o.Registry, "registry", "ghcr.io/headroom-k8s", "registry and path of the image names")
	fl.StringVar(&o.Version, "version", "", "image tag and org.opencontainers.image.version (required)")
	fl.StringVar(&o.Revision, "revision", "unknown", "org.opencontainers.image.revision: the commit")
	fl.StringVar(&o.Source, "source", "https://github.com/headroom-k8s/headroom", "org.opencontainers.image.source")
	fl.StringVar(&created, "created", "1970-01-01T00:00:00Z", "RFC 3339 creation time of the images")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if o.Version == "" {
		return fmt.Errorf("-version is required")
	}
	t, err := time.Parse(time.RFC3339, created)
	if err != nil {
		return fmt.Errorf("-created: %w", err)
	}
	o.Created = t.UTC()
	byName := map[string][]string{}
	for _, bin := range fl.Args() {
		byName[filepath.Base(bin)] = append(byName[filepath.Base(bin)], bin)
	}
	if len(byName) == 0 {
		return fmt.Errorf("no binaries given")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, n := range slices.Sorted(func(yield func(string) bool) {
		for k := range byName {
			if !yield(k) {
				return
			}
		}
	}) {
		path := filepath.Join(out, n+".oci.tar")
		tag, digest, err := WriteIndex(path, byName[n], o)
		if err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		fmt.Printf("%s: %s@%s\n", path, tag, digest)
	}
	return nil
}

// Platform is the GOOS and GOARCH the Go binary at bin was built for.
func Platform(bin string) (v1.Platform, error) {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return v1.Platform{}, fmt.Errorf("%s: no Go build information: %w", bin, err)
	}
	p := v1.Platform{OS: setting(bi, "GOOS"), Architecture: setting(bi, "GOARCH")}
	if p.OS == "" || p.Architecture == "" {
		return v1.Platform{}, fmt.Errorf("%s: build information names no GOOS/GOARCH", bin)
	}
	return p, nil
}

// Index is the multi-platform image of binaries (one name, one per
// platform) and, for each platform's image, its SBOM artifact.
func Index(binaries []string, o Options) (v1.ImageIndex, []v1.Image, error) {
	base := filepath.Base(binaries[0])
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	var sboms []v1.Image
	seen := map[string]string{}
	for _, bin := range binaries {
		if filepath.Base(bin) != base {
			return nil, nil, fmt.Errorf("%s and %s in one index", binaries[0], bin)
		}
		p, err := Platform(bin)
		if err != nil {
			return nil, nil, err
		}
		if p.OS != "linux" {
			return nil, nil, fmt.Errorf("%s is a %s binary: images run linux ones", bin, p.OS)
		}
		if other, ok := seen[p.String()]; ok {
			return nil, nil, fmt.Errorf("%s and %s are both %s", other, bin, p)
		}
		seen[p.String()] = bin
		po := o
		po.Arch = p.Architecture
		img, err := Image(bin, po)
		if err != nil {
			return nil, nil, err
		}
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{Platform: &p},
		})
		doc, err := SBOM(bin, base, o.Version, o.Created)
		if err != nil {
			return nil, nil, err
		}
		subject, err := partial.Descriptor(img)
		if err != nil {
			return nil, nil, err
		}
		subject.Platform = &p
		sbom, err := SBOMArtifact(doc, *subject, o.Created)
		if err != nil {
			return nil, nil, err
		}
		sboms = append(sboms, sbom)
	}
	idx = mutate.Annotations(idx, map[string]string{
		"org.opencontainers.image.title":    base,
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   o.Source,
		"org.opencontainers.image.created":  o.Created.Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
	}).(v1.ImageIndex)
	return idx, sboms, nil
}

// WriteIndex writes the multi-platform image of binaries and its SBOMs as an
// OCI image layout in a tar archive at path, and returns the image's tag
// and the index's digest. The index is index.json's entry that names the
// image; the SBOMs are entries of their own, found by their subject.
func WriteIndex(path string, binaries []string, o Options) (name.Tag, v1.Hash, error) {
	base := filepath.Base(binaries[0])
	tag, err := name.NewTag(fmt.Sprintf("%s/%s:%s", o.Registry, base, o.Version), name.StrictValidation)
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	idx, sboms, err := Index(binaries, o)
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	dir, err := os.MkdirTemp("", "oci-layout-")
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	defer os.RemoveAll(dir)
	lp, err := layout.Write(dir, empty.Index)
	if err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	if err := lp.AppendIndex(idx, layout.WithAnnotations(map[string]string{
		ImageNameAnnotation: tag.String(),
		RefNameAnnotation:   tag.TagStr(),
	})); err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	for _, s := range sboms {
		if err := lp.AppendImage(s); err != nil {
			return name.Tag{}, v1.Hash{}, err
		}
	}
	if err := tarDir(path, dir, o.Created); err != nil {
		return name.Tag{}, v1.Hash{}, err
	}
	digest, err := idx.Digest()
	return tag, digest, err
}

// SBOMArtifact is an OCI artifact holding an SPDX document about subject:
// an image manifest whose config and only layer are the document (media
// type application/spdx+json, so that the config's media type, which
// registries and go-containerregistry report as the artifact type, names
// it), with subject set so that the referrers API of an OCI 1.1 registry
// (or the referrers tag schema of an older one) lists it under the image.
func SBOMArtifact(doc []byte, subject v1.Descriptor, created time.Time) (v1.Image, error) {
	layer := static.NewLayer(doc, SBOMMediaType)
	d, err := layer.Digest()
	if err != nil {
		return nil, err
	}
	desc := v1.Descriptor{MediaType: SBOMMediaType, Size: int64(len(doc)), Digest: d}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		Config:        desc,
		Layers:        []v1.Descriptor{desc},
		Annotations: map[string]string{
			"org.opencontainers.image.created": created.UTC().Format(time.RFC3339),
			"org.opencontainers.image.title":   "sbom.spdx.json",
		},
		Subject: &v1.Descriptor{MediaType: subject.MediaType, Size: subject.Size, Digest: subject.Digest},
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return partial.CompressedToImage(&artifact{manifest: raw, doc: doc, layer: layer})
}

// artifact is the go-containerregistry image of SBOMArtifact: its
// manifest, and one blob that is both its config and its layer.
type artifact struct {
	manifest, doc []byte
	layer         v1.Layer
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return a.doc, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }
func (a *artifact) ArtifactType() (string, error)       { return SBOMMediaType, nil }
func (a *artifact) Manifest() (*v1.Manifest, error) {
	return v1.ParseManifest(bytes.NewReader(a.manifest))
}
func (a *artifact) ConfigName() (v1.Hash, error)        { return a.layer.Digest() }
func (a *artifact) ConfigFile() (*v1.ConfigFile, error) { return &v1.ConfigFile{}, nil }
func (a *artifact) Digest() (v1.Hash, error)            { return partial.Digest(a) }
func (a *artifact) Size() (int64, error)                { return int64(len(a.manifest)), nil }
func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	if d, _ := a.layer.Digest(); d == h {
		return a.layer, nil
	}
	return nil, fmt.Errorf("artifact has no blob %s", h)
}

// tarDir writes the files under dir to a tar archive at path, in lexical
// order, owned by root, with mtime t: the same layout always gives the
// same archive.
func tarDir(path, dir string, t time.Time) error {
	var files []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			files = append(files, p)
		}
		return nil
	}); err != nil {
		return err
	}
	sort.Strings(files)
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	defer f.Close()
	tw := tar.NewWriter(f)
	for _, p := range files {
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		h := &tar.Header{Name: filepath.ToSlash(rel), ModTime: t, Format: tar.FormatPAX, Mode: 0o644}
		if fi.IsDir() {
			h.Typeflag, h.Name, h.Mode = tar.TypeDir, h.Name+"/", 0o755
		} else {
			h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !fi.IsDir() {
			src, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, src)
			src.Close()
			if err != nil {
				return err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
