// Command mdcheck checks Headroom's Markdown as a renderer reads it: every
// file is parsed by a CommonMark parser (goldmark, with GitHub's table,
// strikethrough, autolink and task-list extensions, as GitHub renders the
// docs), and it fails on
//   - a fenced code block that is never closed (it swallows the rest of the
//     document), or a line inside one that starts like its closing fence but
//     carries text after it (not a closing fence under CommonMark);
//   - a relative link or image whose file does not exist;
//   - a link to an anchor (#heading, or file.md#heading) that no heading of
//     the target file gives, with GitHub's rule for heading anchors.
//
// Usage: mdcheck FILE.md...  (paths relative to the repository's root, where
// it runs). It prints one line per finding, FILE:LINE: message, and exits 1
// when there is any.
package main

import (
	"fmt"
	"os"
	"sort"
)

func main() {
	files := os.Args[1:]
	if len(files) == 0 {
		fmt.Fprintln(os.Stderr, "usage: mdcheck FILE.md...")
		os.Exit(2)
	}
	var findings []finding
	c := newChecker(os.DirFS("."))
	for _, f := range files {
		fs, err := c.check(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		findings = append(findings, fs...)
	}
	sort.SliceStable(findings, func(i, j int) bool {
		if findings[i].file != findings[j].file {
			return findings[i].file < findings[j].file
		}
		return findings[i].line < findings[j].line
	})
	for _, f := range findings {
		fmt.Println(f)
	}
	if len(findings) > 0 {
		fmt.Fprintf(os.Stderr, "mdcheck: %d finding(s) in %d file(s) checked\n", len(findings), len(files))
		os.Exit(1)
	}
}
