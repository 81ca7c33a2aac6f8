package main

import (
	"bytes"
	"debug/buildinfo"
	"errors"
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
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"sigs.k8s.io/yaml"
)

// root is the repository's root, from this module's directory.
const root = "../../.."

// TestReleasePushPull runs `make release` (hack/release.sh, which ends
// with release verify) for the node agent's image on linux/amd64 and
// linux/arm64 and the chart, checks the release as release verify does,
// then runs `make push` to an OCI registry served on loopback in this
// process (go-containerregistry's registry, with the OCI 1.1 referrers
// API), and pulls everything back: the image index by the digest the
// release wrote, held by CheckIndex to what verify holds the archive to
// (both platforms' images with their labels and a static binary of the
// platform's architecture, each image's SPDX SBOM through the referrers
// API, matching the pulled binary's own build information); the native
// image's binary is bin/headroom-node-agent and runs; and `helm template`
// of the chart from its oci:// reference.
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
	// bin/ holds the default minor's build: its release alone.
	minor, _, err := ParseMinorTag(version)
	if err != nil {
		t.Fatalf("bin/headroom-node-agent --version: %v", err)
	}
	prebuilt := t.TempDir()
	copyFile(t, agent, filepath.Join(mkdir(t, prebuilt, minor, "linux_"+native), "headroom-node-agent"), 0o755)
	start := time.Now()
	buildStandIn(t, filepath.Join(mkdir(t, prebuilt, minor, "linux_"+other), "headroom-node-agent"), other, version)
	t.Logf("stand-in for linux/%s: %s", other, time.Since(start).Round(time.Second))

	out := t.TempDir()
	env := append(os.Environ(),
		"RELEASE_DIR="+out,
		"RELEASE_IMAGES=headroom-node-agent",
		"RELEASE_KUBECTL_PLATFORMS=",
		"RELEASE_MINORS="+minor,
		"RELEASE_PREBUILT="+prebuilt,
		"HELM_CONFIG_HOME="+t.TempDir(), "HELM_CACHE_HOME="+t.TempDir(), "HELM_DATA_HOME="+t.TempDir(),
		// No credentials of the user's are read or written.
		"DOCKER_CONFIG="+t.TempDir(),
	)
	start = time.Now()
	runIn(t, env, filepath.Join(root, "hack", "release.sh"))
	t.Logf("hack/release.sh (node agent, linux/amd64 and linux/arm64, chart): %s", time.Since(start).Round(time.Second))

	// hack/release.sh ran release verify; the test reads what it found.
	rel, err := Verify(out, DefaultPlatforms, []string{minor}, nil)
	if err != nil {
		t.Fatalf("release verify %s:\n%v", out, err)
	}
	if want := "images/" + minor + "/headroom-node-agent.oci.tar"; len(rel.Images) != 1 || rel.Images[0].File != want {
		t.Fatalf("release images %+v, want %s", rel.Images, want)
	}
	tag, want := rel.Images[0].Tag, rel.Images[0].Index
	charts, _ := filepath.Glob(filepath.Join(out, "headroom-*.tgz"))
	if len(charts) != 1 {
		t.Fatalf("charts %v, want one headroom-VERSION.tgz", charts)
	}
	chartVersion := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(charts[0]), "headroom-"), ".tgz")
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
	// The pulled index and images, each platform's SBOM found through the
	// registry's referrers API, are held to what release verify holds the
	// archive to.
	pulled, err := CheckIndex(registrySource{repo}, idx, "headroom-node-agent", tag.TagStr(), DefaultPlatforms)
	if err != nil {
		t.Errorf("pulled from %s:\n%v", repo, err)
	}
	// The signature and provenance came along, found through the same
	// referrers API, signed by the release's key.
	pub, err := os.ReadFile(filepath.Join(out, PublicKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	rv, err := NewReleaseVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckIndexSignatures(registrySource{repo}, want, rv); err != nil {
		t.Errorf("pulled from %s: signatures:\n%v", repo, err)
	}
	cosignVerify(t, out, repo.Digest(want.String()), charts[0])
	agentBinary, err := os.ReadFile(agent)
	if err != nil {
		t.Fatal(err)
	}
	// The image of this machine's platform holds bin/headroom-node-agent,
	// which runs; its SBOM is a real binary's.
	pi := pulled["linux/"+native]
	if !bytes.Equal(pi.Binary, agentBinary) {
		t.Fatalf("the linux/%s image's binary is not bin/headroom-node-agent", native)
	}
	bin := filepath.Join(t.TempDir(), "headroom-node-agent")
	if err := os.WriteFile(bin, pi.Binary, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "--version").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "Kubernetes "+version {
		t.Errorf("--version: %q (%v), want Kubernetes %s", out, err, version)
	}
	doc, err := parseSPDX(pi.SBOM)
	if err != nil {
		t.Fatalf("SBOM: %v", err)
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if versions := doc.versions(); len(bi.Deps) < 50 || versions["k8s.io/client-go"] == "" {
		t.Errorf("the node agent's SBOM lists %d modules, client-go at %q", len(bi.Deps), versions["k8s.io/client-go"])
	}

	// The chart from the registry renders the node agent's DaemonSet, on a
	// cluster of the release's minor, with the release's image, kept off
	// nodes of other architectures.
	start = time.Now()
	kubeVersion, _, _ := strings.Cut(tag.TagStr(), "-headroom.")
	cmd = exec.Command(helm, "template", "headroom", "oci://"+reg+"/headroom", "--version", chartVersion,
		"--plain-http", "--namespace", "headroom-system", "--kube-version", kubeVersion)
	cmd.Env = env
	rendered, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm template oci://%s/headroom: %v\n%s", reg, err, stderrOf(err))
	}
	t.Logf("helm template from oci://: %s", time.Since(start).Round(time.Second))
	checkDaemonSet(t, rendered, "ghcr.io/headroom-k8s/headroom-node-agent:"+tag.TagStr())
}

// cosignVerify checks the release with cosign itself, where one is given
// (COSIGN, or cosign on PATH; docs/release.md, "Signatures"), as a user
// would: the pushed image index's signature and provenance (cosign verify,
// cosign verify-attestation), and the chart's (verify-blob,
// verify-blob-attestation), with the release's key and no transparency log.
func cosignVerify(t *testing.T, release string, image name.Digest, chart string) {
	t.Helper()
	cosign := os.Getenv("COSIGN")
	if cosign == "" {
		var err error
		if cosign, err = exec.LookPath("cosign"); err != nil {
			t.Log("no cosign (COSIGN, or on PATH): the release is not checked with cosign itself")
			return
		}
	}
	key := filepath.Join(release, PublicKeyFile)
	for _, args := range [][]string{
		{"verify", "--key", key, "--insecure-ignore-tlog", image.String()},
		{"verify-attestation", "--key", key, "--insecure-ignore-tlog", "--type", "slsaprovenance1", image.String()},
		{"verify-blob", "--key", key, "--insecure-ignore-tlog", "--bundle", chart + BundleSuffix, chart},
		{"verify-blob-attestation", "--key", key, "--insecure-ignore-tlog", "--type", "slsaprovenance1", "--bundle", filepath.Join(release, ProvenanceFile), chart},
	} {
		cmd := exec.Command(cosign, args...)
		cmd.Env = append(os.Environ(), "DOCKER_CONFIG="+t.TempDir(), "TUF_ROOT="+t.TempDir())
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("cosign %s: %v\n%s", strings.Join(args, " "), err, out)
		} else {
			t.Logf("cosign %s: ok", args[0])
		}
	}
	// A chart with one byte more fails cosign's check of its signature.
	data, err := os.ReadFile(chart)
	if err != nil {
		t.Fatal(err)
	}
	tampered := filepath.Join(t.TempDir(), filepath.Base(chart))
	if err := os.WriteFile(tampered, append(data, 0), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cosign, "verify-blob", "--key", key, "--insecure-ignore-tlog", "--bundle", chart+BundleSuffix, tampered)
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("cosign verify-blob passed a tampered chart:\n%s", out)
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

// registrySource reads a pushed image's manifests from its repository, and
// their referrers through the registry's referrers API.
type registrySource struct{ repo name.Repository }

func (r registrySource) Image(h v1.Hash) (v1.Image, error) {
	return remote.Image(r.repo.Digest(h.String()))
}

func (r registrySource) Referrers(h v1.Hash) ([]v1.Descriptor, error) {
	idx, err := remote.Referrers(r.repo.Digest(h.String()))
	if err != nil {
		return nil, err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	return im.Manifests, nil
}
