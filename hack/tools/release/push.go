package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
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
		return fmt.Errorf("no image archives given (bin/release/images/<minor>/*.oci.tar: run make release)")
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
// layout (the SBOMs, whose subject is one of the index's images, and the
// signature and provenance bundles, whose subject is the index) by digest
// to the same repository. An OCI 1.1 registry lists them
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
	dir, remove, err := unpack(archive)
	if err != nil {
		return nil, err
	}
	defer remove()
	l, err := readLayout(dir)
	if err != nil {
		return nil, err
	}
	opts = append(opts, remote.WithContext(ctx))
	repo, err := name.NewRepository(strings.TrimSuffix(registry, "/")+"/"+path.Base(l.Tag.RepositoryStr()), nameOpts...)
	if err != nil {
		return nil, err
	}
	tag := repo.Tag(l.Tag.TagStr())
	if err := remote.WriteIndex(tag, l.Index, opts...); err != nil {
		return nil, err
	}
	pushed := []string{fmt.Sprintf("%s@%s (%s)", repo, l.IndexDigest, tag)}
	for _, r := range l.Refs {
		if err := remote.Write(repo.Digest(r.Desc.Digest.String()), r.Image, opts...); err != nil {
			return nil, err
		}
		pushed = append(pushed, fmt.Sprintf("%s@%s (%s of %s)", repo, r.Desc.Digest, r.Manifest.Config.MediaType, r.Manifest.Subject.Digest))
	}
	return pushed, nil
}
