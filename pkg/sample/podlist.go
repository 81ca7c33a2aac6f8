package sample

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PodFigure is one entry of a per-pod annotation (headroom.dev/pid-pods,
// headroom.dev/memory-pods): what one pod held at the node's sample.
type PodFigure struct {
	UID   types.UID
	Value int64
}

// PodListFormat is what one per-pod annotation holds: its key, the most
// entries it lists and the largest figure of one pod. Every Node watcher in
// the cluster receives the annotation with every Node update, so it is kept
// to a few dozen pods (see cmd/node-agent/README.md for the cost at 5,000
// nodes).
type PodListFormat struct {
	Key string
	// Unit names a figure in messages: "PIDs", "bytes".
	Unit string
	// MaxEntries is the most pods the annotation lists, at most 255. A pod
	// not on a full list held less than every listed one.
	MaxEntries int
	// MaxValue is the largest figure of one pod.
	MaxValue int64
}

// uidLen is the length of a pod UID as the API server generates it, an
// RFC 4122 UUID in its canonical form.
const uidLen = 36

// MaxBytes is the longest value the format allows:
// MaxEntries × "<UID>=<MaxValue>," less the last comma.
func (f PodListFormat) MaxBytes() int {
	return f.MaxEntries*(uidLen+len("=")+len(strconv.FormatInt(f.MaxValue, 10))+len(",")) - len(",")
}

// PodList is a parsed per-pod annotation. The zero PodList lists no pods,
// which is also what a node without the annotation has: nothing is
// subtracted from its reported use. A PodList is immutable and safe to
// share.
type PodList struct {
	l *podList
}

type podList struct {
	format  PodListFormat
	entries []PodFigure // largest first
	byUID   []uint8     // indices of entries, in UID order
	total   int64       // sum of the entries' figures
	err     error       // why the annotation was not used; entries empty
}

// Parse parses a value of the annotation strictly: "" (no pods) or up to
// MaxEntries comma-separated <UID>=<figure> entries, UID a lowercase
// canonical UUID listed once, the figure a base-10 integer in [0, MaxValue]
// without sign or leading zeros, largest first; MaxBytes at most. Anything
// else returns an *InvalidError naming the annotation, and a PodList that
// lists nothing and says why (Err). It never panics and does O(len(v)) work.
func (f PodListFormat) Parse(v string) (PodList, error) {
	invalid := func(reason string, args ...any) (PodList, error) {
		err := &InvalidError{Key: f.Key, Value: truncate(v), Reason: fmt.Sprintf(reason, args...)}
		return PodList{l: &podList{format: f, err: err}}, err
	}
	if v == "" {
		return PodList{l: &podList{format: f}}, nil
	}
	if len(v) > f.MaxBytes() {
		return invalid("%d bytes, more than the limit of %d", len(v), f.MaxBytes())
	}
	entries := make([]PodFigure, 0, min(strings.Count(v, ",")+1, f.MaxEntries))
	for entry := range strings.SplitSeq(v, ",") {
		k := len(entries)
		if k == f.MaxEntries {
			return invalid("more than %d pods", f.MaxEntries)
		}
		uid, figure, ok := strings.Cut(entry, "=")
		if !ok {
			return invalid("entry %d %s is not <pod UID>=<%s>", k+1, Quote(entry), f.Unit)
		}
		if !IsPodUID(uid) {
			return invalid("entry %d: %s is not a pod UID (a lowercase canonical UUID)", k+1, Quote(uid))
		}
		n, ok := f.parseFigure(figure)
		if !ok {
			return invalid("entry %d: %s %s is not an integer in [0, %d] without sign or leading zeros", k+1, f.Unit, Quote(figure), f.MaxValue)
		}
		if k > 0 && entries[k-1].Value < n {
			return invalid("entry %d (%d %s) is larger than the entry before it (%d): the list must be largest first", k+1, n, f.Unit, entries[k-1].Value)
		}
		entries = append(entries, PodFigure{UID: types.UID(uid), Value: n})
	}
	l := f.newPodList(entries)
	for k := 1; k < len(l.byUID); k++ {
		if a, b := l.entries[l.byUID[k-1]].UID, l.entries[l.byUID[k]].UID; a == b {
			return invalid("pod %s is listed twice", a)
		}
	}
	return PodList{l: l}, nil
}

// New returns the list a node agent publishes from its measurements: the
// MaxEntries pods with the largest figures, largest first (ties by UID).
// Entries with an empty UID are dropped; figures are clamped to
// [0, MaxValue]. figures is not modified. Nothing measured gives the zero
// PodList.
func (f PodListFormat) New(figures []PodFigure) PodList {
	entries := make([]PodFigure, 0, len(figures))
	for _, u := range figures {
		if u.UID != "" {
			entries = append(entries, PodFigure{UID: u.UID, Value: min(max(u.Value, 0), f.MaxValue)})
		}
	}
	slices.SortFunc(entries, func(a, b PodFigure) int {
		return cmp.Or(cmp.Compare(b.Value, a.Value), strings.Compare(string(a.UID), string(b.UID)))
	})
	if len(entries) > f.MaxEntries {
		entries = entries[:f.MaxEntries:f.MaxEntries]
	}
	if len(entries) == 0 {
		return PodList{}
	}
	return PodList{l: f.newPodList(entries)}
}

func (f PodListFormat) newPodList(entries []PodFigure) *podList {
	l := &podList{format: f, entries: entries, byUID: make([]uint8, len(entries))}
	for i := range l.byUID {
		l.byUID[i] = uint8(i)
		l.total += entries[i].Value // at most 255 × MaxValue: callers keep MaxValue ≤ 2^55
	}
	slices.SortFunc(l.byUID, func(a, b uint8) int {
		return strings.Compare(string(entries[a].UID), string(entries[b].UID))
	})
	return l
}

// Complete reports whether the list names every pod that held anything at
// the sample. A node agent lists every pod it measured, largest first, and
// cuts the list at MaxEntries; so a list that was written (the annotation is
// present, possibly empty) and holds fewer than MaxEntries entries is
// complete. This is the one rule writers and readers use:
//
//   - complete: a pod of the node that is not listed and was placed before
//     the sample held nothing at the sample (at most a rounding, 0 for a
//     reader); a pod placed after the sample counts what it declares;
//   - not complete (MaxEntries entries): an unlisted pod held less than
//     Smallest;
//   - no list (the zero PodList: no annotation, or a malformed one): nothing
//     is known about any pod.
//
// A node agent never publishes a list it knows to be incomplete below the
// bound: when a pod's figure cannot be read it removes the annotation with
// its next write of the totals, so readers see no list and fall back to the
// pods' declarations. An empty value thus always means that every pod was
// measured and none held anything.
func (p PodList) Complete() bool {
	return p.l != nil && p.l.err == nil && len(p.l.entries) < p.l.format.MaxEntries
}

// Smallest is the smallest listed figure, and false when nothing is listed.
// A pod not on a full list held less than this.
func (p PodList) Smallest() (int64, bool) {
	if p.l == nil || len(p.l.entries) == 0 {
		return 0, false
	}
	return p.l.entries[len(p.l.entries)-1].Value, true
}

// Len is the number of pods listed.
func (p PodList) Len() int {
	if p.l == nil {
		return 0
	}
	return len(p.l.entries)
}

// Entries returns a copy of the entries, largest first.
func (p PodList) Entries() []PodFigure {
	if p.l == nil {
		return nil
	}
	return slices.Clone(p.l.entries)
}

// Lookup returns the figure of the pod with uid, and whether it is listed.
func (p PodList) Lookup(uid types.UID) (int64, bool) {
	if p.l == nil || len(uid) != uidLen {
		return 0, false
	}
	k, ok := slices.BinarySearchFunc(p.l.byUID, uid, func(i uint8, uid types.UID) int {
		return strings.Compare(string(p.l.entries[i].UID), string(uid))
	})
	if !ok {
		return 0, false
	}
	return p.l.entries[p.l.byUID[k]].Value, true
}

// LookupPod returns the figure of pod, and whether it is listed: under its
// UID, or, for the mirror pod of a static pod, under the static pod's UID
// (ListUID), the one its cgroup is named by.
func (p PodList) LookupPod(pod *corev1.Pod) (int64, bool) {
	if pod == nil {
		return 0, false
	}
	return p.Lookup(ListUID(pod))
}

// ListUID is the UID under which a node agent lists pod: its UID, or, for
// the mirror pod of a static pod (the kubelet's kubernetes.io/config.mirror
// annotation), the static pod's own UID, which the annotation holds and
// which names the pod's cgroup (StaticPodUID puts it in the canonical form
// of a UUID). The API gives a mirror pod a UID of its own, which no cgroup
// bears.
func ListUID(pod *corev1.Pod) types.UID {
	if v, ok := pod.Annotations[corev1.MirrorPodAnnotationKey]; ok {
		if uid, ok := StaticPodUID(v); ok {
			return uid
		}
	}
	return pod.UID
}

// StaticPodUID returns the UID under which a node agent lists a pod the
// kubelet knows by kubeletUID, and whether it can list it at all: a
// canonical UUID as it is; a static pod's UID, which the kubelet derives
// from its manifest as 32 lowercase hex digits (an MD5 sum, pkg/kubelet/
// config), as the UUID those digits spell (8-4-4-4-12), so that per-pod
// lists keep one form of UID.
func StaticPodUID(kubeletUID string) (types.UID, bool) {
	if IsPodUID(kubeletUID) {
		return types.UID(kubeletUID), true
	}
	if len(kubeletUID) != 32 {
		return "", false
	}
	for i := 0; i < len(kubeletUID); i++ {
		if c := kubeletUID[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", false
		}
	}
	h := kubeletUID
	return types.UID(h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]), true
}

