package pidstats

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/headroom-k8s/headroom/pkg/sample"
)

// AnnotationPIDPods lists the PIDs the node's biggest PID users held at the
// sample of AnnotationSampledAt, measured from each pod's cgroup:
// comma-separated <pod UID>=<PIDs>, largest first.
const AnnotationPIDPods = "headroom.dev/pid-pods"

// Bounds of AnnotationPIDPods. Every Node watcher in the cluster (kubelets
// aside, every scheduler, controller and agent that watches Nodes) receives
// the annotation with every Node update, so it is kept to a few dozen pods:
// at most MaxListedPods entries of at most 36+1+7+1 bytes, MaxPodListBytes
// in all. See cmd/node-agent/README.md for what that costs at 5,000 nodes.
const (
	// MaxListedPods is the most pods the annotation lists. The pods that
	// matter for the estimate are the big PID users; a pod not listed held
	// fewer PIDs than every listed one.
	MaxListedPods = 32
	// MaxPodPIDs is the largest figure of one pod, listed or declared in
	// headroom.dev/pids: all of a node's PIDs.
	MaxPodPIDs = MaxNodePIDs
	// uidLen is the length of a pod UID as the API server generates it, an
	// RFC 4122 UUID in its canonical form.
	uidLen = 36
	// MaxPodListBytes is the longest value ParsePodList accepts.
	MaxPodListBytes = MaxListedPods*(uidLen+len("=")+len("4194304")+len(",")) - len(",")
)

// written is the list of a node whose agent wrote AnnotationPIDPods empty:
// it measured no pod, which is not the same as a node without the annotation
// (see Complete).
var written = &podList{}

// PodList indexes its entries with uint8.
var _ [256 - MaxListedPods]struct{}

// PodUsage is one entry of AnnotationPIDPods.
type PodUsage struct {
	UID  types.UID
	PIDs int64
}

// PodList is a parsed AnnotationPIDPods value. The zero PodList lists no
// pods, which is also what a node without the annotation has: nothing is
// subtracted from its reported use. A PodList is immutable and safe to share.
type PodList struct {
	l *podList
}

type podList struct {
	entries []PodUsage // largest first
	byUID   []uint8    // indices of entries, in UID order
	total   int64      // sum of the entries' PIDs
	err     error      // why the annotation was not used; entries empty
}

// ParsePodList parses an AnnotationPIDPods value strictly: "" (no pods) or
// up to MaxListedPods comma-separated <UID>=<PIDs> entries, UID a lowercase
// canonical UUID listed once, PIDs a base-10 integer in [0, MaxPodPIDs]
// without sign or leading zeros, largest first; MaxPodListBytes at most.
// Anything else returns an *InvalidError naming the annotation and the
// zero PodList. It never panics and does O(len(v)) work.
func ParsePodList(v string) (PodList, error) {
	invalid := func(reason string, args ...any) (PodList, error) {
		return PodList{}, &InvalidError{Key: AnnotationPIDPods, Value: truncate(v), Reason: fmt.Sprintf(reason, args...)}
	}
	if v == "" {
		return PodList{l: written}, nil
	}
	if len(v) > MaxPodListBytes {
		return invalid("%d bytes, more than the limit of %d", len(v), MaxPodListBytes)
	}
	entries := make([]PodUsage, 0, min(strings.Count(v, ",")+1, MaxListedPods))
	for entry := range strings.SplitSeq(v, ",") {
		k := len(entries)
		if k == MaxListedPods {
			return invalid("more than %d pods", MaxListedPods)
		}
		uid, pids, ok := strings.Cut(entry, "=")
		if !ok {
			return invalid("entry %d %s is not <pod UID>=<PIDs>", k+1, sample.Quote(entry))
		}
		if !IsPodUID(uid) {
			return invalid("entry %d: %s is not a pod UID (a lowercase canonical UUID)", k+1, sample.Quote(uid))
		}
		n, ok := parsePIDs(pids)
		if !ok {
			return invalid("entry %d: PIDs %s is not an integer in [0, %d] without sign or leading zeros", k+1, sample.Quote(pids), MaxPodPIDs)
		}
		if k > 0 && entries[k-1].PIDs < n {
			return invalid("entry %d (%d PIDs) is larger than the entry before it (%d): the list must be largest first", k+1, n, entries[k-1].PIDs)
		}
		entries = append(entries, PodUsage{UID: types.UID(uid), PIDs: n})
	}
	l := newPodList(entries)
	for k := 1; k < len(l.byUID); k++ {
		if a, b := l.entries[l.byUID[k-1]].UID, l.entries[l.byUID[k]].UID; a == b {
			return invalid("pod %s is listed twice", a)
		}
	}
	return PodList{l: l}, nil
}

