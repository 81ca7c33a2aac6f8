package main

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"
)

// root is the repository's root, from this module's directory.
const root = "../../.."

// spdx is the part of an SPDX 2.3 document the test reads.
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

// TestReleasePushPull runs `make release` (hack/release.sh) for the node
// agent's image on linux/amd64 and linux/arm64 and the chart, then `make
// push` to an OCI registry served on loopback in this process
// (go-containerregistry's registry, with the OCI 1.1 referrers API), and
// pulls everything back: the image index by the digest the release wrote,
// both platforms' images with their labels and a static binary of the
// platform's architecture, each image's SPDX SBOM through the referrers
// API, matching the pulled binary's own build information; and `helm
// template` of the chart from its oci:// reference.
//
// make test's cold cost: the image of this machine's platform holds
// bin/headroom-node-agent as make build built it (hack/release.sh builds it
// with the same flags); the other platform's holds a stand-in, a
// standard-library program cross-compiled here. Cross-compiling the node
// agent itself took 12m51s of CPU (user+sys) with a cold cache on the
// 2-core CI machine, several times this test's budget; make release
// compiles every image for both platforms (docs/release.md, "Cost").
func TestReleasePushPull(t *testing.T) {
	helm, err := filepath.Abs(filepath.Join(root, "bin", "helm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(helm); err != nil {
		t.Fatalf("%v: run make tools", err)
	}
	srv := httptest.NewServer(registry.New(registry.WithReferrersSupport(true), registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	reg := strings.TrimPrefix(srv.URL, "http://") + "/headroom"

	agent, err := filepath.Abs(filepath.Join(root, "bin", "headroom-node-agent"))
	if err != nil {
		t.Fatal(err)
	}
	versionOut, err := exec.Command(agent, "--version").Output()
	if err != nil {
		t.Fatalf("bin/headroom-node-agent --version: %v (run make build)", err)
	}
	version := strings.TrimPrefix(strings.TrimSpace(string(versionOut)), "Kubernetes ")
	native, other := runtime.GOARCH, map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	if runtime.GOOS != "linux" || other == "" {
		t.Skipf("the release images are linux/amd64 and linux/arm64; bin/ holds %s/%s binaries", runtime.GOOS, runtime.GOARCH)
	}
	prebuilt := t.TempDir()
	copyFile(t, agent, filepath.Join(mkdir(t, prebuilt, "linux_"+native), "headroom-node-agent"), 0o755)
	start := time.Now()
	buildStandIn(t, filepath.Join(mkdir(t, prebuilt, "linux_"+other), "headroom-node-agent"), other, version)
	t.Logf("stand-in for linux/%s: %s", other, time.Since(start).Round(time.Second))

	out := t.TempDir()
	env := append(os.Environ(),
		"RELEASE_DIR="+out,
		"RELEASE_IMAGES=headroom-node-agent",
		"RELEASE_KUBECTL_PLATFORMS=",
		"RELEASE_PREBUILT="+prebuilt,
		"HELM_CONFIG_HOME="+t.TempDir(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir(),
		// No credentials of the user's are read or written.
		"DOCKER_CONFIG="+t.TempDir(),
	)
	start = time.Now()
	runIn(t, env, filepath.Join(root, "hack", "release.sh"))
	t.Logf("hack/release.sh (node agent, linux/amd64 and linux/arm64, chart): %s", time.Since(start).Round(time.Second))

	if err := VerifyChecksums(out); err != nil {
		t.Fatalf("SHA256SUMS: %v", err)
	}
	archive := filepath.Join(out, "images", "headroom-node-agent.oci.tar")
	charts, _ := filepath.Glob(filepath.Join(out, "headroom-*.tgz"))
	if len(charts) != 1 {
		t.Fatalf("charts %v, want one headroom-VERSION.tgz", charts)
	}
	chartVersion := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(charts[0]), "headroom-"), ".tgz")
	tag, want := archivedIndex(t, archive)
	if tag.TagStr() != version {
		t.Errorf("release tags %s, bin/headroom-node-agent reports %s", tag.TagStr(), version)
	}

	// make push without a registry says what it needs and pushes nothing.
	cmd := exec.Command("make", "-C", root, "push", "REGISTRY=")
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(b), "REGISTRY=HOST[:PORT]/PATH") {
		t.Errorf("make push without REGISTRY: %v\n%s", err, b)
	}

	start = time.Now()
	runIn(t, env, "make", "-C", root, "--no-print-directory", "push", "REGISTRY="+reg)
	t.Logf("make push: %s", time.Since(start).Round(time.Second))

	repo, err := name.NewRepository(reg + "/headroom-node-agent")
	if err != nil {
		t.Fatal(err)
	}
	got, err := remote.Head(repo.Tag(tag.TagStr()))
	if err != nil {
		t.Fatalf("tag %s: %v", tag.TagStr(), err)
	}
	if got.Digest != want {
		t.Fatalf("%s:%s is %s, the release's index is %s", repo, tag.TagStr(), got.Digest, want)
	}
	idx, err := remote.Index(repo.Digest(want.String()))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := idx.Digest(); err != nil || d != want {
		t.Fatalf("pulled index digest %v (%v), want %s", d, err, want)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if v := im.Annotations["org.opencontainers.image.version"]; v != tag.TagStr() {
		t.Errorf("index annotation version %q, want %q", v, tag.TagStr())
	}
	var platforms []string
	for _, d := range im.Manifests {
		if d.Platform == nil {
			t.Fatalf("index entry %s has no platform", d.Digest)
		}
		platforms = append(platforms, d.Platform.String())
		t.Run(d.Platform.String(), func(t *testing.T) {
			bin := checkPlatformImage(t, repo, d, tag.TagStr())
			if d.Platform.Architecture == native && !sameFile(t, bin, agent) {
				t.Errorf("the %s image's binary is not bin/headroom-node-agent", native)
			}
		})
	}
	slices.Sort(platforms)
	if !slices.Equal(platforms, []string{"linux/amd64", "linux/arm64"}) {
		t.Errorf("index platforms %v, want linux/amd64 and linux/arm64", platforms)
	}

	// The chart from the registry renders the node agent's DaemonSet with
	// the release's image, kept off nodes of other architectures.
	start = time.Now()
	cmd = exec.Command(helm, "template", "headroom", "oci://"+reg+"/headroom", "--version", chartVersion,
		"--plain-http", "--namespace", "headroom-system")
	cmd.Env = env
	rendered, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template oci://%s/headroom: %v\n%s", reg, err, stderrOf(err))
	}
	t.Logf("helm template from oci://: %s", time.Since(start).Round(time.Second))
	checkDaemonSet(t, rendered, "ghcr.io/headroom-k8s/headroom-node-agent:"+tag.TagStr())
}

// checkPlatformImage pulls one platform's image by digest and checks its
// config, labels and binary, and its SBOM through the referrers API.
func checkPlatformImage(t *testing.T, repo name.Repository, d v1.Descriptor, version string) string {
	img, err := remote.Image(repo.Digest(d.Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != d.Platform.Architecture {
		t.Errorf("config %s/%s, index says %s", cf.OS, cf.Architecture, d.Platform)
	}
	labels := cf.Config.Labels
	if labels["org.opencontainers.image.version"] != version {
		t.Errorf("version label %q, want %q", labels["org.opencontainers.image.version"], version)
	}
	if rev := labels["org.opencontainers.image.revision"]; len(rev) != 40 {
		t.Errorf("revision label %q, want a commit", rev)
	}
	if labels["org.opencontainers.image.source"] != "https://github.com/headroom-k8s/headroom" {
		t.Errorf("source label %q", labels["org.opencontainers.image.source"])
	}
	if _, err := time.Parse(time.RFC3339, labels["org.opencontainers.image.created"]); err != nil {
		t.Errorf("created label: %v", err)
	}
	if got := strings.Join(cf.Config.Entrypoint, " "); got != "/headroom-node-agent" {
		t.Errorf("entrypoint %q", got)
	}

	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("layers %d (%v), want 1", len(layers), err)
	}
	bin := extractOnly(t, layers[0], "headroom-node-agent")
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("not an ELF binary: %v", err)
	}
	wantMachine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[d.Platform.Architecture]
	if f.Machine != wantMachine {
		t.Errorf("binary is for %s, the image for %s", f.Machine, d.Platform.Architecture)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("binary is dynamically linked: it cannot run on an empty base")
		}
	}
	f.Close()
	if d.Platform.Architecture == runtime.GOARCH {
		out, err := exec.Command(bin, "--version").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "Kubernetes "+version {
			t.Errorf("--version: %q (%v), want Kubernetes %s", out, err, version)
		}
	}

	// The SBOM, found as a registry client finds it: the referrers of the
	// image's digest, by artifact type.
	refs, err := remote.Referrers(repo.Digest(d.Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	rm, err := refs.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	var sboms []v1.Descriptor
	for _, r := range rm.Manifests {
		if r.ArtifactType == "application/spdx+json" {
			sboms = append(sboms, r)
		}
	}
	if len(sboms) != 1 {
		t.Fatalf("referrers %+v, want one application/spdx+json", rm.Manifests)
	}
	art, err := remote.Image(repo.Digest(sboms[0].Digest.String()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := art.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.Subject == nil || m.Subject.Digest != d.Digest {
		t.Errorf("SBOM subject %+v, want %s", m.Subject, d.Digest)
	}
	al, err := art.Layers()
	if err != nil || len(al) != 1 {
		t.Fatalf("SBOM layers %d (%v), want 1", len(al), err)
	}
	if mt, _ := al[0].MediaType(); mt != "application/spdx+json" {
		t.Errorf("SBOM layer media type %s", mt)
	}
	rc, err := al[0].Compressed()
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	checkSBOM(t, data, bin)
	return bin
}

// checkSBOM holds the SPDX document to the binary: its checksum, and a
// package, with its version, for the Go toolchain and every module the
// binary's own build information lists.
func checkSBOM(t *testing.T, data []byte, bin string) {
	t.Helper()
	var doc spdx
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("SBOM is not JSON: %v", err)
	}
	if doc.SPDXVersion != "SPDX-2.3" {
		t.Errorf("spdxVersion %q", doc.SPDXVersion)
	}
	content, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(content))
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	versions := map[string]string{}
	purls := map[string]bool{}
	binaryFound := false
	for _, p := range doc.Packages {
		versions[p.Name] = p.VersionInfo
		for _, r := range p.ExternalRefs {
			if r.ReferenceType == "purl" {
				purls[r.ReferenceLocator] = true
			}
		}
		if p.SPDXID == "SPDXRef-Binary" {
			binaryFound = true
			if len(p.Checksums) != 1 || p.Checksums[0].ChecksumValue != sum {
				t.Errorf("SBOM's binary checksums %+v, the binary's sha256 is %s", p.Checksums, sum)
			}
		}
	}
	if !binaryFound {
		t.Error("SBOM describes no binary")
	}
	if versions["stdlib"] != bi.GoVersion {
		t.Errorf("SBOM's stdlib %q, binary built with %s", versions["stdlib"], bi.GoVersion)
	}
	for _, dep := range bi.Deps {
		m := *dep
		if m.Replace != nil {
			m = *m.Replace
		}
		if versions[m.Path] != m.Version {
			t.Errorf("SBOM lists %s at %q, the binary holds %s", m.Path, versions[m.Path], m.Version)
		}
		if !purls["pkg:golang/"+m.Path+"@"+m.Version] {
			t.Errorf("SBOM has no purl pkg:golang/%s@%s", m.Path, m.Version)
		}
	}
	if versions[bi.Main.Path] != bi.Main.Version {
		t.Errorf("SBOM lists the main module %s at %q, the binary %s", bi.Main.Path, versions[bi.Main.Path], bi.Main.Version)
	}
	// The node agent's, not the stand-in's: the SBOM of a real binary.
	if bi.Path == "github.com/headroom-k8s/headroom/cmd/node-agent" && (len(bi.Deps) < 50 || versions["k8s.io/client-go"] == "") {
		t.Errorf("the node agent's SBOM lists %d modules, client-go at %q", len(bi.Deps), versions["k8s.io/client-go"])
	}
	described := 0
	for _, r := range doc.Relationships {
		if r.Element == "SPDXRef-DOCUMENT" && r.Type == "DESCRIBES" && r.Related == "SPDXRef-Binary" {
			described++
		}
	}
	if described != 1 {
		t.Errorf("%d DESCRIBES relationships of the binary, want 1", described)
	}
}

// checkDaemonSet finds the node agent's DaemonSet in rendered manifests and
// checks its image and that it requires a node architecture the image has.
func checkDaemonSet(t *testing.T, rendered []byte, image string) {
	t.Helper()
	for _, doc := range strings.Split(string(rendered), "\n---") {
		var ds struct {
			Kind     string
			Metadata struct{ Name string }
			Spec     struct {
				Template struct {
					Spec struct {
						Containers []struct{ Image string }
						Affinity   struct {
							NodeAffinity struct {
								Required struct {
									NodeSelectorTerms []struct {
										MatchExpressions []struct {
											Key      string
											Operator string
											Values   []string
										}
									}
								} `json:"requiredDuringSchedulingIgnoredDuringExecution"`
							}
						}
					}
				}
			}
		}
		if err := yaml.Unmarshal([]byte(doc), &ds); err != nil || ds.Kind != "DaemonSet" || ds.Metadata.Name != "headroom-node-agent" {
			continue
		}
		if len(ds.Spec.Template.Spec.Containers) != 1 || ds.Spec.Template.Spec.Containers[0].Image != image {
			t.Errorf("DaemonSet containers %+v, want image %s", ds.Spec.Template.Spec.Containers, image)
		}
		terms := ds.Spec.Template.Spec.Affinity.NodeAffinity.Required.NodeSelectorTerms
		for _, term := range terms {
			archs := false
			for _, e := range term.MatchExpressions {
				if e.Key == "kubernetes.io/arch" && e.Operator == "In" {
					archs = true
					if v := slices.Sorted(slices.Values(e.Values)); !slices.Equal(v, []string{"amd64", "arm64"}) {
						t.Errorf("DaemonSet requires kubernetes.io/arch in %v, want the image's amd64 and arm64", e.Values)
					}
				}
			}
			if !archs {
				t.Errorf("a node selector term of the DaemonSet %+v does not require kubernetes.io/arch: it may place the agent on a node its image has no binary for", term)
			}
		}
		if len(terms) == 0 {
			t.Error("the DaemonSet has no required node affinity on kubernetes.io/arch")
		}
		return
	}
	t.Fatalf("no DaemonSet headroom-node-agent rendered:\n%s", rendered)
}

// archivedIndex reads the OCI layout archive: the image's tag and its
// index's digest.
func archivedIndex(t *testing.T, archive string) (name.Tag, v1.Hash) {
	t.Helper()
	dir := t.TempDir()
	if err := untar(archive, dir); err != nil {
		t.Fatal(err)
	}
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range im.Manifests {
		if n := d.Annotations[imageNameAnnotation]; n != "" {
			tag, err := name.NewTag(n)
			if err != nil {
				t.Fatal(err)
			}
			if tag.RepositoryStr() != "headroom-k8s/headroom-node-agent" || tag.RegistryStr() != "ghcr.io" {
				t.Errorf("archive names %s", tag)
			}
			return tag, d.Digest
		}
	}
	t.Fatalf("%s: index.json names no image", archive)
	return name.Tag{}, v1.Hash{}
}

// extractOnly writes the layer's only entry, which must be the executable
// NAME, to a temporary file and returns its path.
func extractOnly(t *testing.T, l v1.Layer, name string) string {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	path := ""
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != name || h.Typeflag != tar.TypeReg || h.Mode&0o111 == 0 {
			t.Fatalf("layer entry %q (mode %o), want only the executable %s", h.Name, h.Mode, name)
		}
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, tr); err != nil {
			t.Fatal(err)
		}
		path = filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, buf.Bytes(), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if path == "" {
		t.Fatalf("layer holds no %s", name)
	}
	return path
}

// buildStandIn cross-compiles, for linux/arch, a standard-library program
// that prints "Kubernetes VERSION" for --version, as the node agent does.
func buildStandIn(t *testing.T, out, arch, version string) {
	t.Helper()
	src := t.TempDir()
	for name, data := range map[string]string{
		"go.mod": "module headroom.test/standin\n\ngo 1.26\n",
		"main.go": `package main

import (
	"fmt"
	"os"
)

var version = "unset"

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println("Kubernetes " + version)
	}
}
`,
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch, "GOFLAGS=", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("stand-in for linux/%s: %v\n%s", arch, err, b)
	}
}

func mkdir(t *testing.T, parts ...string) string {
	t.Helper()
	p := filepath.Join(parts...)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(x, y)
}

// runIn runs the command with env, failing the test with its output.
func runIn(t *testing.T, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return string(ee.Stderr)
	}
	return ""
}
