package sample

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testFormat is pid-pods' format; the formats' own packages test theirs.
var testFormat = PodListFormat{Key: "headroom.dev/pid-pods", MaxEntries: 32, MaxValue: 1 << 22}

func TestPodListFormatMaxBytes(t *testing.T) {
	if got, want := testFormat.MaxBytes(), 32*(36+1+7+1)-1; got != want {
		t.Errorf("MaxBytes = %d, want %d", got, want)
	}
	mem := PodListFormat{MaxEntries: 32, MaxValue: 1 << 50}
	if got, want := mem.MaxBytes(), 32*(36+1+16+1)-1; got != want {
		t.Errorf("MaxBytes = %d, want %d", got, want)
	}
}

func TestTruncateKeepsValidUTF8(t *testing.T) {
	v := strings.Repeat("a", 79) + "é" + strings.Repeat("b", 10) // é spans bytes 79 and 80
	got := truncate(v)
	if !utf8.ValidString(got) || got != strings.Repeat("a", 79)+"…" {
		t.Errorf("truncate = %q, want the cut rune dropped", got)
	}
	_, err := testFormat.Parse(v)
	if err == nil || !utf8.ValidString(err.Error()) {
		t.Errorf("Parse error %q is not valid UTF-8", err)
	}
	if short := "é=1"; truncate(short) != short {
		t.Errorf("truncate(%q) = %q", short, truncate(short))
	}
}

// A static pod's cgroup is named by the kubelet's UID for it, a hash of its
// manifest that its mirror pod carries in kubernetes.io/config.mirror; the
// API gives the mirror pod a UID of its own. The node agent lists the
// static pod under the hash in the form of a UUID, and readers find the
// mirror pod there: its figure counts in the node's estimate (it holds
// memory and PIDs like any pod), and it is measured, not declared.
func TestMirrorPodsAreFoundUnderTheStaticPodsUID(t *testing.T) {
	const hash = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	uid, ok := StaticPodUID(hash)
	if !ok || uid != "0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9" || !IsPodUID(string(uid)) {
		t.Fatalf("StaticPodUID(%s) = %s, %v", hash, uid, ok)
	}
	for _, bad := range []string{"", "0A1B2C3D4E5F60718293A4B5C6D7E8F9", hash + "0", "not-a-uid", "0a1b2c3d4e5f60718293a4b5c6d7e8fg"} {
		if _, ok := StaticPodUID(bad); ok {
			t.Errorf("StaticPodUID(%q) accepted", bad)
		}
	}
	mirror := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-node", UID: "6a0b5b6e-2f60-4c1e-9a53-3b1c0d1e2f77",
		Annotations: map[string]string{corev1.MirrorPodAnnotationKey: hash}}}
	mirror.Status.Phase = corev1.PodRunning
	list := testFormat.New([]PodFigure{{UID: uid, Value: 700}, {UID: "6a0b5b6e-2f60-4c1e-9a53-3b1c0d1e2f01", Value: 40}})
	if n, ok := list.LookupPod(mirror); !ok || n != 700 {
		t.Errorf("LookupPod(mirror) = %d, %v; want 700, listed", n, ok)
	}
	if n, measured := PodFigureOf(list, time.Now(), mirror, 5, ForPlacement); !measured || n != 700 {
		t.Errorf("PodFigureOf(mirror) = %d, %v; want its measured 700", n, measured)
	}
	tally := NewTally(list, ForPlacement)
	if !tally.Listed(mirror) {
		t.Fatal("the tally does not find the mirror pod on the list")
	}
	// 1000 reported; the other listed pod has left the node: 1000 − 40.
	if got := tally.Usage(1000).Held; got != 960 {
		t.Errorf("held %d, want 960: the mirror pod's 700 stay", got)
	}
	// A static pod whose manifest sets its UID: the annotation holds it.
	own := mirror.DeepCopy()
	own.Annotations[corev1.MirrorPodAnnotationKey] = "6a0b5b6e-2f60-4c1e-9a53-3b1c0d1e2f01"
	if n, ok := list.LookupPod(own); !ok || n != 40 {
		t.Errorf("LookupPod(mirror of a static pod with its own UID) = %d, %v", n, ok)
	}
}

// FuzzStaticPodUID: whatever a cgroup's name holds, StaticPodUID never
// panics, and what it accepts is a pod UID the per-pod lists accept, the
// same hex digits in the same order.
func FuzzStaticPodUID(f *testing.F) {
	f.Add("0a1b2c3d4e5f60718293a4b5c6d7e8f9")
	f.Add("6a0b5b6e-2f60-4c1e-9a53-3b1c0d1e2f01")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		uid, ok := StaticPodUID(s)
		if !ok {
			return
		}
		if !IsPodUID(string(uid)) || strings.ReplaceAll(string(uid), "-", "") != strings.ReplaceAll(s, "-", "") {
			t.Fatalf("StaticPodUID(%q) = %q", s, uid)
		}
	})
}
