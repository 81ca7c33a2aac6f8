package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/yaml"
)

const root = "../.."

// images are the images `make images` writes: one per in-cluster binary
// whose cmd/ directory exists, the test workload headroom-stress among them.
func images(t *testing.T) []string {
	t.Helper()
	var names []string
	for cmd, image := range map[string]string{
		"scheduler":   "headroom-scheduler",
		"descheduler": "headroom-descheduler",
		"node-agent":  "headroom-node-agent",
		"stress":      "headroom-stress",
	} {
		if _, err := os.Stat(filepath.Join(root, "cmd", cmd)); err == nil {
			names = append(names, image)
		}
	}
	if len(names) < 2 {
		t.Fatalf("found images %v, want at least the scheduler's and the descheduler's", names)
	}
	return names
}

// TestImages opens each tarball of `make images` with go-containerregistry,
// checks what a container runtime reads from it (tag, config, entrypoint,
// user, labels), extracts the binary from the layer and runs it with
// --version: it must be static and report the image's tag.
func TestImages(t *testing.T) {
	for _, image := range images(t) {
		t.Run(image, func(t *testing.T) {
			path := filepath.Join(root, "bin", "images", image+".tar")
			if _, err := os.Stat(path); err != nil {
				t.Fatalf("%v: run make images first", err)
			}
			manifest, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
			if err != nil {
				t.Fatal(err)
			}
			if len(manifest) != 1 || len(manifest[0].RepoTags) != 1 {
				t.Fatalf("manifest.json: %+v, want one image with one tag", manifest)
			}
			tag, err := name.NewTag(manifest[0].RepoTags[0], name.StrictValidation)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := tag.Repository.String(), "ghcr.io/headroom-k8s/"+image; got != want {
				t.Errorf("repository %s, want %s", got, want)
			}
			checkDockerArchive(t, path)
			img, err := tarball.ImageFromPath(path, &tag)
			if err != nil {
				t.Fatal(err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(cf.Config.Entrypoint, " "); got != "/"+image {
				t.Errorf("entrypoint %q, want /%s", got, image)
			}
			want := User
			if image == "headroom-node-agent" {
				want = NodeAgentUser
			}
			if cf.Config.User != want || strings.HasPrefix(cf.Config.User, "0") {
				t.Errorf("user %q, want %s", cf.Config.User, want)
			}
			if cf.OS != "linux" {
				t.Errorf("os %q", cf.OS)
			}
			labels := cf.Config.Labels
			if labels["org.opencontainers.image.version"] != tag.TagStr() {
				t.Errorf("version label %q, tag %q", labels["org.opencontainers.image.version"], tag.TagStr())
			}
			if rev := labels["org.opencontainers.image.revision"]; len(rev) != 40 {
				t.Errorf("revision label %q, want a commit", rev)
			}
			if src := labels["org.opencontainers.image.source"]; src != "https://github.com/headroom-k8s/headroom" {
				t.Errorf("source label %q", src)
			}

			layers, err := img.Layers()
			if err != nil {
				t.Fatal(err)
			}
			if len(layers) != 1 {
				t.Fatalf("%d layers, want 1", len(layers))
			}
			bin := extract(t, layers[0].Uncompressed, image)
			if f, err := elf.Open(bin); err != nil {
				t.Errorf("binary is not ELF: %v", err)
			} else {
				for _, p := range f.Progs {
					if p.Type == elf.PT_INTERP {
						t.Errorf("binary is dynamically linked: it cannot run on an empty base")
					}
				}
				f.Close()
			}
			out, err := exec.Command(bin, "--version").CombinedOutput()
			if err != nil {
				t.Fatalf("%s --version: %v\n%s", image, err, out)
			}
			if got, want := strings.TrimSpace(string(out)), "Kubernetes "+tag.TagStr(); got != want {
				t.Errorf("%s --version prints %q, want %q (the image tag)", image, got, want)
			}
		})
	}
}

// extract writes the layer's only file, which must be NAME, to a temporary
// directory and returns its path.
func extract(t *testing.T, open func() (io.ReadCloser, error), name string) string {
	t.Helper()
	rc, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var path string
	for _, e := range readTar(t, rc) {
		h := e.header
		if h.Name != name || h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 || h.Uid != 0 {
			t.Fatalf("layer entry %q (type %c, mode %o, uid %d), want only the executable %s owned by root", h.Name, h.Typeflag, h.Mode, h.Uid, name)
		}
		path = filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, e.data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if path == "" {
		t.Fatalf("layer holds no %s", name)
	}
	return path
}

// tarEntry is one entry of a tar stream, read whole.
type tarEntry struct {
	header *tar.Header
	data   []byte
}

// readTar reads every entry of a tar stream.
func readTar(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, tarEntry{header: h, data: data})
	}
}

// TestManifestsUseTheImages checks that every kustomization that sets
// Headroom's image tags (manifests/kustomization.yaml, and the overlay
// manifests/descheduler-deployment applied in place of manifests/descheduler)
// points them at the tag the binaries report, the tag `make images` writes.
func TestManifestsUseTheImages(t *testing.T) {
	out, err := exec.Command(filepath.Join(root, "bin", "headroom-scheduler"), "--version").Output()
	if err != nil {
		t.Fatalf("bin/headroom-scheduler --version: %v (run make build)", err)
	}
	version := strings.TrimPrefix(strings.TrimSpace(string(out)), "Kubernetes ")
	for kustomization, images := range map[string][]string{
		"manifests/kustomization.yaml":                        {"headroom-scheduler", "headroom-descheduler", "headroom-node-agent"},
		"manifests/descheduler-deployment/kustomization.yaml": {"headroom-descheduler"},
	} {
		data, err := os.ReadFile(filepath.Join(root, kustomization))
		if err != nil {
			t.Fatal(err)
		}
		var k struct {
			Images []struct {
				Name    string `json:"name"`
				NewName string `json:"newName"`
				NewTag  string `json:"newTag"`
			} `json:"images"`
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			t.Fatalf("%s: %v", kustomization, err)
		}
		tags := map[string]string{}
		for _, img := range k.Images {
			if img.NewName != "" {
				t.Errorf("%s: image %s renamed to %s: the manifests must use the images make images writes", kustomization, img.Name, img.NewName)
			}
			tags[img.Name] = img.NewTag
		}
		for _, image := range images {
			if got := tags["ghcr.io/headroom-k8s/"+image]; got != version {
				t.Errorf("%s tags ghcr.io/headroom-k8s/%s %q, binaries report %q", kustomization, image, got, version)
			}
		}
	}
}

func TestRunErrors(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	good := Options{Registry: "ghcr.io/headroom-k8s", Version: "v1.36.3-headroom.0.1.0"}
	for _, tc := range []struct {
		name     string
		o        Options
		created  string
		binaries []string
		want     string
	}{
		{"no version", Options{Registry: good.Registry}, "2026-01-01T00:00:00Z", []string{bin}, "-version is required"},
		{"no binaries", good, "2026-01-01T00:00:00Z", nil, "no binaries"},
		{"bad time", good, "yesterday", []string{bin}, "-created"},
		{"missing binary", good, "2026-01-01T00:00:00Z", []string{bin + "-missing"}, "no such file"},
		// A tag cannot hold semver's build metadata.
		{"plus in tag", Options{Registry: good.Registry, Version: "v1.36.3+headroom.abc"}, "2026-01-01T00:00:00Z", []string{bin}, "tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.o, t.TempDir(), tc.created, tc.binaries)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// checkDockerArchive reads the tarball as `docker load` and `ctr images
// import` do, without the library that wrote it: manifest.json names a
// config file whose SHA-256 is its name (the image ID) and gzipped layers
// whose uncompressed SHA-256 are the config's rootfs.diff_ids, in order.
func checkDockerArchive(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	for _, e := range readTar(t, f) {
		files[e.header.Name] = e.data
	}
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 {
		t.Fatalf("manifest.json: %v, %d entries", err, len(manifest))
	}
	m := manifest[0]
	config, ok := files[m.Config]
	if !ok {
		t.Fatalf("config %s missing", m.Config)
	}
	if got := fmt.Sprintf("sha256:%x", sha256.Sum256(config)); got != m.Config && got != "sha256:"+strings.TrimSuffix(m.Config, ".json") {
		t.Errorf("config %s has digest %s", m.Config, got)
	}
	var cfg struct {
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(config, &cfg); err != nil {
		t.Fatal(err)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		t.Fatalf("%d layers, %d diff_ids", len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	for i, l := range m.Layers {
		zr, err := gzip.NewReader(bytes.NewReader(files[l]))
		if err != nil {
			t.Fatalf("layer %s: %v", l, err)
		}
		h := sha256.New()
		if _, err := io.Copy(h, zr); err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprintf("sha256:%x", h.Sum(nil)); got != cfg.RootFS.DiffIDs[i] {
			t.Errorf("layer %s: uncompressed digest %s, diff_id %s", l, got, cfg.RootFS.DiffIDs[i])
		}
	}
}

// TestIndex writes the release image of a Go binary (this test's own, as
// headroom-test) through `images index` and reads the OCI layout archive
// back: one image index whose entry has the binary's platform and the
// image's labels, and an SPDX SBOM whose subject is that image, listing the
// binary's modules; the same inputs give the same archive.
func TestIndex(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "headroom-test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	args := []string{"-out", out, "-version", "v1.36.3-headroom.0.1.0", "-revision", strings.Repeat("a", 40), "-created", "2026-12-01T00:00:00Z", bin}
	if err := indexMain(args); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(out, "headroom-test.oci.tar")
	first, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	if err := indexMain(args); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(archive); !bytes.Equal(first, again) {
		t.Error("a second run wrote a different archive")
	}

	dir := t.TempDir()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range readTar(t, f) {
		p := filepath.Join(dir, e.header.Name)
		if e.header.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, e.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 2 {
		t.Fatalf("index.json: %d entries, want the image index and one SBOM", len(im.Manifests))
	}
	top := im.Manifests[0]
	if got := top.Annotations[ImageNameAnnotation]; got != "ghcr.io/headroom-k8s/headroom-test:v1.36.3-headroom.0.1.0" {
		t.Errorf("image name %q", got)
	}
	if got := top.Annotations[RefNameAnnotation]; got != "v1.36.3-headroom.0.1.0" {
		t.Errorf("ref name %q", got)
	}
	idx, err := ii.ImageIndex(top.Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 || m.Manifests[0].Platform == nil || m.Manifests[0].Platform.String() != runtime.GOOS+"/"+runtime.GOARCH {
		t.Fatalf("index manifests %+v, want one of %s/%s", m.Manifests, runtime.GOOS, runtime.GOARCH)
	}
	if m.Annotations["org.opencontainers.image.revision"] != strings.Repeat("a", 40) {
		t.Errorf("index annotations %v", m.Annotations)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Architecture != runtime.GOARCH || cf.Config.Labels["org.opencontainers.image.created"] != "2026-12-01T00:00:00Z" {
		t.Errorf("config %s, labels %v", cf.Architecture, cf.Config.Labels)
	}

	sbom, err := ii.Image(im.Manifests[1].Digest)
	if err != nil {
		t.Fatal(err)
	}
	sm, err := sbom.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if sm.Subject == nil || sm.Subject.Digest != m.Manifests[0].Digest {
		t.Errorf("SBOM subject %+v, want the image %s", sm.Subject, m.Manifests[0].Digest)
	}
	if sm.Config.MediaType != SBOMMediaType || len(sm.Layers) != 1 || sm.Layers[0].MediaType != SBOMMediaType {
		t.Errorf("SBOM manifest %+v", sm)
	}
	layers, err := sbom.Layers()
	if err != nil {
		t.Fatal(err)
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	doc, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	var spdx struct {
		SPDXVersion string
		Packages    []struct{ Name, VersionInfo string }
	}
	if err := json.Unmarshal(doc, &spdx); err != nil {
		t.Fatal(err)
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{}
	for _, p := range spdx.Packages {
		versions[p.Name] = p.VersionInfo
	}
	if spdx.SPDXVersion != "SPDX-2.3" || versions["headroom-test"] != "v1.36.3-headroom.0.1.0" || versions["stdlib"] != bi.GoVersion {
		t.Errorf("SBOM %s, packages %v", spdx.SPDXVersion, versions)
	}
	for _, d := range bi.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		if versions[d.Path] != d.Version {
			t.Errorf("SBOM lists %s at %q, the binary holds %s", d.Path, versions[d.Path], d.Version)
		}
	}

	if err := indexMain([]string{"-out", out, "-version", "v1", filepath.Join(t.TempDir(), "missing")}); err == nil {
		t.Error("a missing binary: no error")
	}
	if err := indexMain([]string{"-out", out, "-version", "v1", bin, bin}); err == nil || !strings.Contains(err.Error(), "are both") {
		t.Errorf("one platform twice: %v", err)
	}
}
