package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"runtime/debug"
	"strings"
	"time"
	"unicode"
)

// SBOMMediaType is the media type of the SPDX documents the release images
// carry (the IANA registration of SPDX's JSON serialisation).
const SBOMMediaType = "application/spdx+json"

// SPDX 2.3, the subset written here. Field names are the specification's
// JSON serialisation (spdx.github.io/spdx-spec/v2.3).
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name                  string            `json:"name"`
	SPDXID                string            `json:"SPDXID"`
	VersionInfo           string            `json:"versionInfo,omitempty"`
	Supplier              string            `json:"supplier,omitempty"`
	DownloadLocation      string            `json:"downloadLocation"`
	FilesAnalyzed         bool              `json:"filesAnalyzed"`
	LicenseConcluded      string            `json:"licenseConcluded,omitempty"`
	LicenseDeclared       string            `json:"licenseDeclared,omitempty"`
	CopyrightText         string            `json:"copyrightText,omitempty"`
	PrimaryPackagePurpose string            `json:"primaryPackagePurpose,omitempty"`
	Checksums             []spdxChecksum    `json:"checksums,omitempty"`
	ExternalRefs          []spdxExternalRef `json:"externalRefs,omitempty"`
	Comment               string            `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// SBOM is the SPDX 2.3 document of the Go binary at bin: the binary itself,
// its main module, the Go standard library it was built with and every
// module linked into it, each with its version, its go.sum hash (as the
// SHA-256 SPDX records) and its package URL. All of it is read from the
// build information the Go toolchain embeds (debug/buildinfo, what `go
// version -m` prints), so the document lists what the binary holds, not
// what go.mod allows. version is the release the binary reports.
func SBOM(bin, image, version string, created time.Time) ([]byte, error) {
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		return nil, fmt.Errorf("%s: no Go build information: %w", bin, err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(data)
	goos, goarch := setting(bi, "GOOS"), setting(bi, "GOARCH")

	var build []string
	for _, s := range bi.Settings {
		switch s.Key {
		case "GOOS", "GOARCH", "CGO_ENABLED", "-tags", "-trimpath", "vcs.revision", "vcs.modified":
			build = append(build, s.Key+"="+s.Value)
		}
	}
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3",
		DataLicense: "CC0-1.0",
		SPDXID:      "SPDXRef-DOCUMENT",
		Name:        fmt.Sprintf("%s-%s-%s-%s", image, version, goos, goarch),
		DocumentNamespace: fmt.Sprintf("https://github.com/headroom-k8s/headroom/spdx/%s/%s/%s-%s/sha256-%x",
			image, version, goos, goarch, sum),
		CreationInfo: spdxCreationInfo{
			Created:  created.UTC().Format(time.RFC3339),
			Creators: []string{"Organization: Headroom", "Tool: headroom-hack-images"},
		},
	}
	binID := "SPDXRef-Binary"
	doc.Packages = append(doc.Packages, spdxPackage{
		Name:                  image,
		SPDXID:                binID,
		VersionInfo:           version,
		DownloadLocation:      "NOASSERTION",
		PrimaryPackagePurpose: "APPLICATION",
		Checksums:             []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: hex.EncodeToString(sum[:])}},
		Comment:               fmt.Sprintf("%s built from %s with %s (%s)", image, bi.Path, bi.GoVersion, strings.Join(build, " ")),
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", binID})

	mainID := "SPDXRef-Module-main"
	doc.Packages = append(doc.Packages, modulePackage(mainID, bi.Main, "https://github.com/headroom-k8s/headroom"))
	doc.Relationships = append(doc.Relationships, spdxRelationship{binID, "CONTAINS", mainID})

	goVersion := strings.TrimPrefix(bi.GoVersion, "go")
	stdID := "SPDXRef-Module-stdlib"
	doc.Packages = append(doc.Packages, spdxPackage{
		Name:             "stdlib",
		SPDXID:           stdID,
		VersionInfo:      bi.GoVersion,
		Supplier:         "Organization: Google LLC",
		DownloadLocation: "https://go.dev/dl/" + bi.GoVersion + ".src.tar.gz",
		LicenseDeclared:  "BSD-3-Clause",
		ExternalRefs:     []spdxExternalRef{purlRef("pkg:golang/stdlib@" + goVersion)},
	})
	doc.Relationships = append(doc.Relationships, spdxRelationship{binID, "CONTAINS", stdID})

	for i, dep := range bi.Deps {
		id := fmt.Sprintf("SPDXRef-Module-%d-%s", i, spdxIDChars.ReplaceAllString(dep.Path, "-"))
		doc.Packages = append(doc.Packages, modulePackage(id, *dep, ""))
		doc.Relationships = append(doc.Relationships, spdxRelationship{mainID, "DEPENDS_ON", id})
	}
	return json.MarshalIndent(doc, "", "  ")
}

// spdxIDChars are the characters an SPDX identifier may not hold.
var spdxIDChars = regexp.MustCompile(`[^a-zA-Z0-9.-]`)

// modulePackage is the SPDX package of one module of the build, the
// replacement where the build replaced it. location is its download
// location where it is not the module proxy's.
func modulePackage(id string, m debug.Module, location string) spdxPackage {
	comment := ""
	if m.Replace != nil {
		comment = fmt.Sprintf("%s %s replaced by %s %s", m.Path, m.Version, m.Replace.Path, m.Replace.Version)
		m = *m.Replace
	}
	p := spdxPackage{
		Name:             m.Path,
		SPDXID:           id,
		VersionInfo:      m.Version,
		DownloadLocation: location,
		Comment:          comment,
	}
	if p.DownloadLocation == "" {
		p.DownloadLocation = "NOASSERTION"
		if m.Version != "" && m.Version != "(devel)" && !strings.HasPrefix(m.Path, ".") {
			p.DownloadLocation = fmt.Sprintf("https://proxy.golang.org/%s/@v/%s.zip", proxyEscape(m.Path), proxyEscape(m.Version))
		}
	}
	// go.sum's h1: is the base64 SHA-256 of the module's file tree (the
	// dirhash the Go toolchain checks downloads against).
	if h, ok := strings.CutPrefix(m.Sum, "h1:"); ok {
		if raw, err := base64.StdEncoding.DecodeString(h); err == nil {
			p.Checksums = []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: hex.EncodeToString(raw)}}
		}
	}
	purl := "pkg:golang/" + m.Path
	if m.Version != "" && m.Version != "(devel)" {
		purl += "@" + m.Version
	}
	p.ExternalRefs = []spdxExternalRef{purlRef(purl)}
	return p
}

// proxyEscape is a module path or version as the module proxy protocol
// spells it: each upper-case letter as "!" and its lower case.
func proxyEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsUpper(r) {
			b.WriteByte('!')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

func purlRef(purl string) spdxExternalRef {
	return spdxExternalRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: purl}
}

// setting is the build setting key of the binary, "" where absent.
func setting(bi *buildinfo.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}
