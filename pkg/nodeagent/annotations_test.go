package nodeagent

import (
	"maps"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
	"github.com/headroom-k8s/headroom/pkg/sample"
)

// contractNodeAnnotations are the Node annotations of the project
// contract's table, every one of them the node agent's.
var contractNodeAnnotations = []string{
	"headroom.dev/pid-capacity", "headroom.dev/pid-reserved", "headroom.dev/pid-used",
	"headroom.dev/pid-sampled-at", "headroom.dev/pid-pods",
	"headroom.dev/ip-capacity", "headroom.dev/ip-used", "headroom.dev/ip-sampled-at", "headroom.dev/ip-leaked",
	"headroom.dev/memory-used", "headroom.dev/memory-sampled-at", "headroom.dev/memory-pods",
}

// agentNodeAnnotations are the Node annotations the agent writes: the
// contract's, and those of its own design documented in
// cmd/node-agent/README.md (a node's swap, with its memory sample).
var agentNodeAnnotations = append(slices.Clone(contractNodeAnnotations),
	"headroom.dev/swap-total", "headroom.dev/swap-pods")

// TestAdmissionPolicyCaps holds the admission policy that confines the
// agent's ServiceAccount (the kustomize tree's and the chart's copy) to
// AnnotationCaps: its headroomAnnotationCaps variable, evaluated as CEL,
// must name the same keys with the same caps.
func TestAdmissionPolicyCaps(t *testing.T) {
	if got := slices.Sorted(maps.Keys(AnnotationCaps)); !slices.Equal(got, slices.Sorted(slices.Values(agentNodeAnnotations))) {
		t.Errorf("AnnotationCaps names %q, want the contract's Node annotations and the agent's swap figures %q", got, agentNodeAnnotations)
	}
	want := map[string]int64{}
	for k, v := range AnnotationCaps {
		want[k] = int64(v)
	}
	for _, rel := range []string{
		"manifests/node-agent/admission-policy.yaml",
		"manifests/charts/headroom/files/node-agent-admission-policy.yaml",
	} {
		t.Run(filepath.Base(rel), func(t *testing.T) {
			got := policyCaps(t, filepath.Join("..", "..", rel))
			if !maps.Equal(got, want) {
				for _, k := range slices.Sorted(maps.Keys(want)) {
					if g, ok := got[k]; !ok || g != want[k] {
						t.Errorf("%s: %s is capped at %d (present %v), nodeagent.AnnotationCaps says %d", rel, k, g, ok, want[k])
					}
				}
				for _, k := range slices.Sorted(maps.Keys(got)) {
					if _, ok := want[k]; !ok {
						t.Errorf("%s allows %s, which nodeagent.AnnotationCaps does not name", rel, k)
					}
				}
			}
		})
	}
}

// policyCaps returns the headroomAnnotationCaps variable of the
// ValidatingAdmissionPolicy in the file at path, evaluated.
func policyCaps(t *testing.T, path string) map[string]int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		var policy admissionregistrationv1.ValidatingAdmissionPolicy
		if err := yaml.Unmarshal([]byte(doc), &policy); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if policy.Kind != "ValidatingAdmissionPolicy" {
			continue
		}
		for _, v := range policy.Spec.Variables {
			if v.Name != "headroomAnnotationCaps" {
				continue
			}
			env, err := cel.NewEnv()
			if err != nil {
				t.Fatal(err)
			}
			ast, iss := env.Compile(v.Expression)
			if iss.Err() != nil {
				t.Fatalf("%s: headroomAnnotationCaps: %v", path, iss.Err())
			}
			prg, err := env.Program(ast)
			if err != nil {
				t.Fatal(err)
			}
			out, _, err := prg.Eval(map[string]any{})
			if err != nil {
				t.Fatalf("%s: headroomAnnotationCaps: %v", path, err)
			}
			caps, err := out.ConvertToNative(reflect.TypeFor[map[string]int64]())
			if err != nil {
				t.Fatalf("%s: headroomAnnotationCaps is not a map of string to int: %v", path, err)
			}
			return caps.(map[string]int64)
		}
		t.Fatalf("%s: the policy has no variable headroomAnnotationCaps", path)
	}
	t.Fatalf("%s holds no ValidatingAdmissionPolicy", path)
	return nil
}

