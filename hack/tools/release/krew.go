package main

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// KrewPlugin is krew's plugin manifest (krew.googlecontainertools.github.com/v1alpha2,
// kind Plugin), the fields a plugin of krew-index sets.
type KrewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec KrewPluginSpec `json:"spec"`
}

type KrewPluginSpec struct {
	Version          string         `json:"version"`
	Homepage         string         `json:"homepage"`
	ShortDescription string         `json:"shortDescription"`
	Description      string         `json:"description"`
	Caveats          string         `json:"caveats,omitempty"`
	Platforms        []KrewPlatform `json:"platforms"`
}

type KrewPlatform struct {
	Selector struct {
		MatchLabels map[string]string `json:"matchLabels"`
	} `json:"selector"`
	URI    string     `json:"uri"`
	SHA256 string     `json:"sha256"`
	Bin    string     `json:"bin"`
	Files  []KrewFile `json:"files"`
}

type KrewFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// PluginOptions describe the kubectl plugin's release.
type PluginOptions struct {
	// Version is the release; the manifest's spec.version and part of
	// each archive's name.
	Version string
	// DownloadURL is where the archives are published: each platform's
	// uri is DownloadURL/ARCHIVE.
	DownloadURL string
	// Extra files put beside the binary in every archive (LICENSE, the
	// completion script).
	Extra []string
	// Created is every archived file's mtime: one commit, one archive.
	Created time.Time
}

func kubectlPluginMain(args []string) error {
	fl := flag.NewFlagSet("release kubectl-plugin", flag.ContinueOnError)
	var o PluginOptions
	var out, created, extra string
	fl.StringVar(&out, "out", "bin/release", "release directory: archives in kubectl-headroom/, the manifest in plugins/headroom.yaml")
	fl.StringVar(&o.Version, "version", "", "release version (required)")
	fl.StringVar(&o.DownloadURL, "download-url", "", "where the archives are published (default: the GitHub release of -version)")
	fl.StringVar(&extra, "extra", "", "comma-separated files put beside the binary in each archive")
	fl.StringVar(&created, "created", "1970-01-01T00:00:00Z", "RFC 3339 mtime of the archived files")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if o.Version == "" {
		return fmt.Errorf("-version is required")
	}
	if o.DownloadURL == "" {
		o.DownloadURL = "https://github.com/headroom-k8s/headroom/releases/download/" + o.Version
	}
	if extra != "" {
		o.Extra = strings.Split(extra, ",")
	}
	t, err := time.Parse(time.RFC3339, created)
	if err != nil {
		return fmt.Errorf("-created: %w", err)
	}
	o.Created = t.UTC()
	manifest, err := WriteKubectlPlugin(out, fl.Args(), o)
	if err != nil {
		return err
	}
	fmt.Println(manifest)
	return nil
}

// WriteKubectlPlugin writes one krew archive per kubectl-headroom binary
// given (out/kubectl-headroom/kubectl-headroom_VERSION_OS_ARCH.tar.gz, .zip
// on windows, holding the binary and o.Extra at the top) and the krew
// manifest out/plugins/headroom.yaml naming each with its sha256. It
// returns the manifest's path.
func WriteKubectlPlugin(out string, binaries []string, o PluginOptions) (string, error) {
	if len(binaries) == 0 {
		return "", fmt.Errorf("no kubectl-headroom binaries given")
	}
	dir := filepath.Join(out, "kubectl-headroom")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	p := KrewPlugin{APIVersion: "krew.googlecontainertools.github.com/v1alpha2", Kind: "Plugin"}
	p.Metadata.Name = "headroom"
	p.Spec = KrewPluginSpec{
		Version:          o.Version,
		Homepage:         "https://github.com/headroom-k8s/headroom",
		ShortDescription: "Show nodes' PID, pod-IP and OOM headroom",
		Description: "kubectl headroom shows each node's PID, pod-IP and memory headroom as the\n" +
			"headroom-node-agent reports it and the Headroom scheduler plugins judge it\n" +
			"(nodes, explain node), plans the descheduler's evictions (evictions) and\n" +
			"explains a node's OOM-kill risk (explain-oom), with the running scheduler's\n" +
			"and descheduler's configuration read from the cluster.\n",
		Caveats: "Completion of `kubectl headroom` (kubectl 1.26 and later) needs\n" +
			"kubectl_complete-headroom on PATH; krew links only kubectl-headroom.\n" +
			"The script is in krew's store:\n" +
			"  ln -s ~/.krew/store/headroom/" + o.Version + "/kubectl_complete-headroom ~/.krew/bin/\n",
	}
	seen := map[string]string{}
	for _, bin := range binaries {
		goos, goarch, err := binaryPlatform(bin)
		if err != nil {
			return "", err
		}
		key := goos + "/" + goarch
		if other, ok := seen[key]; ok {
			return "", fmt.Errorf("%s and %s are both %s", other, bin, key)
		}
		seen[key] = bin
		archive, exe := krewArchive(o.Version, goos, goarch)
		if base := filepath.Base(bin); base != exe {
			return "", fmt.Errorf("%s: a %s binary must be named %s", bin, goos, exe)
		}
		path := filepath.Join(dir, archive)
		files := append([]string{bin}, o.Extra...)
		if goos == "windows" {
			err = writeZip(path, files, o.Created)
		} else {
			err = writeTarGz(path, files, o.Created)
		}
		if err != nil {
			return "", fmt.Errorf("%s: %w", archive, err)
		}
		sum, err := sha256File(path)
		if err != nil {
			return "", err
		}
		var pl KrewPlatform
		pl.Selector.MatchLabels = map[string]string{"os": goos, "arch": goarch}
		pl.URI = strings.TrimSuffix(o.DownloadURL, "/") + "/" + archive
		pl.SHA256 = sum
		pl.Bin = exe
		pl.Files = []KrewFile{{From: exe, To: "."}}
		for _, e := range o.Extra {
			pl.Files = append(pl.Files, KrewFile{From: filepath.Base(e), To: "."})
		}
		p.Spec.Platforms = append(p.Spec.Platforms, pl)
	}
	data, err := yaml.Marshal(p)
	if err != nil {
		return "", err
	}
	manifest := filepath.Join(out, "plugins", "headroom.yaml")
	if err := os.MkdirAll(filepath.Dir(manifest), 0o755); err != nil {
		return "", err
	}
	return manifest, os.WriteFile(manifest, data, 0o644)
}

