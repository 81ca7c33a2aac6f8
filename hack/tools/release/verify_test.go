package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestVerify writes a small release of stand-ins as make release writes
// it, with the same tools (hack/images index for the node agent's image
// on linux/amd64 and linux/arm64, WriteKubectlPlugin for krew archives of
// the same two platforms, WriteChecksums), checks that release verify
// passes it, then breaks copies of it one way at a time and checks that
// verify names the file and what is wrong.
func TestVerify(t *testing.T) {
	const version = "v1.36.3-headroom.0.0.0-verify"
	bins := t.TempDir()
	var images, plugins []string
	for _, arch := range []string{"amd64", "arm64"} {
		bin := filepath.Join(mkdir(t, bins, "linux_"+arch), "headroom-node-agent")
		buildStandIn(t, bin, arch, version)
		images = append(images, bin)
		plugin := filepath.Join(mkdir(t, bins, "plugin_"+arch), "kubectl-headroom")
		copyFile(t, bin, plugin, 0o755)
		plugins = append(plugins, plugin)
	}
	release := t.TempDir()
	start := time.Now()
	// Two minors' images, as make release writes each shipped minor's.
	for minor, tag := range map[string]string{"1.35": "v1.35.4-headroom.0.0.0-verify", "1.36": version} {
		cmd := exec.Command("go", append([]string{"run", "./hack/images", "index", "-out", filepath.Join(release, "images", minor),
			"-version", tag, "-revision", strings.Repeat("5e", 20), "-created", "2026-12-01T00:00:00Z"}, images...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hack/images index: %v\n%s", err, out)
		}
	}
	t.Logf("hack/images index: %s", time.Since(start).Round(time.Second))
	license := filepath.Join(bins, "LICENSE")
	if err := os.WriteFile(license, []byte("Apache License\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := PluginOptions{Version: version, DownloadURL: "https://example.com/dl", Extra: []string{license}, Created: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	if _, err := WriteKubectlPlugin(release, plugins, o); err != nil {
		t.Fatal(err)
	}
	// A chart stand-in: verify holds it to its signature only.
	chart := "headroom-0.0.0.tgz"
	if err := os.WriteFile(filepath.Join(release, chart), []byte("a chart\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	signed, err := SignRelease(release, newKeySigner(t, nil), ProvenanceOptions{Version: version, Revision: strings.Repeat("5e", 20), Builder: DefaultBuilderID, Started: start})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("signed in %s:\n%s", time.Since(start).Round(time.Millisecond), strings.Join(signed, "\n"))
	if _, err := WriteChecksums(release); err != nil {
		t.Fatal(err)
	}

	rel, err := Verify(release, DefaultPlatforms, []string{"1.35", "1.36"}, nil)
	if err != nil {
		t.Fatalf("a fresh release:\n%v", err)
	}
	if len(rel.Images) != 2 || rel.Images[1].File != "images/1.36/headroom-node-agent.oci.tar" ||
		rel.Images[1].Tag.String() != "ghcr.io/headroom-k8s/headroom-node-agent:"+version ||
		rel.Images[0].Tag.String() != "ghcr.io/headroom-k8s/headroom-node-agent:v1.35.4-headroom.0.0.0-verify" ||
		!slices.Equal(rel.Images[1].Platforms, DefaultPlatforms) {
		t.Errorf("images %+v", rel.Images)
	}
	if len(rel.Plugin) != 2 {
		t.Errorf("krew archives %v, want two", rel.Plugin)
	}

	sum := func(arch string) string {
		s, err := sha256File(images[slices.Index([]string{"amd64", "arm64"}, arch)])
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	amd64Archive := "kubectl-headroom/kubectl-headroom_" + version + "_linux_amd64.tar.gz"
	arm64Archive := "kubectl-headroom/kubectl-headroom_" + version + "_linux_arm64.tar.gz"
	for _, tc := range []struct {
		name      string
		platforms []string
		minors    []string // nil: 1.35 and 1.36
		// breakIt changes the release in dir; then SHA256SUMS is written
		// again unless keepSums.
		breakIt  func(t *testing.T, dir string)
		keepSums bool
		want     []string
	}{{
		name:      "a platform missing",
		platforms: []string{"linux/amd64", "linux/arm64", "linux/s390x"},
		want:      []string{"images/1.36/headroom-node-agent.oci.tar: image index: no linux/s390x image"},
	}, {
		name:   "a minor missing",
		minors: []string{"1.35", "1.36", "1.37"},
		want:   []string{"images/ holds the minors [1.35 1.36], want [1.35 1.36 1.37]"},
	}, {
		// 1.36's image, signed and summed, in 1.35's place.
		name: "another minor's image",
		breakIt: func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(dir, "images", "1.36", "headroom-node-agent.oci.tar"), filepath.Join(dir, "images", "1.35", "headroom-node-agent.oci.tar"), 0o644)
		},
		want: []string{"images/1.35/headroom-node-agent.oci.tar: tagged " + version + ", an image built for Kubernetes 1.36, in the directory of 1.35"},
	}, {
		name: "an image outside the minors' directories",
		breakIt: func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(dir, "images", "1.36", "headroom-node-agent.oci.tar"), filepath.Join(dir, "images", "headroom-node-agent.oci.tar"), 0o644)
		},
		want: []string{"images/headroom-node-agent.oci.tar: not in a minor's directory, images/*/*.oci.tar"},
	}, {
		name:      "a platform too many",
		platforms: []string{"linux/amd64"},
		want:      []string{"images/1.36/headroom-node-agent.oci.tar: image index: a linux/arm64 image, not among the platforms wanted"},
	}, {
		// The SBOM's checksum of the amd64 binary changed in the archive,
		// SHA256SUMS left as it was: three problems, all reported.
		name: "a tampered SBOM",
		breakIt: func(t *testing.T, dir string) {
			replaceIn(t, filepath.Join(dir, "images", "1.36", "headroom-node-agent.oci.tar"), sum("amd64"), strings.Repeat("0", 64))
		},
		keepSums: true,
		want: []string{
			"images/1.36/headroom-node-agent.oci.tar: sha256 ",
			"images/1.36/headroom-node-agent.oci.tar: blobs/sha256/",
			"images/1.36/headroom-node-agent.oci.tar: image index: linux/amd64 image sha256:",
			"SBOM sha256:",
			"the binary's checksums [{Algorithm:SHA256 ChecksumValue:0000",
		},
	}, {
		name: "a krew sha256 changed",
		breakIt: func(t *testing.T, dir string) {
			s, err := sha256File(filepath.Join(dir, arm64Archive))
			if err != nil {
				t.Fatal(err)
			}
			replaceIn(t, filepath.Join(dir, "plugins", "headroom.yaml"), s, strings.Repeat("ab", 32))
		},
		want: []string{"plugins/headroom.yaml: linux/arm64's sha256 " + strings.Repeat("ab", 32) + ", " + arm64Archive + "'s is "},
	}, {
		// The amd64 archive in the arm64 one's place, its sha256 too.
		name: "a krew archive of the wrong platform",
		breakIt: func(t *testing.T, dir string) {
			a, b := filepath.Join(dir, amd64Archive), filepath.Join(dir, arm64Archive)
			old, _ := sha256File(b)
			copyFile(t, a, b, 0o644)
			sum, _ := sha256File(a)
			replaceIn(t, filepath.Join(dir, "plugins", "headroom.yaml"), old, sum)
		},
		want: []string{
			arm64Archive + ": kubectl-headroom is a linux/amd64 binary, plugins/headroom.yaml says linux/arm64",
			arm64Archive + ": signature " + arm64Archive + ".sigstore.json: ",
			arm64Archive + ": provenance provenance.sigstore.json: ",
			"plugins/headroom.yaml: provenance provenance.sigstore.json: ",
		},
	}, {
		// One byte of the chart changed, SHA256SUMS written again.
		name: "a tampered chart",
		breakIt: func(t *testing.T, dir string) {
			replaceIn(t, filepath.Join(dir, chart), "a chart", "a Chart")
		},
		want: []string{
			chart + ": signature " + chart + ".sigstore.json: ",
			chart + ": provenance provenance.sigstore.json: ",
		},
	}, {
		name: "a signature missing",
		breakIt: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, amd64Archive+BundleSuffix)); err != nil {
				t.Fatal(err)
			}
		},
		want: []string{amd64Archive + ": no signature: "},
	}, {
		// A key of someone else's in the release: no signature is its.
		name: "another public key",
		breakIt: func(t *testing.T, dir string) {
			other := t.TempDir()
			if err := os.WriteFile(filepath.Join(other, chart), []byte("a chart\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := SignRelease(other, newKeySigner(t, nil), ProvenanceOptions{Version: version, Revision: strings.Repeat("5e", 20), Builder: DefaultBuilderID}); err != nil {
				t.Fatal(err)
			}
			copyFile(t, filepath.Join(other, PublicKeyFile), filepath.Join(dir, PublicKeyFile), 0o644)
		},
		want: []string{
			chart + ": signature ",
			amd64Archive + ": signature ",
			"images/1.36/headroom-node-agent.oci.tar: image index sha256:",
			"no valid " + cosignSignPredicate + " bundle of sha256:",
			"no valid " + slsaProvenancePredicate + " bundle of sha256:",
		},
	}, {
		// The amd64 image's config changed (one more variable), and every
		// digest above it made to match: the blobs, index.json and
		// SHA256SUMS are consistent, only the signatures tell.
		name: "a tampered image, its digests made to match",
		breakIt: func(t *testing.T, dir string) {
			tamperImage(t, filepath.Join(dir, "images", "1.36", "headroom-node-agent.oci.tar"))
		},
		want: []string{
			"images/1.36/headroom-node-agent.oci.tar: image index sha256:",
			"no valid " + cosignSignPredicate + " bundle of sha256:",
			"no valid " + slsaProvenancePredicate + " bundle of sha256:",
		},
	}, {
		name: "a krew archive not in the manifest",
		breakIt: func(t *testing.T, dir string) {
			copyFile(t, filepath.Join(dir, amd64Archive), filepath.Join(dir, "kubectl-headroom", "kubectl-headroom_"+version+"_linux_386.tar.gz"), 0o644)
		},
		want: []string{"kubectl-headroom/kubectl-headroom_" + version + "_linux_386.tar.gz is not in plugins/headroom.yaml"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			copyTree(t, release, dir)
			if tc.breakIt != nil {
				tc.breakIt(t, dir)
			}
			if !tc.keepSums {
				if _, err := WriteChecksums(dir); err != nil {
					t.Fatal(err)
				}
			}
			platforms := tc.platforms
			if platforms == nil {
				platforms = DefaultPlatforms
			}
			minors := tc.minors
			if minors == nil {
				minors = []string{"1.35", "1.36"}
			}
			_, err := Verify(dir, platforms, minors, nil)
			if err == nil {
				t.Fatal("verify passed it")
			}
			t.Logf("verify:\n%v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("verify:\n%v\nwant a problem with %q", err, w)
				}
			}
		})
	}

	// An SBOM is held to the binary it describes: the amd64 stand-in's SBOM
	// against the arm64 stand-in (another checksum), and against this test's
	// binary (modules the SBOM does not list).
	dir := t.TempDir()
	if err := untar(filepath.Join(release, "images", "1.36", "headroom-node-agent.oci.tar"), dir); err != nil {
		t.Fatal(err)
	}
	l, err := readLayout(dir)
	if err != nil {
		t.Fatal(err)
	}
	read, err := CheckIndex(l, l.Index, "headroom-node-agent", version, DefaultPlatforms)
	if err != nil {
		t.Fatal(err)
	}
	sbom, arm64 := read["linux/amd64"].SBOM, read["linux/arm64"].Binary
	if err := CheckSBOM(sbom, read["linux/amd64"].Binary); err != nil {
		t.Errorf("the amd64 SBOM and binary: %v", err)
	}
	if err := CheckSBOM(sbom, arm64); err == nil || !strings.Contains(err.Error(), "its sha256 is "+sum("arm64")) {
		t.Errorf("the amd64 SBOM and the arm64 binary: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	selfBin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckSBOM(sbom, selfBin); err == nil || !strings.Contains(err.Error(), "has no purl pkg:golang/github.com/google/go-containerregistry@") {
		t.Errorf("the amd64 SBOM and this test's binary: %v", err)
	}
}

// replaceIn replaces every old in the file at path by new, which must be
// as long (an archive stays a valid tar), failing the test if there is
// none.
func replaceIn(t *testing.T, path, old, new string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(old) != len(new) || !bytes.Contains(data, []byte(old)) {
		t.Fatalf("%s: no %s to replace by %s", path, old, new)
	}
	if err := os.WriteFile(path, bytes.ReplaceAll(data, []byte(old), []byte(new)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyTree copies the files under src to dst.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		copyFile(t, p, filepath.Join(dst, rel), 0o644)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
