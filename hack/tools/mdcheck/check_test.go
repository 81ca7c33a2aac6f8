package main

import (
	"strings"
	"testing"
	"testing/fstest"
)

func findingsOf(t *testing.T, files map[string]string, name string) []string {
	t.Helper()
	root := fstest.MapFS{}
	for n, s := range files {
		root[n] = &fstest.MapFile{Data: []byte(s)}
	}
	fs, err := newChecker(root).check(name)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, f.String())
	}
	return out
}

func TestFences(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string // substrings of the findings, in order; none: clean
	}{
		{"closed", "# A\n\n```sh\nls\n```\n\ntext\n", nil},
		{"closed with a longer fence", "````md\n```go\nx\n```\n`````\n", nil},
		{"tilde around backticks", "~~~\n``` not a close\n~~~\n", nil},
		{"empty block", "```\n```\n", nil},
		{"in a list", "- item\n\n  ```sh\n  ls\n  ```\n- next\n", nil},
		{"in a block quote", "> ```\n> x\n> ```\n", nil},
		// The README's defect: text after a would-be closing fence.
		{"text after the closing fence", "```sh\nls\n``` kubectl (1.26+)\nmore\n\n## Later\n", []string{
			"3: a line of a fenced code block starts like its closing ``` but has text after it (\"kubectl (1.26+)\")",
			"1: fenced code block opened here is never closed with ```",
		}},
		{"never closed", "text\n\n~~~~\ncode\n", []string{"3: fenced code block opened here is never closed with ~~~~"}},
		{"shorter close", "````\ncode\n```\n", []string{"1: fenced code block opened here is never closed"}},
		{"unclosed in a list item", "- item\n\n  ```sh\n  ls\n- next\n", []string{"3: fenced code block opened here is never closed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := findingsOf(t, map[string]string{"a.md": tc.src}, "a.md")
			if len(got) != len(tc.want) {
				t.Fatalf("findings %q, want %d matching %q", got, len(tc.want), tc.want)
			}
			for _, w := range tc.want {
				if !containsOne(got, "a.md:"+w) {
					t.Errorf("findings %q, want one starting %q", got, "a.md:"+w)
				}
			}
		})
	}
}

func TestLinks(t *testing.T) {
	files := map[string]string{
		"README.md": strings.Join([]string{
			"# Headroom",
			"## The two commands",
			"## `make run` (cold)",
			"## Twice",
			"## Twice",
			`<a name="legacy"></a>`,
			"[ok](docs/guide.md) [dir](docs) [anchor](#the-two-commands) [code](#make-run-cold)",
			"[dup](#twice-1) [html](#legacy) [other](docs/guide.md#a-b--c) [web](https://example.com/x#y) [mail](mailto:a@b)",
			"[root](/docs/guide.md) ![img](docs/pic.png) [ref][r]",
			"",
			"[r]: docs/guide.md#setup",
			"",
		}, "\n"),
		"docs/guide.md": "# Guide\n## A: b / c\n## Setup\n[up](../README.md#headroom)\n",
		"docs/pic.png":  "png",
		"bad.md": strings.Join([]string{
			"# Bad",
			"[missing](docs/nope.md)",
			"[anchor](#nope) [other](docs/guide.md#nope)",
			"[out](../elsewhere.md)",
			"![img](missing.png)",
			"",
		}, "\n"),
	}
	if got := findingsOf(t, files, "README.md"); len(got) != 0 {
		t.Errorf("README.md: findings %q, want none", got)
	}
	if got := findingsOf(t, files, "docs/guide.md"); len(got) != 0 {
		t.Errorf("docs/guide.md: findings %q, want none", got)
	}
	want := []string{
		`bad.md:2: link "docs/nope.md": docs/nope.md does not exist`,
		`bad.md:3: link "#nope": no heading of bad.md has the anchor #nope`,
		`bad.md:3: link "docs/guide.md#nope": no heading of docs/guide.md has the anchor #nope`,
		`bad.md:4: link "../elsewhere.md" leaves the repository`,
		`bad.md:5: link "missing.png": missing.png does not exist`,
	}
	got := findingsOf(t, files, "bad.md")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("bad.md: findings\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestAnchor(t *testing.T) {
	for in, want := range map[string]string{
		"The two commands":        "the-two-commands",
		"make run (cold)":         "make-run-cold",
		"A: b / c":                "a-b--c",
		"Relief ahead of kubelet": "relief-ahead-of-kubelet",
		"Über_größe 2":            "über_größe-2",
	} {
		if got := anchor(in); got != want {
			t.Errorf("anchor(%q) = %q, want %q", in, got, want)
		}
	}
}

func containsOne(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}