// krewArchive is the name of kubectl-headroom's krew archive of version
// for goos/goarch (a zip on windows, else a gzipped tar) and the name of
// the executable in it.
func krewArchive(version, goos, goarch string) (archive, exe string) {
	exe, ext := "kubectl-headroom", ".tar.gz"
	if goos == "windows" {
		exe, ext = exe+".exe", ".zip"
	}
	return fmt.Sprintf("kubectl-headroom_%s_%s_%s%s", version, goos, goarch, ext), exe
}

// binaryPlatform is the GOOS and GOARCH the Go binary at bin was built for.
func binaryPlatform(bin string) (goos, goarch string, err error) {
	f, err := os.Open(bin)
	if err != nil {
		return "", "", err
	}
	defer f.Close()
	goos, goarch, err = goPlatform(f)
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", bin, err)
	}
	return goos, goarch, nil
}

// goPlatform is the GOOS and GOARCH of a Go binary, read from the build
// information the Go toolchain embeds.
func goPlatform(r io.ReaderAt) (goos, goarch string, err error) {
	bi, err := buildinfo.Read(r)
	if err != nil {
		return "", "", fmt.Errorf("no Go build information: %w", err)
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "GOOS":
			goos = s.Value
		case "GOARCH":
			goarch = s.Value
		}
	}
	if goos == "" || goarch == "" {
		return "", "", errors.New("build information names no GOOS/GOARCH")
	}
	return goos, goarch, nil
}

// archived is a file as it goes into an archive: its base name, mode
// (0755 for executables) and content.
func archived(path string) (name string, mode int64, data []byte, err error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", 0, nil, err
	}
	data, err = os.ReadFile(path)
	if err != nil {
		return "", 0, nil, err
	}
	mode = 0o644
	if fi.Mode()&0o111 != 0 {
		mode = 0o755
	}
	return filepath.Base(path), mode, data, nil
}

// writeTarGz writes files, at the archive's top, to a gzipped tar at path,
// owned by root and dated t.
func writeTarGz(path string, files []string, t time.Time) error {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(zw)
	for _, f := range files {
		name, mode, data, err := archived(f)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: t, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// writeZip writes files, at the archive's top, to a zip at path, dated t.
func writeZip(path string, files []string, t time.Time) error {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range files {
		name, mode, data, err := archived(f)
		if err != nil {
			return err
		}
		h := &zip.FileHeader{Name: name, Method: zip.Deflate, Modified: t}
		h.SetMode(os.FileMode(mode))
		w, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		if _, err := io.Copy(w, bytes.NewReader(data)); err != nil {
			return err
		}
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// archivedFile is a file read back from a krew archive.
type archivedFile struct {
	mode  int64
	mtime time.Time
	data  []byte
}

// readKrewArchive reads the files of a krew archive (.zip, else a gzipped
// tar), by their names in it.
func readKrewArchive(path string) (map[string]*archivedFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	files := map[string]*archivedFile{}
	add := func(name string, f *archivedFile) error {
		if files[name] != nil {
			return fmt.Errorf("%s is in the archive twice", name)
		}
		files[name] = f
		return nil
	}
	if strings.HasSuffix(path, ".zip") {
		zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
		if err != nil {
			return nil, err
		}
		for _, zf := range zr.File {
			rc, err := zf.Open()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", zf.Name, err)
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", zf.Name, err)
			}
			if err := add(zf.Name, &archivedFile{mode: int64(zf.Mode().Perm()), mtime: zf.Modified.UTC(), data: b}); err != nil {
				return nil, err
			}
		}
		return files, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, nil
		}
		if err != nil {
			return nil, err
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", h.Name, err)
		}
		if err := add(h.Name, &archivedFile{mode: h.Mode, mtime: h.ModTime.UTC(), data: b}); err != nil {
			return nil, err
		}
	}
}