// NewPodList returns the list the agent publishes from its measurements:
// the MaxListedPods pods with the most PIDs, largest first (ties by UID).
// Entries with an empty UID are dropped; figures are clamped to
// [0, MaxPodPIDs]. usage is not modified.
func NewPodList(usage []PodUsage) PodList {
	entries := make([]PodUsage, 0, len(usage))
	for _, u := range usage {
		if u.UID != "" {
			entries = append(entries, PodUsage{UID: u.UID, PIDs: min(max(u.PIDs, 0), MaxPodPIDs)})
		}
	}
	slices.SortFunc(entries, func(a, b PodUsage) int {
		if c := cmp.Compare(b.PIDs, a.PIDs); c != 0 {
			return c
		}
		return strings.Compare(string(a.UID), string(b.UID))
	})
	if len(entries) > MaxListedPods {
		entries = entries[:MaxListedPods:MaxListedPods]
	}
	if len(entries) == 0 {
		return PodList{}
	}
	return PodList{l: newPodList(entries)}
}

func newPodList(entries []PodUsage) *podList {
	l := &podList{entries: entries, byUID: make([]uint8, len(entries))}
	for i := range l.byUID {
		l.byUID[i] = uint8(i)
		l.total += entries[i].PIDs
	}
	slices.SortFunc(l.byUID, func(a, b uint8) int {
		return strings.Compare(string(entries[a].UID), string(entries[b].UID))
	})
	return l
}

// Complete reports whether the list names every pod that held PIDs at the
// sample. The node agent lists every pod it measured, largest first, and
// cuts the list at MaxListedPods; so a list that was written (the annotation
// is present, possibly empty) and holds fewer than MaxListedPods entries is
// complete. This is the one rule both the writer and the readers use:
//
//   - complete: a pod of the node that is not listed and was placed before
//     the sample held no PIDs at the sample (at most a rounding, 0 for a
//     reader); a pod placed after the sample counts its declared PIDs, as
//     EstimateUsed adds them;
//   - not complete (MaxListedPods entries): an unlisted pod held fewer PIDs
//     than Smallest;
//   - no list (the zero PodList: no annotation, or a malformed one): nothing
//     is known about any pod.
//
// The agent never publishes a list it knows to be incomplete below the
// bound: when the kubepods cgroup or one pod's pids.current cannot be read,
// it removes the annotation with its next write of the totals, so readers
// see no list and fall back to the pods' declared PIDs. An empty value thus
// always means that every pod was measured and none held PIDs.
func (p PodList) Complete() bool {
	return p.l != nil && p.l.err == nil && len(p.l.entries) < MaxListedPods
}

// Smallest is the smallest listed figure, and false when nothing is listed.
// A pod not on a full list held fewer PIDs than this.
func (p PodList) Smallest() (int64, bool) {
	if p.l == nil || len(p.l.entries) == 0 {
		return 0, false
	}
	return p.l.entries[len(p.l.entries)-1].PIDs, true
}

// Len is the number of pods listed.
func (p PodList) Len() int {
	if p.l == nil {
		return 0
	}
	return len(p.l.entries)
}

// Entries returns a copy of the entries, largest first.
func (p PodList) Entries() []PodUsage {
	if p.l == nil {
		return nil
	}
	return slices.Clone(p.l.entries)
}

// Lookup returns the PIDs of the pod with uid, and whether it is listed.
func (p PodList) Lookup(uid types.UID) (int64, bool) {
	i, ok := p.index(uid)
	if !ok {
		return 0, false
	}
	return p.l.entries[i].PIDs, true
}

func (p PodList) index(uid types.UID) (int, bool) {
	if p.l == nil || len(uid) != uidLen {
		return 0, false
	}
	k, ok := slices.BinarySearchFunc(p.l.byUID, uid, func(i uint8, uid types.UID) int {
		return strings.Compare(string(p.l.entries[i].UID), string(uid))
	})
	if !ok {
		return 0, false
	}
	return int(p.l.byUID[k]), true
}

// total is the sum of the listed figures, at most 2^27.
func (p PodList) total() int64 {
	if p.l == nil {
		return 0
	}
	return p.l.total
}

// Err reports why the node's AnnotationPIDPods was not used (an
// *InvalidError), or nil. ParseNode keeps the node's totals usable when only
// this annotation is malformed; callers log Err once per Node change.
func (p PodList) Err() error {
	if p.l == nil {
		return nil
	}
	return p.l.err
}

// String is the annotation value, the inverse of ParsePodList.
func (p PodList) String() string {
	if p.l == nil {
		return ""
	}
	var b strings.Builder
	b.Grow(len(p.l.entries) * (uidLen + 9))
	for i, e := range p.l.entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(string(e.UID))
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(e.PIDs, 10))
	}
	return b.String()
}

// IsPodUID reports whether s has the form AnnotationPIDPods accepts for a
// pod UID: the canonical lowercase form of a UUID, which is what the API
// server writes into metadata.uid.
func IsPodUID(s string) bool {
	if len(s) != uidLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

func parsePIDs(s string) (int64, bool) {
	if s == "" || len(s) > len("4194304") || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0')
	}
	return n, n <= MaxPodPIDs
}

// truncate keeps error messages (and the logs and Events they end up in)
// short whatever the annotation holds; a rune cut in two at the end is
// dropped, so the result is valid UTF-8 when v is.
func truncate(v string) string {
	const keep = 80
	if len(v) <= keep {
		return v
	}
	return strings.ToValidUTF8(v[:keep], "") + "…"
}