// Total is the sum of the listed figures.
func (p PodList) Total() int64 {
	if p.l == nil {
		return 0
	}
	return p.l.total
}

// Err reports why the node's annotation was not used (an *InvalidError), or
// nil. A node's totals stay usable when only its per-pod list is malformed;
// callers log Err once per Node change.
func (p PodList) Err() error {
	if p.l == nil {
		return nil
	}
	return p.l.err
}

// String is the annotation value, the inverse of Parse.
func (p PodList) String() string {
	if p.l == nil {
		return ""
	}
	var b strings.Builder
	b.Grow(len(p.l.entries) * (uidLen + 12))
	for i, e := range p.l.entries {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(string(e.UID))
		b.WriteByte('=')
		b.WriteString(strconv.FormatInt(e.Value, 10))
	}
	return b.String()
}

// IsPodUID reports whether s has the form a per-pod annotation accepts for
// a pod UID: the canonical lowercase form of a UUID, which is what the API
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

func (f PodListFormat) parseFigure(s string) (int64, bool) {
	if s == "" || len(s) > len(strconv.FormatInt(f.MaxValue, 10)) || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
		n = n*10 + int64(s[i]-'0') // at most 19 digits of a MaxValue ≤ MaxInt64/10
	}
	return n, n <= f.MaxValue
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

