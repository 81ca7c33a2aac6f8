package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"net/url"
	"path"
	"regexp"
	"sort"
	"strings"
	"unicode"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/text"
)

// finding is one problem in one file, at a 1-based line.
type finding struct {
	file string
	line int
	msg  string
}

func (f finding) String() string { return fmt.Sprintf("%s:%d: %s", f.file, f.line, f.msg) }

// checker checks Markdown files of one tree (a repository's root), reading
// each target file's headings once.
type checker struct {
	root    fs.FS
	md      goldmark.Markdown
	anchors map[string]map[string]bool
}

func newChecker(root fs.FS) *checker {
	return &checker{
		root:    root,
		md:      goldmark.New(goldmark.WithExtensions(extension.GFM)),
		anchors: map[string]map[string]bool{},
	}
}

// document is a parsed Markdown file.
type document struct {
	name string
	src  []byte
	root ast.Node
	// lineStarts are the offsets at which the source's lines start.
	lineStarts []int
}

func (c *checker) parse(name string) (*document, error) {
	src, err := fs.ReadFile(c.root, name)
	if err != nil {
		return nil, err
	}
	d := &document{name: name, src: src, lineStarts: []int{0}}
	for i, b := range src {
		if b == '\n' && i+1 < len(src) {
			d.lineStarts = append(d.lineStarts, i+1)
		}
	}
	d.root = c.md.Parser().Parse(text.NewReader(src))
	return d, nil
}

// lineOf is the 0-based line holding offset.
func (d *document) lineOf(offset int) int {
	return sort.Search(len(d.lineStarts), func(i int) bool { return d.lineStarts[i] > offset }) - 1
}

// line is the text of 0-based line i, without its newline.
func (d *document) line(i int) []byte {
	end := len(d.src)
	if i+1 < len(d.lineStarts) {
		end = d.lineStarts[i+1]
	}
	return bytes.TrimRight(d.src[d.lineStarts[i]:end], "\r\n")
}

// check returns the findings of one file.
func (c *checker) check(name string) ([]finding, error) {
	d, err := c.parse(name)
	if err != nil {
		return nil, err
	}
	var out []finding
	report := func(offset int, format string, args ...any) {
		out = append(out, finding{name, d.lineOf(max(offset, 0)) + 1, fmt.Sprintf(format, args...)})
	}
	err = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.FencedCodeBlock:
			c.checkFence(d, n, report)
		case *ast.Link:
			c.checkLink(d, string(n.Destination), posOf(n), report)
		case *ast.Image:
			c.checkLink(d, string(n.Destination), posOf(n), report)
		}
		return ast.WalkContinue, nil
	})
	return out, err
}

// posOf is the offset of n in the source, or of the nearest ancestor that
// has one.
func posOf(n ast.Node) int {
	for ; n != nil; n = n.Parent() {
		if p := n.Pos(); p >= 0 {
			return p
		}
	}
	return 0
}

// fenceRun returns the fence character and the length of the run of it that
// line starts with, after the indentation and the block-quote markers of
// its containers; 0 when it starts with no fence character.
func fenceRun(line []byte) (byte, int, []byte) {
	line = bytes.TrimLeft(line, " \t>")
	if len(line) == 0 || (line[0] != '`' && line[0] != '~') {
		return 0, 0, nil
	}
	ch := line[0]
	n := 0
	for n < len(line) && line[n] == ch {
		n++
	}
	return ch, n, line[n:]
}

