package main

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// Annotations hack/images index puts on the image's entry in index.json:
// containerd's full image name, and the OCI layout's tag.
const (
	imageNameAnnotation = "io.containerd.image.name"
	refNameAnnotation   = "org.opencontainers.image.ref.name"
)

// ociLayout is the OCI image layout of a release archive (hack/images
// index), as push and verify read it: the one image index its index.json
// names, and every other manifest of index.json, each of which must refer
// to an image (the SBOMs, whose subject is one of the index's images).
type ociLayout struct {
	// Tag is the name index.json gives the index (io.containerd.image.name).
	Tag name.Tag
	// IndexDigest is the digest of Index, the multi-platform image.
	IndexDigest v1.Hash
	Index       v1.ImageIndex
	// Refs are index.json's other manifests, in its order.
	Refs []referrer

	top v1.ImageIndex
}

// referrer is a manifest of the layout that refers to another: its entry in
// index.json, the image it reads as and its manifest.
type referrer struct {
	Desc     v1.Descriptor
	Image    v1.Image
	Manifest *v1.Manifest
}

// readLayout reads the OCI image layout in dir.
func readLayout(dir string) (*ociLayout, error) {
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("not an OCI image layout: %w", err)
	}
	im, err := top.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("index.json: %w", err)
	}
	l := &ociLayout{top: top}
	found := 0
	for _, d := range im.Manifests {
		full := d.Annotations[imageNameAnnotation]
		if full == "" {
			continue
		}
		found++
		tag, err := name.NewTag(full, name.StrictValidation)
		if err != nil {
			return nil, fmt.Errorf("index.json names %q: %w", full, err)
		}
		if ref := d.Annotations[refNameAnnotation]; ref != tag.TagStr() {
			return nil, fmt.Errorf("index.json names %s with tag %q", full, ref)
		}
		if !d.MediaType.IsIndex() {
			return nil, fmt.Errorf("index.json: %s is a %s, not an image index", full, d.MediaType)
		}
		l.Tag, l.IndexDigest = tag, d.Digest
	}
	if found != 1 {
		return nil, fmt.Errorf("index.json names %d images, want one", found)
	}
	if l.Index, err = top.ImageIndex(l.IndexDigest); err != nil {
		return nil, fmt.Errorf("image index %s: %w", l.IndexDigest, err)
	}
	for _, d := range im.Manifests {
		if d.Digest == l.IndexDigest {
			continue
		}
		if !d.MediaType.IsImage() {
			return nil, fmt.Errorf("index.json: unexpected %s %s", d.MediaType, d.Digest)
		}
		img, err := top.Image(d.Digest)
		if err != nil {
			return nil, fmt.Errorf("index.json: manifest %s: %w", d.Digest, err)
		}
		m, err := img.Manifest()
		if err != nil {
			return nil, fmt.Errorf("index.json: manifest %s: %w", d.Digest, err)
		}
		if m.Subject == nil {
			return nil, fmt.Errorf("index.json: manifest %s refers to no image", d.Digest)
		}
		l.Refs = append(l.Refs, referrer{Desc: d, Image: img, Manifest: m})
	}
	return l, nil
}

// Image is the manifest of digest h in the layout: one of the index's
// platform images, or a referrer. (An ImageSource.)
func (l *ociLayout) Image(h v1.Hash) (v1.Image, error) {
	if img, err := l.Index.Image(h); err == nil {
		return img, nil
	}
	return l.top.Image(h)
}

// Referrers are the entries of index.json whose manifest's subject is h,
// as a registry's referrers API lists them. (An ImageSource.)
func (l *ociLayout) Referrers(h v1.Hash) ([]v1.Descriptor, error) {
	var refs []v1.Descriptor
	for _, r := range l.Refs {
		if r.Manifest.Subject.Digest == h {
			refs = append(refs, r.Desc)
		}
	}
	return refs, nil
}

// unpack extracts the OCI layout archive into a new temporary directory;
// remove deletes it.
func unpack(archive string) (dir string, remove func(), err error) {
	dir, err = os.MkdirTemp("", "oci-layout-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	if err := untar(archive, dir); err != nil {
		remove()
		return "", nil, err
	}
	return dir, remove, nil
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

// firstModTime is the modification time of the archive's first entry: the
// time hack/images index gave every entry (the commit's).
func firstModTime(archive string) (time.Time, error) {
	f, err := os.Open(archive)
	if err != nil {
		return time.Time{}, err
	}
	defer f.Close()
	h, err := tar.NewReader(f).Next()
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", archive, err)
	}
	return h.ModTime, nil
}

// writeTar writes the OCI layout in dir to the tar archive at path as
// hack/images index does: entries sorted by name, every one with mtime t,
// so that the same layout gives the same archive.
func writeTar(dir, path string, t time.Time) error {
	var files []string
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != dir {
			files = append(files, p)
		}
		return err
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
