package main

import (
	"archive/tar"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Annotations hack/images index puts on the image's entry in index.json:
// containerd's full image name, and the OCI layout's tag.
const (
	imageNameAnnotation = "io.containerd.image.name"
	refNameAnnotation   = "org.opencontainers.image.ref.name"
)

func pushMain(args []string) error {
	fl := flag.NewFlagSet("release push", flag.ContinueOnError)
	var registry string
	var plainHTTP bool
	fl.StringVar(&registry, "registry", "", "HOST[:PORT]/PATH the images are pushed under, as REGISTRY/NAME:TAG (required)")
	fl.BoolVar(&plainHTTP, "plain-http", false, "speak plain HTTP to the registry (go-containerregistry does for a loopback or private address anyway)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if len(fl.Args()) == 0 {
		return fmt.Errorf("no image archives given (bin/release/images/*.oci.tar: run make release)")
	}
	for _, archive := range fl.Args() {
		pushed, err := PushArchive(context.Background(), registry, archive, plainHTTP, remote.WithAuthFromKeychain(authn.DefaultKeychain))
		if err != nil {
			return fmt.Errorf("%s: %w", archive, err)
		}
		for _, p := range pushed {
			fmt.Println(p)
		}
	}
	return nil
}

// ParseRegistry checks REGISTRY (host[:port]/path) as make push takes it.
func ParseRegistry(registry string) (name.Repository, error) {
	if registry == "" {
		return name.Repository{}, errors.New("no registry: make push REGISTRY=HOST[:PORT]/PATH, e.g. REGISTRY=ghcr.io/headroom-k8s")
	}
	if strings.Contains(registry, "://") {
		return name.Repository{}, fmt.Errorf("registry %q: give HOST[:PORT]/PATH, without a scheme", registry)
	}
	// A repository under it, so that name checks host, port and path
	// together; its first component must be a host (a dot or a port), else
	// it would read as a Docker Hub path.
	host, _, _ := strings.Cut(registry, "/")
	if !strings.ContainsAny(host, ".:") {
		return name.Repository{}, fmt.Errorf("registry %q: %q is not a registry host (HOST[:PORT]/PATH, e.g. ghcr.io/headroom-k8s or 127.0.0.1:5000/headroom)", registry, host)
	}
	return name.NewRepository(strings.TrimSuffix(registry, "/")+"/x", name.StrictValidation)
}

// PushArchive pushes the OCI layout archive of hack/images index: the image
// index named in its index.json as REGISTRY/NAME:TAG (NAME the last
// component of the name it carries), then every other manifest of the
// layout (the SBOMs, whose subject is one of the index's images) by
// digest to the same repository. An OCI 1.1 registry lists the SBOMs
// through its referrers API; for an older one go-containerregistry updates
// the referrers tag (sha256-DIGEST) instead. It returns what it pushed,
// one line each.
func PushArchive(ctx context.Context, registry, archive string, plainHTTP bool, opts ...remote.Option) ([]string, error) {
	nameOpts := []name.Option{name.StrictValidation}
	if plainHTTP {
		nameOpts = append(nameOpts, name.Insecure)
	}
	if _, err := ParseRegistry(registry); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "oci-layout-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	if err := untar(archive, dir); err != nil {
		return nil, err
	}
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("not an OCI image layout: %w", err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, err
	}
	opts = append(opts, remote.WithContext(ctx))
	var repo name.Repository
	var tag name.Tag
	var index v1.Hash
	found := 0
	for _, d := range im.Manifests {
		full := d.Annotations[imageNameAnnotation]
		if full == "" {
			continue
		}
		found++
		src, err := name.NewTag(full, name.StrictValidation)
		if err != nil {
			return nil, fmt.Errorf("index.json names %q: %w", full, err)
		}
		if ref := d.Annotations[refNameAnnotation]; ref != src.TagStr() {
			return nil, fmt.Errorf("index.json names %s with tag %q", full, ref)
		}
		if !d.MediaType.IsIndex() {
			return nil, fmt.Errorf("%s is a %s, not an image index", full, d.MediaType)
		}
		repo, err = name.NewRepository(strings.TrimSuffix(registry, "/")+"/"+path.Base(src.RepositoryStr()), nameOpts...)
		if err != nil {
			return nil, err
		}
		tag = repo.Tag(src.TagStr())
		index = d.Digest
	}
	if found != 1 {
		return nil, fmt.Errorf("index.json names %d images, want one", found)
	}
	idx, err := ii.ImageIndex(index)
	if err != nil {
		return nil, err
	}
	if err := remote.WriteIndex(tag, idx, opts...); err != nil {
		return nil, err
	}
	pushed := []string{fmt.Sprintf("%s@%s (%s)", repo, index, tag)}
	for _, d := range im.Manifests {
		if d.Digest == index {
			continue
		}
		if !d.MediaType.IsImage() {
			return nil, fmt.Errorf("index.json: unexpected %s %s", d.MediaType, d.Digest)
		}
		img, err := ii.Image(d.Digest)
		if err != nil {
			return nil, err
		}
		m, err := img.Manifest()
		if err != nil {
			return nil, err
		}
		if m.Subject == nil {
			return nil, fmt.Errorf("index.json: manifest %s refers to no image", d.Digest)
		}
		if err := remote.Write(repo.Digest(d.Digest.String()), img, opts...); err != nil {
			return nil, err
		}
		pushed = append(pushed, fmt.Sprintf("%s@%s (%s of %s)", repo, d.Digest, m.Config.MediaType, m.Subject.Digest))
	}
	return pushed, nil
}

// untar extracts the regular files and directories of the tar at archive
// into dir, refusing any path that would leave it.
func untar(archive, dir string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %w", archive, err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, filepath.Clean(dir)+string(filepath.Separator)) {
			return fmt.Errorf("%s: entry %q leaves the archive", archive, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: entry %q is not a file or directory", archive, h.Name)
		}
	}
}
