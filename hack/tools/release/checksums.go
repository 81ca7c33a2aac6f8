package main

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ChecksumsFile is the name of the checksums file in the release directory.
const ChecksumsFile = "SHA256SUMS"

func checksumsMain(args []string) error {
	if len(args) != 1 {
		return fmt.Errorf("want one directory, got %q", args)
	}
	n, err := WriteChecksums(args[0])
	if err != nil {
		return err
	}
	fmt.Printf("%s: %d files\n", filepath.Join(args[0], ChecksumsFile), n)
	return nil
}

// WriteChecksums writes dir/SHA256SUMS: the SHA-256 of every regular file
// under dir but itself, as `sha256sum` prints them (hex, two spaces, the
// path relative to dir with forward slashes), sorted by path, so that
// `cd dir && sha256sum -c SHA256SUMS` checks them. It returns the count.
func WriteChecksums(dir string) (int, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.Type().IsRegular() && rel != ChecksumsFile {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 0, fmt.Errorf("%s holds no files", dir)
	}
	sort.Strings(files)
	var b strings.Builder
	for _, rel := range files {
		sum, err := sha256File(filepath.Join(dir, filepath.FromSlash(rel)))
		if err != nil {
			return 0, err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, rel)
	}
	return len(files), os.WriteFile(filepath.Join(dir, ChecksumsFile), []byte(b.String()), 0o644)
}

// VerifyChecksums checks dir/SHA256SUMS as `sha256sum -c` does, and that it
// lists every file under dir: a file added after it was written is as
// wrong as a changed one. It reports every such file, joined.
func VerifyChecksums(dir string) error {
	f, err := os.Open(filepath.Join(dir, ChecksumsFile))
	if err != nil {
		return err
	}
	defer f.Close()
	var errs []error
	listed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, rel, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != 64 {
			errs = append(errs, fmt.Errorf("%s: malformed line %q", ChecksumsFile, sc.Text()))
			continue
		}
		listed[rel] = true
		got, err := sha256File(filepath.Join(dir, filepath.FromSlash(rel)))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			errs = append(errs, fmt.Errorf("%s: missing, %s lists it", rel, ChecksumsFile))
		case err != nil:
			errs = append(errs, err)
		case got != sum:
			errs = append(errs, fmt.Errorf("%s: sha256 %s, %s says %s", rel, got, ChecksumsFile, sum))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel != ChecksumsFile && !listed[rel] {
			errs = append(errs, fmt.Errorf("%s is not in %s", rel, ChecksumsFile))
		}
		return nil
	})
	return errors.Join(append(errs, err)...)
}

// sha256File is the hex SHA-256 of the file at path.
func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", h.Sum(nil)), nil
}