// checkFence reports a fenced code block that is never closed, and a line
// in it that starts like its closing fence but has text after the fence:
// under CommonMark that line is code, and the block goes on.
func (c *checker) checkFence(d *document, n *ast.FencedCodeBlock, report func(int, string, ...any)) {
	open := n.Pos()
	if open < 0 {
		return
	}
	openLine := d.lineOf(open)
	ch, length, _ := fenceRun(d.line(openLine))
	if length < 3 {
		return
	}
	last := openLine
	lines := n.Lines()
	for i := 0; i < lines.Len(); i++ {
		seg := lines.At(i)
		l := d.lineOf(seg.Start)
		last = max(last, l)
		if c, k, rest := fenceRun(d.line(l)); c == ch && k >= length && len(bytes.TrimSpace(rest)) > 0 {
			report(seg.Start, "a line of a fenced code block starts like its closing %s but has text after it (%q): it is not a closing fence, and the block goes on", strings.Repeat(string(ch), length), bytes.TrimSpace(rest))
		}
	}
	closing := last + 1
	if closing < len(d.lineStarts) {
		if c, k, rest := fenceRun(d.line(closing)); c == ch && k >= length && len(bytes.TrimSpace(rest)) == 0 {
			return
		}
	}
	report(open, "fenced code block opened here is never closed with %s: the rest of its container renders as code", strings.Repeat(string(ch), length))
}

var scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)

// checkLink reports a relative link whose file does not exist, or whose
// anchor no heading of the target file gives.
func (c *checker) checkLink(d *document, dest string, offset int, report func(int, string, ...any)) {
	if dest == "" || scheme.MatchString(dest) || strings.HasPrefix(dest, "//") {
		return
	}
	target, anchor, _ := strings.Cut(dest, "#")
	if p, err := url.PathUnescape(target); err == nil {
		target = p
	}
	file := d.name
	if target != "" {
		if strings.HasPrefix(target, "/") {
			file = path.Clean(strings.TrimPrefix(target, "/"))
		} else {
			file = path.Join(path.Dir(d.name), target)
		}
		if strings.HasPrefix(file, "../") || file == ".." {
			report(offset, "link %q leaves the repository", dest)
			return
		}
		if _, err := fs.Stat(c.root, file); err != nil {
			report(offset, "link %q: %s does not exist", dest, file)
			return
		}
	}
	if anchor == "" || !strings.HasSuffix(file, ".md") {
		return
	}
	anchors, err := c.anchorsOf(file)
	if err != nil {
		report(offset, "link %q: %v", dest, err)
		return
	}
	if !anchors[strings.ToLower(anchor)] {
		report(offset, "link %q: no heading of %s has the anchor #%s", dest, file, anchor)
	}
}

var htmlAnchor = regexp.MustCompile(`(?i)<a\s[^>]*(?:name|id)\s*=\s*"([^"]+)"`)

// anchorsOf returns the anchors of file's headings, as GitHub makes them
// (anchor), and of its HTML anchors (<a name> or <a id>).
func (c *checker) anchorsOf(file string) (map[string]bool, error) {
	if a, ok := c.anchors[file]; ok {
		return a, nil
	}
	d, err := c.parse(file)
	if err != nil {
		return nil, err
	}
	anchors := map[string]bool{}
	seen := map[string]int{}
	_ = ast.Walk(d.root, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		if h, ok := n.(*ast.Heading); ok {
			slug := anchor(plainText(h, d.src))
			if k := seen[slug]; k > 0 {
				anchors[fmt.Sprintf("%s-%d", slug, k)] = true
			} else {
				anchors[slug] = true
			}
			seen[slug]++
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	for _, m := range htmlAnchor.FindAllSubmatch(d.src, -1) {
		anchors[strings.ToLower(string(m[1]))] = true
	}
	c.anchors[file] = anchors
	return anchors, nil
}

// plainText is a heading's text as rendered, without markup: its text,
// code spans' contents and links' labels.
func plainText(n ast.Node, src []byte) string {
	var b strings.Builder
	_ = ast.Walk(n, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		switch n := n.(type) {
		case *ast.Text:
			b.Write(n.Segment.Value(src))
		case *ast.String:
			b.Write(n.Value)
		case *ast.AutoLink:
			b.Write(n.Label(src))
		case *ast.RawHTML:
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	return b.String()
}

// anchor is GitHub's anchor of a heading with text s: lower case, letters,
// digits, '-' and '_' kept, spaces made '-', everything else dropped.
func anchor(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case unicode.IsLetter(r), unicode.IsDigit(r), r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}
