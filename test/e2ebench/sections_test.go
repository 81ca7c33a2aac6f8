//go:build e2ebench

package e2ebench

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Each part of the bench is measured on its own (every run starts fresh
// nodes), so each has its own section in the table, stamped with when,
// from which commit and on which kubelet it was measured: -parts measures
// some parts again and keeps the file's sections of the others, and a run
// that fails costs only its own part's section.
var partsFlag = flag.String("parts", strings.Join(partNames(), ","), "the parts to measure, comma-separated; the table keeps the other parts' sections as the file has them")

// partNames are the bench's parts in the order they run and appear.
func partNames() []string {
	var names []string
	for _, p := range pidParts() {
		names = append(names, p.name)
	}
	return append(names, podIPsPart, memoryPart)
}

const (
	podIPsPart = "podips"
	memoryPart = "memory"
	// The parts' headings, which their render functions write and an
	// unmeasured part's note repeats.
	podIPsTitle = "Pod IPs running out, on two fresh real nodes"
	memoryTitle = "A memory hog"
)

// selectParts parses -parts: known names, no repeats, at least one.
func selectParts(s string) (map[string]bool, error) {
	sel := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if !slices.Contains(partNames(), name) {
			return nil, fmt.Errorf("-parts: unknown part %q (the parts: %s)", name, strings.Join(partNames(), ", "))
		}
		if sel[name] {
			return nil, fmt.Errorf("-parts: %q twice", name)
		}
		sel[name] = true
	}
	return sel, nil
}

// sectionMarker opens a part's section in the table; the section runs to
// the next marker or the end of the file.
func sectionMarker(part string) string { return "<!-- e2e-bench part: " + part + " -->" }

var sectionMarkerRE = regexp.MustCompile(`(?m)^<!-- e2e-bench part: ([a-z0-9]+) -->\n`)

// existingSections are the parts' sections of a table written before,
// each from its marker on; a file without markers has none.
func existingSections(doc string) map[string]string {
	out := map[string]string{}
	ms := sectionMarkerRE.FindAllStringSubmatchIndex(doc, -1)
	for i, m := range ms {
		end := len(doc)
		if i+1 < len(ms) {
			end = ms[i+1][0]
		}
		out[doc[m[2]:m[3]]] = strings.TrimRight(doc[m[0]:end], "\n") + "\n"
	}
	return out
}

// measurement says where a part's runs come from.
type measurement struct {
	made     time.Time
	commit   string
	kernel   string
	kubelets []string
}

// section is a freshly measured part's section: its marker, then body
// (which starts with the part's "## " heading) with the stamp under the
// heading.
func section(part string, m measurement, body string) string {
	body = strings.TrimLeft(body, "\n")
	heading, rest, _ := strings.Cut(body, "\n")
	stamp := fmt.Sprintf("Measured by `make e2e-bench PARTS=%s` on %s from commit %s (%s, 2 cores; kubelet %s, as the Nodes report it), %d runs with each stack.",
		part, m.made.UTC().Format("2 January 2006, 15:04 MST"), m.commit, m.kernel, orNone(versions(m.kubelets)), *runs)
	return sectionMarker(part) + "\n" + heading + "\n\n" + stamp + "\n" + strings.TrimRight(rest, "\n") + "\n"
}

// unmeasured is the section of a part the table has no runs of.
func unmeasured(part, title string) string {
	return fmt.Sprintf("%s\n## %s\n\nNot measured yet: `make e2e-bench PARTS=%s`.\n", sectionMarker(part), title, part)
}

// assemble is the whole table: the header and method, then every part's
// section: the fresh one, else the one doc (the file as it was) has,
// else a note that the part has no runs yet.
func assemble(header string, fresh map[string]string, doc string) string {
	old := existingSections(doc)
	titles := map[string]string{podIPsPart: podIPsTitle, memoryPart: memoryTitle}
	for _, p := range pidParts() {
		titles[p.name] = p.title
	}
	var b strings.Builder
	b.WriteString(strings.TrimRight(header, "\n") + "\n")
	for _, part := range partNames() {
		s, ok := fresh[part]
		if !ok {
			s, ok = old[part]
		}
		if !ok {
			s = unmeasured(part, titles[part])
		}
		b.WriteString("\n" + s)
	}
	return b.String()
}

// headCommit is the checkout's commit, and whether it had changes other
// than to the table (which a part measured before may have written).
func headCommit(table string) string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	diff := []string{"diff", "--quiet", "HEAD", "--", "."}
	if table != "" {
		diff = append(diff, ":(exclude)"+table)
	}
	// From the package's directory: the whole checkout.
	cmd := exec.Command("git", diff...)
	if top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output(); err == nil {
		cmd.Dir = strings.TrimSpace(string(top))
	}
	if cmd.Run() != nil {
		c += " with changes"
	}
	return c
}

// readTable is the table file as it is, or "" where there is none yet.
func readTable(path string) (string, error) {
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return "", nil
	}
	return string(data), err
}
