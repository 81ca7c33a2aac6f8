// Command images writes Headroom's container images without a container
// engine: for each static binary given, an image of that one binary on an
// empty base, as a docker-archive tarball (the `docker save` layout:
// manifest.json naming the config, the layers and the image's tag). That is
// the layout `docker load`, `kind load image-archive` and `ctr images
// import` all read (kind runs `ctr images import` on its nodes).
//
//	go run ./hack/images -out bin/images -version V -revision SHA bin/headroom-scheduler ...
//
// hack/build.sh images runs it with the version every binary reports.
//
//	go run ./hack/images index -out bin/release/images -version V ... BINARIES
//
// writes the release's multi-platform images instead (index.go), as OCI
// image layouts with an SBOM per platform; hack/release.sh runs it.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// User is the UID and GID the images run as: not root, and the "nonroot"
// user of distroless images, which PodSecurity's restricted profile and
// most cluster policies accept.
const User = "65532:65532"

// NodeAgentUser is the node agent's own UID and GID, as its DaemonSet sets
// them: it runs in the host's PID namespace, where a process can read
// /proc/<pid>/environ of every process of its UID, so it shares its UID
// with no other image.
const NodeAgentUser = "9809:9809"

// UserOf is the user the image of the binary named base runs as.
func UserOf(base string) string {
	if base == "headroom-node-agent" {
		return NodeAgentUser
	}
	return User
}

// Options describe the images to write.
type Options struct {
	// Registry is prefixed to each binary's name: Registry/NAME:Version.
	Registry string
	// Version is the image tag and the OCI version label.
	Version string
	// Revision is the commit, Source the repository: OCI labels.
	Revision, Source string
	// Created is the images' creation time and their files' mtime, so that
	// one commit always gives the same image digests.
	Created time.Time
	// Arch is the binaries' GOARCH.
	Arch string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "index" {
		if err := indexMain(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "images index:", err)
			os.Exit(1)
		}
		return
	}
	var o Options
	var out, created string
	flag.StringVar(&out, "out", "bin/images", "directory the NAME.tar files are written to")
	flag.StringVar(&o.Registry, "registry", "ghcr.io/headroom-k8s", "registry and path of the image names")
	flag.StringVar(&o.Version, "version", "", "image tag and org.opencontainers.image.version (required)")
	flag.StringVar(&o.Revision, "revision", "unknown", "org.opencontainers.image.revision: the commit")
	flag.StringVar(&o.Source, "source", "https://github.com/headroom-k8s/headroom", "org.opencontainers.image.source")
	flag.StringVar(&created, "created", "1970-01-01T00:00:00Z", "RFC 3339 creation time of the images")
	flag.StringVar(&o.Arch, "arch", runtime.GOARCH, "GOARCH the binaries were built for")
	flag.Parse()
	if err := run(o, out, created, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func run(o Options, out, created string, binaries []string) error {
	if o.Version == "" {
		return fmt.Errorf("-version is required")
	}
	if len(binaries) == 0 {
		return fmt.Errorf("no binaries given")
	}
	t, err := time.Parse(time.RFC3339, created)
	if err != nil {
		return fmt.Errorf("-created: %w", err)
	}
	o.Created = t.UTC()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, bin := range binaries {
		path := filepath.Join(out, filepath.Base(bin)+".tar")
		tag, err := WriteImage(path, bin, o)
		if err != nil {
			return fmt.Errorf("%s: %w", bin, err)
		}
		fmt.Printf("%s: %s\n", path, tag)
	}
	return nil
}

// WriteImage writes the image of the binary at bin to path and returns its
// tag.
func WriteImage(path, bin string, o Options) (name.Tag, error) {
	base := filepath.Base(bin)
	tag, err := name.NewTag(fmt.Sprintf("%s/%s:%s", o.Registry, base, o.Version), name.StrictValidation)
	if err != nil {
		return name.Tag{}, err
	}
	img, err := Image(bin, o)
	if err != nil {
		return name.Tag{}, err
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return name.Tag{}, err
	}
	return tag, nil
}

// Image builds the image of one binary: a single layer holding it as /NAME,
// on no base, with /NAME as entrypoint.
func Image(bin string, o Options) (v1.Image, error) {
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	base := filepath.Base(bin)
	layerTar, err := singleFileTar(base, data, o.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		History:   v1.History{Created: v1.Time{Time: o.Created}, CreatedBy: "hack/images: COPY " + base + " /" + base},
		MediaType: types.OCILayer,
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS = "linux"
	cf.Architecture = o.Arch
	cf.Created = v1.Time{Time: o.Created}
	cf.Config.Entrypoint = []string{"/" + base}
	cf.Config.User = UserOf(base)
	cf.Config.WorkingDir = "/"
	cf.Config.Labels = map[string]string{
		"org.opencontainers.image.title":    base,
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Revision,
		"org.opencontainers.image.source":   o.Source,
		"org.opencontainers.image.created":  o.Created.Format(time.RFC3339),
		"org.opencontainers.image.licenses": "Apache-2.0",
	}
	return mutate.ConfigFile(img, cf)
}

// singleFileTar is a tar stream of one executable file owned by root
// (readable and executable by the image's non-root user, not writable).
func singleFileTar(name string, data []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Mode:     0o755,
		Size:     int64(len(data)),
		ModTime:  mtime,
		Format:   tar.FormatPAX,
	}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(data); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