// TestAnnotationCapsHoldTheAgentsWrites checks the caps against the
// longest values the agent's own formatting produces.
func TestAnnotationCapsHoldTheAgentsWrites(t *testing.T) {
	for _, n := range []string{strconv.FormatUint(math.MaxUint64, 10), strconv.FormatInt(math.MinInt64+1, 10)} {
		if len(n) > MaxIntegerBytes {
			t.Errorf("%s: %d bytes, more than MaxIntegerBytes %d", n, len(n), MaxIntegerBytes)
		}
	}
	if s := sample.FormatTime(time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(23*3600+59*60)))); len(s) > MaxTimeBytes {
		t.Errorf("sample time %q: %d bytes, more than MaxTimeBytes %d", s, len(s), MaxTimeBytes)
	}
	if s := time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.FixedZone("", -(23*3600+59*60))).Format(time.RFC3339Nano); len(s) != MaxTimeBytes {
		t.Errorf("the longest RFC3339Nano time %q has %d bytes, MaxTimeBytes is %d", s, len(s), MaxTimeBytes)
	}
	// A full list of the largest figures.
	usage := make([]pidstats.PodUsage, pidstats.MaxListedPods+8)
	for i := range usage {
		usage[i] = pidstats.PodUsage{UID: types.UID(strings.Repeat(strconv.Itoa(i%10), 8) + "-0000-4000-8000-000000000000"), Value: pidstats.MaxPodPIDs}
	}
	if s := pidstats.NewPodList(usage).String(); len(s) != MaxPIDPodsBytes {
		t.Errorf("the longest pid-pods the agent writes has %d bytes, MaxPIDPodsBytes is %d", len(s), MaxPIDPodsBytes)
	}
	if err := CheckAnnotation(pidstats.AnnotationPIDPods, strings.Repeat("x", MaxPIDPodsBytes+1)); err == nil {
		t.Error("CheckAnnotation lets an oversize pid-pods through")
	}
	if err := CheckAnnotation("headroom.dev/foo", "1"); err == nil {
		t.Error("CheckAnnotation lets headroom.dev/foo through")
	}
	if err := CheckAnnotation(pidstats.AnnotationUsed, "12345"); err != nil {
		t.Errorf("CheckAnnotation refuses pid-used=12345: %v", err)
	}
}

// fixedSample is a Sample with the given annotations.
type fixedSample map[string]string

func (s fixedSample) Annotations() map[string]string { return s }
func (s fixedSample) Changed(Sample) (bool, string)  { return true, "test" }
func (s fixedSample) SampledAt() time.Time           { return time.Time{} }

// TestPatchChecksAnnotationCaps: the agent sends no write the admission
// policy would refuse; a key outside AnnotationCaps or a value over its cap
// fails the write before it reaches the API server.
func TestPatchChecksAnnotationCaps(t *testing.T) {
	h := newHarness(t, testConfig(), nil)
	for name, s := range map[string]fixedSample{
		"unknown key": {pidstats.AnnotationUsed: "5", "headroom.dev/foo": "1"},
		"oversize":    {pidstats.AnnotationUsed: strings.Repeat("1", MaxIntegerBytes+1)},
	} {
		if err := h.r.patch(h.ctx, []Sample{s}); err == nil {
			t.Errorf("%s: patch sent %v", name, s)
		}
	}
	if n := len(h.patches()); n != 0 {
		t.Fatalf("%d patches reached the API server", n)
	}
	if err := h.r.patch(h.ctx, []Sample{fixedSample{pidstats.AnnotationUsed: "5"}}); err != nil {
		t.Fatalf("patch of pid-used=5: %v", err)
	}
	if got := h.patched(0)[pidstats.AnnotationUsed]; got != "5" {
		t.Errorf("patched pid-used %q, want 5", got)
	}
}