// Usage is a node's estimated use of a figure.
type Usage struct {
	// Held is what the node's pods and processes hold now, as best known.
	// Terminating pods count: on a real node they hold what they hold until
	// the kubelet has stopped them (up to their grace period, longer for a
	// pod stuck terminating). This is the figure a new pod must fit beside.
	Held int64
	// Leaving is the part of Held that terminating pods hold: on its way
	// out, so a relief already under way.
	Leaving int64
}

// Settled is the use once the terminating pods are gone: what a descheduler
// plans from, so that it never evicts again for what is already being freed.
func (u Usage) Settled() int64 { return max(u.Held-u.Leaving, 0) }

// Tally is the one estimate of a node's use every figure shares:
//
//	the reported use
//	− the listed figures of pods that have left the node since the sample
//	  (not counted) or have terminated
//	+ what the node's pods the sample cannot hold contribute (Add)
//
// Count each pod bound or assumed on the node now once: Listed for a pod the
// list names (it was measured, so it never adds its declaration, even when
// it looks placed after the sample), Add with its contribution otherwise.
// What Add counts depends on the tally's Basis. It does not allocate.
type Tally struct {
	list    PodList
	basis   Basis
	staying int64 // listed figures of pods still on the node, not terminated
	added   int64 // contributions of pods the sample cannot hold
	leaving int64 // of staying and added, what terminating pods hold
}

// Basis is what an estimate counts a pod the sample cannot hold at (one
// placed after it, or not started by then: InSample).
type Basis uint8

