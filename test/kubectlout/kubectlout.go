// Package kubectlout reads kubectl-headroom's output in tests: its -o json
// strictly as the documented kind, and its evictions table row by row, so
// that unit and integration tests hold the JSON to the table one way.
package kubectlout

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/headroom-k8s/headroom/apis/kubectl/v1alpha1"
)

// DecodeStrict decodes what -o json printed into a T, refusing any field T
// does not define: the output is the documented kind, and only that.
func DecodeStrict[T any](t testing.TB, out string) *T {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(out))
	d.DisallowUnknownFields()
	v := new(T)
	if err := d.Decode(v); err != nil {
		t.Fatalf("decoding %T: %v\n%s", v, err, out)
	}
	return v
}

// columns splits a table row at runs of two or more spaces.
var columns = regexp.MustCompile(`  +`)

// EvictionRows are the rows of the evictions table (below its "#" header
// line), their five columns joined by "|".
func EvictionRows(t testing.TB, table string) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(table), "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "#") })
	if i < 0 {
		t.Fatalf("no table:\n%s", table)
	}
	var rows []string
	for _, l := range lines[i+1:] {
		rows = append(rows, strings.Join(columns.Split(l, 5), "|"))
	}
	return rows
}

// PlanRows are the plan's pods as the evictions table shows them, in
// EvictionRows' form.
func PlanRows(p *v1alpha1.NodeEvictionPlan) []string {
	var rows []string
	for i, e := range p.Pods {
		decision := "skip: " + e.Reason
		if e.Evict {
			decision = fmt.Sprintf("EVICT %d: %s", e.EvictionOrder, e.Reason)
		}
		rows = append(rows, fmt.Sprintf("%d|%s/%s|%d|%d|%s", i+1, e.Namespace, e.Name, e.Priority, e.FreesPIDs, decision))
	}
	return rows
}
