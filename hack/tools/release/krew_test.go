package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestKubectlPlugin writes the krew archive of a Go binary (this test's
// own, as kubectl-headroom) and its manifest, then reads them back as krew
// does: release verify's checks (VerifyKubectlPlugin: the manifest's sha256
// is the archive's, the platform is the binary's, and the archive holds bin
// and every file the manifest copies), the uri, the files' content and
// dates.
func TestKubectlPlugin(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubectl-headroom")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	copyFile(t, self, bin, 0o755)
	license := filepath.Join(dir, "LICENSE")
	if err := os.WriteFile(license, []byte("Apache License\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "release")
	created := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	o := PluginOptions{Version: "v1.36.3-headroom.0.1.0", DownloadURL: "https://example.com/dl/", Extra: []string{license}, Created: created}
	manifest, err := WriteKubectlPlugin(out, []string{bin}, o)
	if err != nil {
		t.Fatal(err)
	}
	// What release verify checks: the manifest's sha256 is the archive's,
	// which holds the binary of the platform it is listed for and every
	// file the manifest copies.
	plugin, err := VerifyKubectlPlugin(out)
	if err != nil {
		t.Fatalf("release verify: %v", err)
	}
	data, err := os.ReadFile(manifest)
	if err != nil {
		t.Fatal(err)
	}
	var p KrewPlugin
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		t.Fatalf("manifest: %v\n%s", err, data)
	}
	if p.Spec.Version != o.Version {
		t.Errorf("spec.version %s, want %s", p.Spec.Version, o.Version)
	}
	if len(p.Spec.Platforms) != 1 {
		t.Fatalf("platforms %+v, want one", p.Spec.Platforms)
	}
	pl := p.Spec.Platforms[0]
	if pl.Selector.MatchLabels["os"] != runtime.GOOS || pl.Selector.MatchLabels["arch"] != runtime.GOARCH {
		t.Errorf("selector %v, binary is %s/%s", pl.Selector.MatchLabels, runtime.GOOS, runtime.GOARCH)
	}
	archive := "kubectl-headroom_" + o.Version + "_" + runtime.GOOS + "_" + runtime.GOARCH + ".tar.gz"
	if len(plugin) != 1 || plugin[0] != "kubectl-headroom/"+archive {
		t.Errorf("archives %v, want kubectl-headroom/%s", plugin, archive)
	}
	if pl.URI != "https://example.com/dl/"+archive {
		t.Errorf("uri %s", pl.URI)
	}
	path := filepath.Join(out, "kubectl-headroom", archive)
	sum, err := sha256File(path)
	if err != nil {
		t.Fatal(err)
	}
	files, err := readKrewArchive(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files["kubectl-headroom"] == nil {
		t.Errorf("archive holds %v, want kubectl-headroom and LICENSE", files)
	}
	if string(files["LICENSE"].data) != "Apache License\n" {
		t.Errorf("LICENSE in the archive: %q", files["LICENSE"].data)
	}
	for name, f := range files {
		if !f.mtime.Equal(created) {
			t.Errorf("%s dated %s, want %s", name, f.mtime, created)
		}
	}

	// The same inputs give the same archive, byte for byte.
	if _, err := WriteKubectlPlugin(out, []string{bin}, o); err != nil {
		t.Fatal(err)
	}
	if again, _ := sha256File(path); again != sum {
		t.Error("a second run wrote a different archive")
	}

	// Wrong inputs are refused with the reason.
	for _, tc := range []struct {
		name     string
		binaries []string
		want     string
	}{
		{"none", nil, "no kubectl-headroom binaries"},
		{"same platform twice", []string{bin, bin}, "are both"},
		{"not a Go binary", []string{license}, "no Go build information"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := WriteKubectlPlugin(t.TempDir(), tc.binaries, o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	wrong := filepath.Join(dir, "kubectl-other")
	copyFile(t, self, wrong, 0o755)
	if _, err := WriteKubectlPlugin(t.TempDir(), []string{wrong}, o); err == nil || !strings.Contains(err.Error(), "must be named") {
		t.Errorf("binary named kubectl-other: %v", err)
	}
}

// TestKrewZip: a windows archive, a zip, reads back as it was written:
// names, the executable bit, dates and content (release verify reads the
// windows archives so).
func TestKrewZip(t *testing.T) {
	dir := t.TempDir()
	exe, license := filepath.Join(dir, "kubectl-headroom.exe"), filepath.Join(dir, "LICENSE")
	if err := os.WriteFile(exe, []byte("MZ"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(license, []byte("Apache License\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	zip := filepath.Join(dir, "a.zip")
	if err := writeZip(zip, []string{exe, license}, created); err != nil {
		t.Fatal(err)
	}
	files, err := readKrewArchive(zip)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 || files["kubectl-headroom.exe"] == nil || files["LICENSE"] == nil {
		t.Fatalf("zip holds %v", files)
	}
	if f := files["kubectl-headroom.exe"]; f.mode != 0o755 || string(f.data) != "MZ" {
		t.Errorf("kubectl-headroom.exe: mode %o, %q", f.mode, f.data)
	}
	if f := files["LICENSE"]; f.mode != 0o644 || string(f.data) != "Apache License\n" {
		t.Errorf("LICENSE: mode %o, %q", f.mode, f.data)
	}
	for name, f := range files {
		if !f.mtime.Equal(created) {
			t.Errorf("%s dated %s, want %s", name, f.mtime, created)
		}
	}
}

// TestChecksums: SHA256SUMS lists every file, and verification fails for
// a changed file and for a file it does not list.
func TestChecksums(t *testing.T) {
	dir := t.TempDir()
	for name, data := range map[string]string{"a.tgz": "a", "images/b.oci.tar": "b", "plugins/headroom.yaml": "c"} {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n, err := WriteChecksums(dir)
	if err != nil || n != 3 {
		t.Fatalf("WriteChecksums: %d files, %v", n, err)
	}
	sums, _ := os.ReadFile(filepath.Join(dir, ChecksumsFile))
	// sha256sum's format: hex, two spaces, the path; sorted.
	want := "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb  a.tgz\n"
	if !strings.HasPrefix(string(sums), want) || !strings.Contains(string(sums), "  images/b.oci.tar\n") {
		t.Errorf("SHA256SUMS:\n%s", sums)
	}
	if err := VerifyChecksums(dir); err != nil {
		t.Fatalf("fresh checksums: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "a.tgz"), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := VerifyChecksums(dir); err == nil || !strings.Contains(err.Error(), "a.tgz") {
		t.Errorf("changed file: %v", err)
	}
	if _, err := WriteChecksums(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "extra"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := VerifyChecksums(dir); err == nil || !strings.Contains(err.Error(), "extra is not in") {
		t.Errorf("unlisted file: %v", err)
	}
	if _, err := WriteChecksums(t.TempDir()); err == nil {
		t.Error("checksums of an empty directory: no error")
	}
}

func TestParseRegistry(t *testing.T) {
	for reg, want := range map[string]string{
		"":                         "no registry",
		"https://ghcr.io/headroom": "without a scheme",
		"headroom":                 "not a registry host",
		"ghcr.io/Headroom":         "repository",
		"ghcr.io/headroom-k8s":     "",
		"127.0.0.1:5000/headroom":  "",
		"localhost:5000/headroom":  "",
		"localhost/headroom":       "not a registry host",
	} {
		_, err := ParseRegistry(reg)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("ParseRegistry(%q): %v, want %q", reg, err, want)
		}
	}
}

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		t.Fatal(err)
	}
}
