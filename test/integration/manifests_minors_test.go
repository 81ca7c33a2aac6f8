package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestManifestsPerMinor: manifests/minors/<minor> (hack/update-chart.sh,
// from hack/k8s-minors.txt) is, for every shipped minor and no other,
// manifests/ with the images of that minor, and its descheduler-deployment
// is manifests/descheduler-deployment with them; before 1.36 its
// namespace-opt-in is manifests/namespace-opt-in on
// admissionregistration.k8s.io/v1beta1. manifests/ itself is the default
// minor's.
func TestManifestsPerMinor(t *testing.T) {
	minors := shippedMinors(t)
	def := defaultMinor(t)
	base := renderKustomize(t)
	checkChartImages(t, chartImages(t, base), func(image string) string { return "ghcr.io/headroom-k8s/" + image + ":" + def.tag + "|" })

	entries, err := os.ReadDir(repoPath(t, "manifests/minors"))
	if err != nil {
		t.Fatal(err)
	}
	var dirs, want []string
	for _, e := range entries {
		dirs = append(dirs, e.Name())
	}
	for _, m := range minors {
		want = append(want, m.minor)
	}
	if !slices.Equal(dirs, want) {
		t.Errorf("manifests/minors holds %v, want the shipped minors %v: run hack/update-chart.sh", dirs, want)
	}

	deployment := renderKustomizeDir(t, "manifests/descheduler-deployment")
	optIn := renderKustomizeDir(t, "manifests/namespace-opt-in")
	for _, m := range minors {
		t.Run(m.minor, func(t *testing.T) {
			dir := "manifests/minors/" + m.minor
			got := renderKustomizeDir(t, dir)
			checkChartImages(t, chartImages(t, got), func(image string) string { return "ghcr.io/headroom-k8s/" + image + ":" + m.tag + "|" })
			compareObjects(t, replaced(t, base, def.tag, m.tag), got)
			compareObjects(t, replaced(t, deployment, def.tag, m.tag), renderKustomizeDir(t, dir+"/descheduler-deployment"))

			_, statErr := os.Stat(filepath.Join(repoPath(t, dir), "namespace-opt-in"))
			if !minorLess(t, m.minor, "1.36") {
				if statErr == nil {
					t.Errorf("%s/namespace-opt-in: %s serves admissionregistration.k8s.io/v1, manifests/namespace-opt-in applies as it is", dir, m.minor)
				}
				return
			}
			if statErr != nil {
				t.Fatalf("%s: no namespace-opt-in overlay for v1beta1: %v", dir, statErr)
			}
			compareObjects(t, replaced(t, optIn, "apiVersion\":\"admissionregistration.k8s.io/v1\"", "apiVersion\":\"admissionregistration.k8s.io/v1beta1\""),
				renderKustomizeDir(t, dir+"/namespace-opt-in"))
		})
	}
}

// replaced is objs with every occurrence of old in their JSON replaced by new.
func replaced(t *testing.T, objs map[string]object, old, new string) map[string]object {
	t.Helper()
	out := make(map[string]object, len(objs))
	for key, o := range objs {
		data, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		var c object
		if err := json.Unmarshal([]byte(strings.ReplaceAll(string(data), old, new)), &c); err != nil {
			t.Fatal(err)
		}
		out[key] = c
	}
	return out
}
