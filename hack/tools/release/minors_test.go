package main

import (
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
)

func TestParseMinorTag(t *testing.T) {
	for _, tc := range []struct{ tag, minor, headroom string }{
		{"v1.35.4-headroom.0.1.0", "1.35", "0.1.0"},
		{"v1.37.2-headroom.0.1.0", "1.37", "0.1.0"},
		{"v1.38.0-beta.0-headroom.0.1.0", "1.38", "0.1.0"},
		{"v1.36.3-headroom.0.0.0-verify", "1.36", "0.0.0-verify"},
		{"v1.36.10-headroom.12.3.4", "1.36", "12.3.4"},
	} {
		minor, headroom, err := ParseMinorTag(tc.tag)
		if err != nil || minor != tc.minor || headroom != tc.headroom {
			t.Errorf("ParseMinorTag(%q) = %q, %q, %v; want %q, %q", tc.tag, minor, headroom, err, tc.minor, tc.headroom)
		}
	}
	for _, tag := range []string{
		"", "latest", "v1.36.3", "1.36.3-headroom.0.1.0", "v1.36-headroom.0.1.0",
		"v1.36.3+headroom.0.1.0", "v1.36.3-headroom.0.1", "v1.36.3-headroom.", "v01.36.3-headroom.0.1.0",
		"v1.36.3-headroom.0.1.0+build",
	} {
		if minor, headroom, err := ParseMinorTag(tag); err == nil {
			t.Errorf("ParseMinorTag(%q) = %q, %q: want an error", tag, minor, headroom)
		}
	}
}

func TestParseMinors(t *testing.T) {
	got, err := ParseMinors("1.37, 1.35,1.36")
	if err != nil || strings.Join(got, " ") != "1.35 1.36 1.37" {
		t.Errorf("ParseMinors = %v, %v", got, err)
	}
	if got, err := ParseMinors(""); err != nil || got != nil {
		t.Errorf("ParseMinors(\"\") = %v, %v; want none", got, err)
	}
	for _, s := range []string{"1.35,1.35", "1", "v1.35", "1.35.4", "1.x"} {
		if _, err := ParseMinors(s); err == nil {
			t.Errorf("ParseMinors(%q): want an error", s)
		}
	}
}

func TestParsePlatforms(t *testing.T) {
	got, err := ParsePlatforms("linux/arm64, linux/amd64")
	if err != nil || strings.Join(got, " ") != "linux/amd64 linux/arm64" {
		t.Errorf("ParsePlatforms = %v, %v", got, err)
	}
	for _, s := range []string{"linux/amd64,linux/amd64", "linux", "/amd64", "linux/", "linux/arm/v7"} {
		if _, err := ParsePlatforms(s); err == nil {
			t.Errorf("ParsePlatforms(%q): want an error", s)
		}
	}
}

func TestCheckMinors(t *testing.T) {
	image := func(file, tag string) ArchivedImage {
		n := strings.TrimSuffix(file[strings.LastIndex(file, "/")+1:], ".oci.tar")
		ref, err := name.NewTag("ghcr.io/headroom-k8s/" + n + ":" + tag)
		if err != nil {
			t.Fatal(err)
		}
		return ArchivedImage{File: file, Tag: ref}
	}
	release := []ArchivedImage{
		image("images/1.35/headroom-scheduler.oci.tar", "v1.35.4-headroom.0.1.0"),
		image("images/1.35/headroom-node-agent.oci.tar", "v1.35.4-headroom.0.1.0"),
		image("images/1.36/headroom-scheduler.oci.tar", "v1.36.3-headroom.0.1.0"),
		image("images/1.36/headroom-node-agent.oci.tar", "v1.36.3-headroom.0.1.0"),
	}
	if err := CheckMinors(release, []string{"1.35", "1.36"}); err != nil {
		t.Errorf("a release of 1.35 and 1.36: %v", err)
	}
	if err := CheckMinors(release, nil); err != nil {
		t.Errorf("any minors: %v", err)
	}
	for _, tc := range []struct {
		name   string
		images []ArchivedImage
		minors []string
		want   []string
	}{{
		name:   "a minor missing",
		images: release,
		minors: []string{"1.35", "1.36", "1.37"},
		want:   []string{"images/ holds the minors [1.35 1.36], want [1.35 1.36 1.37]"},
	}, {
		name:   "an image missing",
		images: release[1:],
		want:   []string{"images/1.35: no headroom-scheduler.oci.tar"},
	}, {
		name:   "another minor's image",
		images: append(release[:3:3], image("images/1.36/headroom-node-agent.oci.tar", "v1.35.4-headroom.0.1.0")),
		want:   []string{"images/1.36/headroom-node-agent.oci.tar: tagged v1.35.4-headroom.0.1.0, an image built for Kubernetes 1.35, in the directory of 1.36"},
	}, {
		name:   "two Headroom versions",
		images: append(release[:3:3], image("images/1.36/headroom-node-agent.oci.tar", "v1.36.3-headroom.0.2.0")),
		want:   []string{"images of several Headroom versions: 0.1.0 (images/1.35/headroom-scheduler.oci.tar, images/1.35/headroom-node-agent.oci.tar, images/1.36/headroom-scheduler.oci.tar); 0.2.0 (images/1.36/headroom-node-agent.oci.tar)"},
	}, {
		name:   "not the scheme",
		images: append(release[:3:3], image("images/1.36/headroom-node-agent.oci.tar", "v1.36.3")),
		want:   []string{`images/1.36/headroom-node-agent.oci.tar: tag "v1.36.3" is not <Kubernetes release>-headroom.<Headroom version>`},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckMinors(tc.images, tc.minors)
			if err == nil {
				t.Fatal("passed")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v\nwant %q", err, w)
				}
			}
		})
	}
}
