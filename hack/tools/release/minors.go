package main

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// ImageArchives is where a release holds its images: one directory per
// Kubernetes minor it ships for, images/<minor>/NAME.oci.tar, each image
// tagged with that minor's tag (docs/release.md, "Image tags").
const ImageArchives = "images/*/*.oci.tar"

// minorTag is the tag scheme <Kubernetes release>-headroom.<Headroom
// version>: v1.35.4-headroom.0.1.0, v1.38.0-beta.0-headroom.0.1.0. The
// Kubernetes release is the one the minor's build embeds.
var minorTag = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+?)?-headroom\.((0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?)$`)

// ParseMinorTag splits an image tag of the scheme into the Kubernetes
// minor it was built for (1.35) and Headroom's version (0.1.0).
func ParseMinorTag(tag string) (minor, headroom string, err error) {
	m := minorTag.FindStringSubmatch(tag)
	if m == nil {
		return "", "", fmt.Errorf("tag %q is not <Kubernetes release>-headroom.<Headroom version>, e.g. v1.35.4-headroom.0.1.0", tag)
	}
	return m[1] + "." + m[2], m[5], nil
}

// ParseMinors reads a comma-separated list of minors (1.35,1.36); "" is
// none.
func ParseMinors(s string) ([]string, error) {
	return parseList(s, func(f string) error {
		if _, _, err := ParseMinorTag("v" + f + ".0-headroom.0.0.0"); err != nil {
			return fmt.Errorf("%q is not a minor such as 1.35", f)
		}
		return nil
	})
}

// CheckMinors holds a release's images to the per-minor layout: each
// image's tag is of its directory's minor, one Headroom version across
// all of them, every minor with the same images, and, where minors is not
// nil, exactly those minors. Images' Files are relative to the release
// directory, images/<minor>/NAME.oci.tar.
func CheckMinors(images []ArchivedImage, minors []string) error {
	var errs []error
	names := map[string][]string{} // image names by minor
	headrooms := map[string][]string{}
	for _, img := range images {
		dir := path.Base(path.Dir(img.File))
		name := strings.TrimSuffix(path.Base(img.File), ".oci.tar")
		names[dir] = append(names[dir], name)
		minor, headroom, err := ParseMinorTag(img.Tag.TagStr())
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", img.File, err))
			continue
		}
		if minor != dir {
			errs = append(errs, fmt.Errorf("%s: tagged %s, an image built for Kubernetes %s, in the directory of %s", img.File, img.Tag.TagStr(), minor, dir))
		}
		headrooms[headroom] = append(headrooms[headroom], img.File)
	}
	if len(headrooms) > 1 {
		var vs []string
		for v, files := range headrooms {
			vs = append(vs, fmt.Sprintf("%s (%s)", v, strings.Join(files, ", ")))
		}
		slices.Sort(vs)
		errs = append(errs, fmt.Errorf("images of several Headroom versions: %s", strings.Join(vs, "; ")))
	}
	var all []string
	for _, ns := range names {
		all = append(all, ns...)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	got := make([]string, 0, len(names))
	for minor, ns := range names {
		got = append(got, minor)
		for _, n := range all {
			if !slices.Contains(ns, n) {
				errs = append(errs, fmt.Errorf("images/%s: no %s.oci.tar, which another minor has", minor, n))
			}
		}
	}
	slices.Sort(got)
	if minors != nil && !slices.Equal(got, minors) {
		errs = append(errs, fmt.Errorf("images/ holds the minors %v, want %v", got, minors))
	}
	return errors.Join(errs...)
}
