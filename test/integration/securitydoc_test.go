package integration

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// rightsListNames are the reviewed rights lists of TestShippedRights, each a
// section of docs/security.md.
var rightsListNames = []string{"headroom-scheduler", "headroom-descheduler", "headroom-descheduler-deployment", "headroom-node-agent"}

var rightsLine = regexp.MustCompile(`^(\S+) \[(.*?)\] \[(.*?)\] \[(.*?)\]$`)

// TestSecurityDocListsTheShippedRights holds docs/security.md's tables of
// rights to the reviewed lists that TestShippedRights holds to a real API
// server: a row per resource, names and verbs, with the namespaces that
// grant it ("every namespace" where all of rightsNamespaces do). It needs
// no control plane.
func TestSecurityDocListsTheShippedRights(t *testing.T) {
	doc := string(repoFile(t, "docs/security.md"))
	for _, name := range rightsListNames {
		want := rightsTable(t, string(repoFile(t, "test/integration/testdata/rights/"+name+".txt")))
		got := docTable(doc, name)
		if !slices.Equal(got, want) {
			t.Errorf("docs/security.md, section `%s`, lists rights other than test/integration/testdata/rights/%s.txt:\n%s\nThe section's rows should be:\n%s",
				name, name, lineDiff(strings.Join(want, "\n"), strings.Join(got, "\n")), strings.Join(want, "\n"))
		}
	}
}

// rightsTable renders a rights list (kubectl auth can-i --list per
// namespace) as docs/security.md's rows, in the list's order.
func rightsTable(t *testing.T, list string) []string {
	t.Helper()
	var keys []string
	where := map[string][]string{}
	ns := ""
	for _, line := range strings.Split(list, "\n") {
		switch {
		case strings.HasPrefix(line, "# namespace "):
			ns = strings.TrimPrefix(line, "# namespace ")
			continue
		case line == "" || strings.HasPrefix(line, "Resources "):
			continue
		}
		m := rightsLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("rights list line %q does not parse", line)
		}
		names := m[3]
		if names == "" {
			names = "any"
		}
		key := fmt.Sprintf("| `%s` | %s | %s |", m[1], names, m[4])
		if _, ok := where[key]; !ok {
			keys = append(keys, key)
		}
		where[key] = append(where[key], ns)
	}
	rows := make([]string, len(keys))
	for i, key := range keys {
		w := strings.Join(where[key], ", ")
		if len(where[key]) == len(rightsNamespaces) {
			w = "every namespace"
		}
		rows[i] = key + " " + w + " |"
	}
	return rows
}

// docTable returns the table rows of the doc's section headed ### `name`,
// without the header and delimiter rows.
func docTable(doc, name string) []string {
	_, section, ok := strings.Cut(doc, "\n### `"+name+"`\n")
	if !ok {
		return nil
	}
	var rows []string
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		if strings.HasPrefix(line, "| `") {
			rows = append(rows, line)
		}
	}
	return rows
}
