package deleteorder

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// FuzzPriority feeds arbitrary annotation values to ParsePriority and Sort.
func FuzzPriority(f *testing.F) {
	for _, s := range []string{
		"", "0", "1", "-1", "+1", "007", "-0", "2147483647", "-2147483648", "2147483648",
		"-2147483649", " 1", "1 ", "\t1", "1\n", "0x1f", "1e3", "1_0", "1.5", "high", "--1", "٣", "\x00",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		pod := newPod("fuzz", priority(value))
		got, err := ParsePriority(pod, DefaultPriorityAnnotation)

		want, parseErr := strconv.ParseInt(value, 10, 32)
		switch {
		case parseErr == nil:
			if err != nil || int64(got) != want {
				t.Fatalf("ParsePriority(%q) = %d, %v; want %d, nil", value, got, err, want)
			}
			// The canonical form of the value reads back the same.
			canonical := newPod("fuzz", priority(strconv.FormatInt(int64(got), 10)))
			if again, err := (Order{}).Priority(canonical); err != nil || again != got {
				t.Fatalf("round trip of %d: got %d, %v", got, again, err)
			}
		default:
			if got != 0 || err == nil {
				t.Fatalf("ParsePriority(%q) = %d, %v; want 0 and an error", value, got, err)
			}
			if !strings.Contains(err.Error(), strconv.Quote(value)) || !strings.Contains(err.Error(), "ns/fuzz") {
				t.Fatalf("error %q does not name the pod and the value %q", err, value)
			}
		}
		if strings.TrimSpace(value) != value && err == nil {
			t.Fatalf("ParsePriority(%q) accepted surrounding whitespace", value)
		}

		// Sort treats the value as its parsed priority (0 when invalid) and
		// never panics.
		pods := []*corev1.Pod{
			newPod("minus-one", priority("-1")),
			newPod("fuzzed", priority(value)),
			newPod("one", priority("1")),
			newPod("none"),
		}
		Sort(pods, now)
		idx := slices.IndexFunc(pods, func(p *corev1.Pod) bool { return p.Name == "fuzzed" })
		iNone := slices.IndexFunc(pods, func(p *corev1.Pod) bool { return p.Name == "none" })
		switch {
		case got > 1 && idx != 0,
			got < -1 && idx != 3,
			got == 0 && (idx == 0 || idx == 3),
			got > 0 && idx > iNone,
			got < 0 && idx < iNone:
			t.Fatalf("priority %d (from %q) sorted to index %d: %v", got, value, idx, names(pods))
		}
	})
}
