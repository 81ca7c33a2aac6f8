package sample

import (
	"strings"
	"testing"
	"unicode/utf8"
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