const (
	// ForPlacement counts what the pod declares: what it will hold, so that
	// a burst placed within one reporting interval does not all land on one
	// node. The scheduler plugins' Filter and Score and the descheduler's
	// room on other nodes count by it.
	ForPlacement Basis = iota
	// ForPressure counts nothing: a declaration is a promise, not a use,
	// and a pod that holds nothing raises no pressure. The figure that
	// triggers evictions counts by it: what the sample measured, less what
	// has left since.
	ForPressure
)

// NewTally starts the tally, on basis, of a node whose sample listed list.
func NewTally(list PodList, basis Basis) Tally { return Tally{list: list, basis: basis} }

// Listed counts pod when the list names it and reports whether it did.
func (t *Tally) Listed(pod *corev1.Pod) bool {
	n, ok := t.list.LookupPod(pod)
	if !ok {
		return false
	}
	if !Terminal(pod) {
		t.staying += n
		if pod.DeletionTimestamp != nil {
			t.leaving += n
		}
	}
	return true
}

// Add counts what an unlisted pod contributes (0 when the sample holds it);
// on the ForPressure basis nothing.
func (t *Tally) Add(pod *corev1.Pod, contribution int64) {
	if t.basis == ForPressure {
		return
	}
	t.added = SaturatingAdd(t.added, contribution)
	if pod.DeletionTimestamp != nil {
		t.leaving = SaturatingAdd(t.leaving, contribution)
	}
}

// Usage is reported − (listed − staying) + added, never negative, saturating
// at math.MaxInt64.
func (t *Tally) Usage(reported int64) Usage {
	used := max(reported-t.list.Total()+t.staying, 0)
	return Usage{Held: SaturatingAdd(used, t.added), Leaving: t.leaving}
}

// Terminal reports whether the pod's processes are gone, so that it holds
// nothing any more as the kernel sees it: it has ended (Succeeded or
// Failed), or it is terminating and the kubelet reports every one of its
// containers terminated and none running (between its containers' exit and
// the status that ends it, or its removal). A terminating pod whose
// processes still run holds all it held: the kernel frees its memory, PIDs
// and address only when they exit, up to its grace period and beyond for a
// pod stuck terminating.
func Terminal(pod *corev1.Pod) bool {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return true
	}
	return pod.DeletionTimestamp != nil && exited(pod)
}

// exited reports whether the pod's status names its containers, every
// regular one terminated, and no container of any kind running.
func exited(pod *corev1.Pod) bool {
	st := &pod.Status
	if len(st.ContainerStatuses) == 0 {
		return false
	}
	for _, cs := range st.ContainerStatuses {
		if cs.State.Terminated == nil || cs.State.Running != nil {
			return false
		}
	}
	for _, list := range [][]corev1.ContainerStatus{st.InitContainerStatuses, st.EphemeralContainerStatuses} {
		for _, cs := range list {
			if cs.State.Running != nil {
				return false
			}
		}
	}
	return true
}

// SaturatingAdd returns a + b for non-negative operands, clamped at
// math.MaxInt64 instead of wrapping around. Negative operands count as 0.
func SaturatingAdd(a, b int64) int64 {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// PodFigureOf is what pod held at the sample taken at sampledAt, as best
// known from list, and whether list measured it:
//
//   - listed: its measured figure;
//   - not in the sample (InSample: placed after it, or not started by
//     then): what the estimate on basis counts it at: declared
//     (ForPlacement) or 0 (ForPressure);
//   - otherwise, with a complete list: 0 (it held nothing at the sample);
//     with a full list: declared, at most the smallest listed figure (a
//     declaration never outranks what the sample measured); without a
//     list: declared.
func PodFigureOf(list PodList, sampledAt time.Time, pod *corev1.Pod, declared int64, basis Basis) (int64, bool) {
	if n, ok := list.LookupPod(pod); ok {
		return n, true
	}
	switch {
	case !InSample(pod, sampledAt):
		if basis == ForPressure {
			return 0, false
		}
		return declared, false
	case list.Complete():
		return 0, false
	}
	if smallest, ok := list.Smallest(); ok {
		return min(declared, smallest), false
	}
	return declared, false
}
