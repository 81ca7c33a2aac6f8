package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/component-base/metrics/testutil"
	"k8s.io/klog/v2/ktesting"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/headroom-k8s/headroom/pkg/cniipam"
	"github.com/headroom-k8s/headroom/pkg/memstats"
	"github.com/headroom-k8s/headroom/pkg/pidstats"
)

var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

const (
	podA = "0a1b2c3d-0000-4000-8000-00000000000a"
	podB = "0a1b2c3d-0000-4000-8000-00000000000b"
	podC = "0a1b2c3d-0000-4000-8000-00000000000c"
)

// fakeProc is a /proc whose numbers the test sets.
type fakeProc struct {
	sample ProcSample
	err    error
	reads  int
}

func (f *fakeProc) read(string) (ProcSample, error) {
	f.reads++
	return f.sample, f.err
}

type harness struct {
	t      *testing.T
	ctx    context.Context
	client *fake.Clientset
	clock  *testingclock.FakeClock
	proc   *fakeProc
	r      *Agent
	// cgroups is the cgroup root: a v2 tree with the cgroupfs driver.
	cgroups string
	// patchErrs fail the next patches, one each, before they reach the tracker.
	patchErrs []error
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.NodeName = "node-1"
	cfg.ReservedPIDs = 1000
	cfg.MaxIntervalJitter = 0
	cfg.Backoff = wait.Backoff{Duration: 10 * time.Second, Factor: 2, Steps: math.MaxInt32, Cap: time.Minute}
	return cfg
}

func newHarness(t *testing.T, cfg Config, node *corev1.Node, opts ...Option) *harness {
	t.Helper()
	if node == nil {
		node = &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: cfg.NodeName, Annotations: map[string]string{"keep": "me"}}}
	}
	_, ctx := ktesting.NewTestContext(t)
	if cfg.CgroupRoot == DefaultCgroupRoot {
		cfg.CgroupRoot = t.TempDir()
		if err := os.MkdirAll(filepath.Join(cfg.CgroupRoot, "kubepods", "burstable"), 0o755); err != nil {
			t.Fatal(err)
		}
		// The v2 root cgroup: 3 GiB working set (anon 2 GiB + file 1.5 GiB
		// − inactive file 0.5 GiB).
		writeFile(t, filepath.Join(cfg.CgroupRoot, memoryStat), "anon 2147483648\nfile 1610612736\ninactive_file 536870912\nactive_file 1073741824\n")
	}
	if cfg.ProcRoot == DefaultProcRoot {
		// The memory probe's capacity: 16 GiB. (The PID probe reads a fake.)
		cfg.ProcRoot = t.TempDir()
		writeFile(t, filepath.Join(cfg.ProcRoot, "meminfo"), "MemTotal:       16777216 kB\nMemFree:         1000000 kB\n")
	}
	if cfg.CNIConfDir == cniipam.DefaultConfDir {
		cfg.CNIConfDir = t.TempDir() // no pod network: no pod-IP figures
	}
	h := &harness{
		cgroups: cfg.CgroupRoot,
		t:       t,
		ctx:     ctx,
		client:  fake.NewClientset(node),
		clock:   testingclock.NewFakeClock(t0),
		proc:    &fakeProc{sample: ProcSample{PIDMax: 32768, ThreadsMax: 192729, Capacity: 32768, Used: 5000}},
	}
	h.client.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		if len(h.patchErrs) == 0 {
			return false, nil, nil
		}
		err := h.patchErrs[0]
		h.patchErrs = h.patchErrs[1:]
		return true, nil, err
	})
	r, err := New(h.client, cfg, append([]Option{WithClock(h.clock), WithProcReader(h.proc.read), WithRand(func() float64 { return 0.5 })}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	h.r = r
	return h
}

// setPodPIDs puts a burstable pod's cgroup with pids.current = n into the
// tree; one that holds no memory, unless setPodMemory said otherwise.
func (h *harness) setPodPIDs(uid string, n int) {
	h.t.Helper()
	dir := filepath.Join(h.cgroups, "kubepods", "burstable", "pod"+uid)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.current"), []byte(strconv.Itoa(n)+"\n"), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, memoryCurrentV2)); err != nil {
		h.setPodMemory(uid, 0, 0)
	}
}

// setPodMemory sets a burstable pod's memory.current and inactive_file.
func (h *harness) setPodMemory(uid string, current, inactiveFile int64) {
	h.t.Helper()
	dir := filepath.Join(h.cgroups, "kubepods", "burstable", "pod"+uid)
	writeFile(h.t, filepath.Join(dir, memoryCurrentV2), strconv.FormatInt(current, 10)+"\n")
	writeFile(h.t, filepath.Join(dir, memoryStat), fmt.Sprintf("anon %d\nfile %d\ninactive_file %d\n", current, 0, inactiveFile))
	if _, err := os.Stat(filepath.Join(dir, pidsCurrent)); err != nil {
		writeFile(h.t, filepath.Join(dir, pidsCurrent), "1\n")
	}
}

// setNodeMemory sets the root cgroup's working set (v2: anon, no file).
func (h *harness) setNodeMemory(workingSet int64) {
	h.t.Helper()
	writeFile(h.t, filepath.Join(h.cgroups, memoryStat), fmt.Sprintf("anon %d\nfile 0\ninactive_file 0\n", workingSet))
}

// patchedKeys returns the annotation keys of patch i.
func (h *harness) patched(i int) map[string]string {
	h.t.Helper()
	var body struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(h.patches()[i].GetPatch(), &body); err != nil {
		h.t.Fatal(err)
	}
	return body.Metadata.Annotations
}

func (h *harness) patches() []k8stesting.PatchAction {
	var out []k8stesting.PatchAction
	for _, a := range h.client.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok && a.GetVerb() == "patch" {
			out = append(out, p)
		}
	}
	return out
}

func (h *harness) node() *corev1.Node {
	h.t.Helper()
	n, err := h.client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("nodes"), "", "node-1")
	if err != nil {
		h.t.Fatal(err)
	}
	return n.(*corev1.Node)
}

// tick advances the clock by d and runs one tick.
func (h *harness) tick(d time.Duration) error {
	h.clock.Step(d)
	return h.r.Tick(h.ctx)
}

func (h *harness) wantPatches(n int) {
	h.t.Helper()
	if got := len(h.patches()); got != n {
		h.t.Fatalf("%d patch requests so far, want %d", got, n)
	}
}

func (h *harness) wantUsed(used string) {
	h.t.Helper()
	if got := h.node().Annotations[pidstats.AnnotationUsed]; got != used {
		h.t.Fatalf("node's %s = %q, want %q", pidstats.AnnotationUsed, got, used)
	}
}

func TestTickWritesEveryProbeInOnePatch(t *testing.T) {
	h := newHarness(t, testConfig(), nil)
	h.setPodPIDs(podA, 300)
	h.setPodPIDs(podB, 1200)
	h.setPodMemory(podA, 700<<20, 100<<20) // 600 MiB working set
	h.setPodMemory(podB, 50<<20, 60<<20)   // inactive file above usage: 0
	if err := h.r.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	patches := h.patches()
	if len(patches) != 1 {
		t.Fatalf("want 1 patch, got %d (actions %v)", len(patches), h.client.Actions())
	}
	p := patches[0]
	if p.GetName() != "node-1" || p.GetPatchType() != types.MergePatchType {
		t.Errorf("patch of %q with type %s", p.GetName(), p.GetPatchType())
	}
	var body struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		pidstats.AnnotationCapacity:  "32768",
		pidstats.AnnotationReserved:  "1000",
		pidstats.AnnotationUsed:      "5000",
		pidstats.AnnotationSampledAt: "2026-05-01T12:00:00Z",
		pidstats.AnnotationPIDPods:   podB + "=1200," + podA + "=300",
		memstats.AnnotationUsed:      "3221225472",
		memstats.AnnotationSampledAt: "2026-05-01T12:00:00Z",
		memstats.AnnotationPods:      podA + "=629145600",
	}
	if len(body.Metadata.Annotations) != len(want) {
		t.Errorf("patch annotations %v, want exactly %v", body.Metadata.Annotations, want)
	}
	for k, v := range want {
		if body.Metadata.Annotations[k] != v {
			t.Errorf("patch %s = %q, want %q", k, body.Metadata.Annotations[k], v)
		}
	}
	// The merge patch leaves the node's other annotations alone, and what it
	// wrote is what the scheduler and descheduler will read.
	ann := h.node().Annotations
	if ann["keep"] != "me" {
		t.Errorf("unrelated annotation lost: %v", ann)
	}
	s, err := pidstats.ParseNode(ann, t0.Add(time.Second), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if s.Capacity != 32768 || s.Reserved != 1000 || s.Used != 5000 || !s.SampledAt.Equal(t0) || s.Free() != 26768 {
		t.Errorf("node stats %+v (free %d)", s, s.Free())
	}
	if n, ok := s.Pods.Lookup(podB); !ok || n != 1200 || s.Pods.Len() != 2 {
		t.Errorf("per-pod figures %q", s.Pods)
	}
}

func TestTickPodListSharesTheHysteresis(t *testing.T) {
	h := newHarness(t, testConfig(), nil)
	h.setPodPIDs(podA, 300)
	h.setPodPIDs(podB, 1200)
	if err := h.r.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	// Small pods come and go, a big one moves by no more than 500: no write.
	h.setPodPIDs(podC, 499)
	h.setPodPIDs(podB, 1700)
	if err := os.RemoveAll(filepath.Join(h.cgroups, "kubepods", "burstable", "pod"+podA)); err != nil {
		t.Fatal(err)
	}
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(1)
	// The big one moves by 501: the list and the totals of the same sample
	// are written together.
	h.setPodPIDs(podB, 1701)
	h.proc.sample.Used = 5100
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(2)
	got := h.patched(1)
	if got[pidstats.AnnotationPIDPods] != podB+"=1701,"+podC+"=499" || got[pidstats.AnnotationUsed] != "5100" ||
		got[pidstats.AnnotationSampledAt] != "2026-05-01T12:00:20Z" {
		t.Errorf("second patch %v", got)
	}
}

func TestTickHysteresisAndMaxInterval(t *testing.T) {
	h := newHarness(t, testConfig(), nil)
	if err := h.r.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(1)

	// Threshold: max(500, 2% of 31768) = 636.
	for _, used := range []int64{5100, 4500, 5636, 4364} {
		h.proc.sample.Used = used
		if err := h.tick(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	h.wantPatches(1)
	h.wantUsed("5000")

	h.proc.sample.Used = 5637
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(2)
	h.wantUsed("5637")
	lastWrite := h.clock.Now()

	// Steady: the next write comes when the max interval has passed since
	// the sample last written, not before (with jitter disabled).
	h.proc.sample.Used = 5640
	for h.clock.Now().Add(10 * time.Second).Before(lastWrite.Add(5 * time.Minute)) {
		if err := h.tick(10 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	h.wantPatches(2)
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(3)
	h.wantUsed("5640")
	if got := h.node().Annotations[pidstats.AnnotationSampledAt]; got != lastWrite.Add(5*time.Minute).Format(time.RFC3339) {
		t.Errorf("sampled-at %s, want %s", got, lastWrite.Add(5*time.Minute))
	}
}

func TestTickWritesWhenCapacityOrReservedChange(t *testing.T) {
	h := newHarness(t, testConfig(), nil)
	if err := h.r.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.proc.sample.Capacity = 65536
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(2)
	if got := h.node().Annotations[pidstats.AnnotationCapacity]; got != "65536" {
		t.Errorf("capacity annotation %q", got)
	}

	// A restarted agent with a new reservation writes even though it finds
	// fresh annotations on the node.
	cfg := testConfig()
	cfg.ReservedPIDs = 2000
	h2 := newHarness(t, cfg, h.node())
	h2.clock.SetTime(h.clock.Now().Add(10 * time.Second))
	h2.proc.sample.Capacity = 65536
	if err := h2.r.adopt(h2.ctx); err != nil {
		t.Fatal(err)
	}
	if err := h2.r.Tick(h2.ctx); err != nil {
		t.Fatal(err)
	}
	h2.wantPatches(1)
	if got := h2.node().Annotations[pidstats.AnnotationReserved]; got != "2000" {
		t.Errorf("reserved annotation %q", got)
	}
}

func TestTickBacksOffOnAPIErrorsAndRetries(t *testing.T) {
	h := newHarness(t, testConfig(), nil)
	h.patchErrs = []error{
		apierrors.NewServiceUnavailable("etcd is sad"),
		apierrors.NewTooManyRequests("slow down", 1),
	}
	// t0: first attempt fails; the next attempt waits 10 s.
	err := h.r.Tick(h.ctx)
	if err == nil || !strings.Contains(err.Error(), "etcd is sad") || !strings.Contains(err.Error(), "next attempt in 10s") {
		t.Fatalf("err = %v", err)
	}
	h.wantPatches(1)
	// t0+10s: second attempt fails; the next waits 20 s.
	if err := h.tick(10 * time.Second); err == nil || !strings.Contains(err.Error(), "failure 2 in a row, next attempt in 20s") {
		t.Fatalf("err = %v", err)
	}
	h.wantPatches(2)
	// t0+20s: backing off, no request, although a write is due.
	h.proc.sample.Used = 5100
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(2)
	// t0+30s: the retry succeeds with the newest sample, not the first one.
	h.proc.sample.Used = 5200
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(3)
	h.wantUsed("5200")
	if got := h.node().Annotations[pidstats.AnnotationSampledAt]; got != "2026-05-01T12:00:30Z" {
		t.Errorf("sampled-at %s", got)
	}
	// Success resets the backoff: the next failure waits 10 s again.
	h.patchErrs = []error{errors.New("connection refused")}
	h.proc.sample.Used = 9000
	if err := h.tick(10 * time.Second); err == nil || !strings.Contains(err.Error(), "failure 1 in a row, next attempt in 10s") {
		t.Fatalf("err = %v", err)
	}
	if err := h.tick(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	h.wantPatches(5)
	h.wantUsed("9000")
}

func TestDefaultBackoffIsJitteredAndCapped(t *testing.T) {
	cfg := testConfig()
	cfg.Backoff = DefaultBackoff()
	h := newHarness(t, cfg, nil)
	h.patchErrs = make([]error, 100)
	for i := range h.patchErrs {
		h.patchErrs[i] = apierrors.NewServiceUnavailable("down")
	}
	var delays []time.Duration
	for range 12 {
		before := len(h.patches())
		if err := h.r.Tick(h.ctx); err == nil {
			t.Fatal("want error")
		}
		if len(h.patches()) != before+1 {
			t.Fatal("no attempt although the backoff had passed")
		}
		delays = append(delays, h.r.retryAt.Sub(h.clock.Now()))
		h.clock.SetTime(h.r.retryAt)
	}
	base := 10 * time.Second
	for i, d := range delays {
		if d < base || d > base+base/2 {
			t.Errorf("delay %d = %s, want within [%s, %s]", i, d, base, base+base/2)
		}
		base = min(2*base, 5*time.Minute)
	}
}

func TestFailingProbeLeavesItsAnnotationsAlone(t *testing.T) {
	t.Run("the PID probe fails from the start", func(t *testing.T) {
		h := newHarness(t, testConfig(), nil)
		h.setPodPIDs(podA, 300)
		h.proc.err = errors.New("/host/proc/loadavg: garbage")
		if err := h.r.Tick(h.ctx); err == nil || !strings.Contains(err.Error(), "probe pids") || !strings.Contains(err.Error(), "garbage") {
			t.Fatalf("err = %v", err)
		}
		// The per-pod list is one sample with the totals: without them it
		// is not written either. The memory figures are written alone.
		h.wantPatches(1)
		for k := range h.patched(0) {
			if strings.HasPrefix(k, "headroom.dev/pid-") {
				t.Errorf("patch writes %s", k)
			}
		}
		if got := h.patched(0)[memstats.AnnotationUsed]; got != "3221225472" {
			t.Errorf("memory-used %q", got)
		}
		if got, err := testutil.GetCounterMetricValue(h.r.Metrics().probeErrors.WithLabelValues(PIDProbeName)); err != nil || got != 1 {
			t.Errorf("probe errors of %s = %v, want 1", PIDProbeName, got)
		}
	})
	t.Run("a written PID sample ages with its per-pod list while the probe fails", func(t *testing.T) {
		h := newHarness(t, testConfig(), nil)
		h.setPodPIDs(podA, 300)
		if err := h.r.Tick(h.ctx); err != nil {
			t.Fatal(err)
		}
		h.proc.err = errors.New("garbage")
		// Pod A grows well past the hysteresis and pod B arrives: a list
		// naming B next to the old total would count B twice for readers.
		h.setPodPIDs(podA, 3000)
		h.setPodPIDs(podB, 1200)
		for range 60 { // 10 minutes, well past the max interval
			if err := h.tick(10 * time.Second); err == nil || !strings.Contains(err.Error(), "garbage") {
				t.Fatalf("err = %v", err)
			}
		}
		// Only the memory figures' forced writes, at 5 and 10 minutes.
		h.wantPatches(3)
		for _, i := range []int{1, 2} {
			if _, ok := h.patched(i)[pidstats.AnnotationPIDPods]; ok {
				t.Errorf("patch %d writes pid-pods without the PID totals: %v", i, h.patched(i))
			}
		}
		h.wantUsed("5000")
		if got := h.node().Annotations[pidstats.AnnotationPIDPods]; got != podA+"=300" {
			t.Errorf("pid-pods = %q, want the list of the written sample", got)
		}
		if age := h.r.Metrics().lastWrittenSampleAge(); age != 600 {
			t.Errorf("last written sample age %vs, want 600s: the PID sample's", age)
		}
		// The annotation ages, so readers see the agent is not keeping up.
		if _, err := pidstats.ParseNode(h.node().Annotations, h.clock.Now(), 6*time.Minute); !pidstats.IsStale(err) {
			t.Errorf("want stale annotations, got %v", err)
		}
		// Once the totals are back, the list comes with them.
		h.proc.err = nil
		if err := h.tick(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		h.wantPatches(4)
		if got := h.patched(3); got[pidstats.AnnotationPIDPods] != podA+"=3000,"+podB+"=1200" || got[pidstats.AnnotationUsed] != "5000" ||
			got[pidstats.AnnotationSampledAt] != "2026-05-01T12:10:10Z" {
			t.Errorf("patch %v", got)
		}
	})
	t.Run("unreadable cgroups withdraw the list with the next totals", func(t *testing.T) {
		h := newHarness(t, testConfig(), nil)
		h.setPodPIDs(podB, 1200)
		if err := h.r.Tick(h.ctx); err != nil {
			t.Fatal(err)
		}
		if err := os.RemoveAll(filepath.Join(h.cgroups, "kubepods")); err != nil {
			t.Fatal(err)
		}
		// Within the hysteresis nothing is written: the old list stays
		// next to the totals it was taken with.
		if err := h.tick(10 * time.Second); err == nil || !strings.Contains(err.Error(), "no kubepods cgroup") {
			t.Fatalf("err = %v", err)
		}
		h.wantPatches(1)
		// Pod B stopped: its PIDs left the total, and a list still naming
		// it would subtract them again; an empty list would tell readers
		// that no pod holds PIDs. The list is removed.
		h.proc.sample.Used = 3800
		if err := h.tick(10 * time.Second); err == nil || !strings.Contains(err.Error(), "no kubepods cgroup") {
			t.Fatalf("err = %v", err)
		}
		h.wantPatches(2)
		h.wantUsed("3800")
		h.wantPodListRemoved(1)
		// Back again: the list is written with the next tick's totals.
		h.setPodPIDs(podA, 20)
		if err := (os.MkdirAll(filepath.Join(h.cgroups, "kubepods", "burstable"), 0o755)); err != nil {
			t.Fatal(err)
		}
		if err := h.tick(10 * time.Second); err != nil {
			t.Fatal(err)
		}
		h.wantPatches(3)
		if got := h.patched(2); got[pidstats.AnnotationPIDPods] != podA+"=20" || got[pidstats.AnnotationUsed] != "3800" {
			t.Errorf("patch %v", got)
		}
	})
	t.Run("one unreadable pod withdraws the list", func(t *testing.T) {
		h := newHarness(t, testConfig(), nil)
		h.setPodPIDs(podA, 300)
		h.setPodPIDs(podB, 1200)
		if err := h.r.Tick(h.ctx); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(h.cgroups, "kubepods", "burstable", "pod"+podB, "pids.current"), []byte("lots\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		h.proc.sample.Used = 9000
		if err := h.tick(10 * time.Second); err == nil || !strings.Contains(err.Error(), "lots") {
			t.Fatalf("err = %v", err)
		}
		h.wantPatches(2)
		h.wantUsed("9000")
		h.wantPodListRemoved(1)
		// Readers see no list, not a complete one without pod B.
		s, err := pidstats.ParseNode(h.node().Annotations, h.clock.Now(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if s.Pods.Complete() || s.Pods.Len() != 0 {
			t.Errorf("readers see the list %q (complete %v), want none", s.Pods, s.Pods.Complete())
		}
	})
}

// wantPodListRemoved checks that patch i removes pid-pods (sets it to null)
// and that the node no longer carries it.
func (h *harness) wantPodListRemoved(i int) {
	h.t.Helper()
	var body struct {
		Metadata struct {
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(h.patches()[i].GetPatch(), &body); err != nil {
		h.t.Fatal(err)
	}
	if v, ok := body.Metadata.Annotations[pidstats.AnnotationPIDPods]; !ok || v != nil {
		h.t.Errorf("patch %d: %s", i, h.patches()[i].GetPatch())
	}
	if v, ok := h.node().Annotations[pidstats.AnnotationPIDPods]; ok {
		h.t.Errorf("node still carries %s=%q", pidstats.AnnotationPIDPods, v)
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t, testConfig(), nil)
	if err := h.r.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	h.patchErrs = []error{errors.New("connection refused")}
	h.proc.sample.Used = 9000
	if err := h.tick(10 * time.Second); err == nil {
		t.Fatal("want error")
	}
	h.clock.Step(7 * time.Second)
	m := h.r.Metrics()
	want := `
# HELP headroom_node_agent_last_written_sample_age_seconds [ALPHA] Age of the oldest sample in the node's annotations as last written (or adopted at start); NaN before any.
# TYPE headroom_node_agent_last_written_sample_age_seconds gauge
headroom_node_agent_last_written_sample_age_seconds 17
# HELP headroom_node_agent_memory_capacity_bytes [ALPHA] The node's memory in bytes (MemTotal) at the latest sample, which the memory hysteresis is a percentage of.
# TYPE headroom_node_agent_memory_capacity_bytes gauge
headroom_node_agent_memory_capacity_bytes 1.7179869184e+10
# HELP headroom_node_agent_memory_used_bytes [ALPHA] The node's memory working set in bytes at the latest sample, as headroom.dev/memory-used carries it.
# TYPE headroom_node_agent_memory_used_bytes gauge
headroom_node_agent_memory_used_bytes 3.221225472e+09
# HELP headroom_node_agent_pids_capacity [ALPHA] PIDs the node can hold at the latest sample (headroom.dev/pid-capacity).
# TYPE headroom_node_agent_pids_capacity gauge
headroom_node_agent_pids_capacity 32768
# HELP headroom_node_agent_pids_reserved [ALPHA] PIDs reserved for the system and the kubelet (headroom.dev/pid-reserved).
# TYPE headroom_node_agent_pids_reserved gauge
headroom_node_agent_pids_reserved 1000
# HELP headroom_node_agent_pids_used [ALPHA] PIDs (threads) in use on the node at the latest sample, as headroom.dev/pid-used carries it.
# TYPE headroom_node_agent_pids_used gauge
headroom_node_agent_pids_used 9000
# HELP headroom_node_agent_samples_total [ALPHA] Samples taken, by probe, whether or not they succeeded.
# TYPE headroom_node_agent_samples_total counter
headroom_node_agent_samples_total{probe="ips"} 2
headroom_node_agent_samples_total{probe="memory"} 2
headroom_node_agent_samples_total{probe="memory-pods"} 2
headroom_node_agent_samples_total{probe="pid-pods"} 2
headroom_node_agent_samples_total{probe="pids"} 2
headroom_node_agent_samples_total{probe="swap-pods"} 2
# HELP headroom_node_agent_write_failures_total [ALPHA] Node annotation patches that failed.
# TYPE headroom_node_agent_write_failures_total counter
headroom_node_agent_write_failures_total 1
# HELP headroom_node_agent_writes_total [ALPHA] Node annotation patches the API server accepted.
# TYPE headroom_node_agent_writes_total counter
headroom_node_agent_writes_total 1
`
	if err := testutil.GatherAndCompare(m.registry, strings.NewReader(want),
		"headroom_node_agent_last_written_sample_age_seconds", "headroom_node_agent_samples_total",
		"headroom_node_agent_write_failures_total", "headroom_node_agent_writes_total",
		// The figures of the latest sample, the failed write's; no pod
		// network here, so no pod-IP figures at all.
		"headroom_node_agent_pids_used", "headroom_node_agent_pids_capacity", "headroom_node_agent_pids_reserved",
		"headroom_node_agent_pod_ips_used", "headroom_node_agent_pod_ips_capacity",
		"headroom_node_agent_memory_used_bytes", "headroom_node_agent_memory_capacity_bytes"); err != nil {
		t.Error(err)
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"headroom_node_agent_writes_total 1", "\ngo_goroutines ", "\nprocess_resident_memory_bytes "} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, rec.Body.String())
		}
	}
}

func TestSampleClampsToCapacity(t *testing.T) {
	cfg := testConfig()
	cfg.ReservedPIDs = 50000
	h := newHarness(t, cfg, nil)
	h.proc.sample = ProcSample{PIDMax: 32768, ThreadsMax: 40000, Capacity: 32768, Used: 33000}
	if err := h.r.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	s, err := pidstats.ParseNode(h.node().Annotations, t0, 0)
	if err != nil {
		t.Fatalf("published stats do not parse: %v", err)
	}
	if s.Reserved != 32768 || s.Used != 32768 || s.Free() != 0 {
		t.Errorf("stats %+v, want reserved and used clamped to capacity", s)
	}
}

func TestMaxIntervalJitterOnlyPullsWritesEarlier(t *testing.T) {
	cfg := testConfig()
	cfg.MaxIntervalJitter = 0.1
	h := newHarness(t, cfg, nil) // rand returns 0.5: due 5% early
	if err := h.r.Tick(h.ctx); err != nil {
		t.Fatal(err)
	}
	if want := t0.Add(285 * time.Second); !h.r.dueAt.Equal(want) {
		t.Errorf("due at %s, want %s", h.r.dueAt, want)
	}
	h.r.rand = func() float64 { return 0.999999 }
	if due := h.r.nextDue(t0); due.Before(t0.Add(270*time.Second)) || due.After(t0.Add(5*time.Minute)) {
		t.Errorf("due at %s outside [270s, 300s]", due)
	}
}

func TestAdopt(t *testing.T) {
	fresh := pidstats.NodeStats{Capacity: 32768, Reserved: 1000, Used: 5200, SampledAt: t0.Add(-time.Minute)}
	node := func(ann map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: ann}}
	}
	withPods := func(a map[string]string, pods string) map[string]string {
		a[pidstats.AnnotationPIDPods] = pods
		return a
	}
	t.Run("matching fresh annotations are adopted", func(t *testing.T) {
		a := withPods(fresh.Annotations(), "")
		// The memory figures too: 3 GiB and no pod, as the harness's tree.
		maps.Copy(a, memstats.NodeStats{Used: 3 << 30, SampledAt: t0.Add(-time.Minute), Pods: memstats.PodListFormat.New(nil)}.Annotations())
		a[memstats.AnnotationPods] = ""
		h := newHarness(t, testConfig(), node(a))
		if err := h.r.adopt(h.ctx); err != nil {
			t.Fatal(err)
		}
		if err := h.r.Tick(h.ctx); err != nil { // used 5000: within hysteresis of 5200
			t.Fatal(err)
		}
		h.wantPatches(0)
		// The forced write is due max-interval after the adopted sample.
		h.clock.SetTime(t0.Add(4 * time.Minute))
		if err := h.r.Tick(h.ctx); err != nil {
			t.Fatal(err)
		}
		h.wantPatches(1)
	})
	t.Run("a missing or different per-pod list is written", func(t *testing.T) {
		for _, a := range []map[string]string{fresh.Annotations(), withPods(fresh.Annotations(), podA+"=900"), withPods(fresh.Annotations(), "junk")} {
			h := newHarness(t, testConfig(), node(a))
			if err := h.r.adopt(h.ctx); err != nil {
				t.Fatal(err)
			}
			if err := h.r.Tick(h.ctx); err != nil {
				t.Fatal(err)
			}
			h.wantPatches(1)
			if got := h.node().Annotations[pidstats.AnnotationPIDPods]; got != "" {
				t.Errorf("pid-pods %q after adopting %v", got, a)
			}
		}
	})
	t.Run("stale annotations are not adopted", func(t *testing.T) {
		old := fresh
		old.SampledAt = t0.Add(-time.Hour)
		h := newHarness(t, testConfig(), node(old.Annotations()))
		if err := h.r.adopt(h.ctx); err != nil {
			t.Fatal(err)
		}
		if err := h.r.Tick(h.ctx); err != nil {
			t.Fatal(err)
		}
		h.wantPatches(1)
	})
	t.Run("invalid annotations are overwritten", func(t *testing.T) {
		h := newHarness(t, testConfig(), node(map[string]string{pidstats.AnnotationUsed: "many"}))
		if err := h.r.adopt(h.ctx); err != nil {
			t.Fatal(err)
		}
		if err := h.r.Tick(h.ctx); err != nil {
			t.Fatal(err)
		}
		h.wantPatches(1)
		h.wantUsed("5000")
	})
	t.Run("unknown node is fatal", func(t *testing.T) {
		cfg := testConfig()
		cfg.NodeName = "no-such-node"
		h := newHarness(t, cfg, node(nil)) // the cluster has node-1 only
		if err := h.r.Run(h.ctx); err == nil || !strings.Contains(err.Error(), `node "no-such-node" not found`) {
			t.Fatalf("err = %v", err)
		}
		h.wantPatches(0)
	})
	t.Run("API errors are not fatal", func(t *testing.T) {
		h := newHarness(t, testConfig(), node(fresh.Annotations()))
		h.client.PrependReactor("get", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewServiceUnavailable("down")
		})
		if err := h.r.adopt(h.ctx); err != nil {
			t.Fatal(err)
		}
		if err := h.r.Tick(h.ctx); err != nil {
			t.Fatal(err)
		}
		h.wantPatches(1)
	})
}

func TestOnce(t *testing.T) {
	t.Run("writes even when nothing changed", func(t *testing.T) {
		fresh := pidstats.NodeStats{Capacity: 32768, Reserved: 1000, Used: 5000, SampledAt: t0.Add(-time.Second)}
		h := newHarness(t, testConfig(), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Annotations: fresh.Annotations()}})
		if err := h.r.Once(h.ctx); err != nil {
			t.Fatal(err)
		}
		h.wantPatches(1)
		if got := h.node().Annotations[pidstats.AnnotationSampledAt]; got != t0.Format(time.RFC3339) {
			t.Errorf("sampled-at %s", got)
		}
	})
	t.Run("proc error", func(t *testing.T) {
		h := newHarness(t, testConfig(), nil)
		h.proc.err = errors.New("no loadavg")
		if err := h.r.Once(h.ctx); err == nil || !strings.Contains(err.Error(), "no loadavg") {
			t.Fatalf("err = %v", err)
		}
		h.wantPatches(1) // the memory figures; the PID list not without its totals
		if _, ok := h.node().Annotations[pidstats.AnnotationPIDPods]; ok {
			t.Error("pid-pods written without the PID totals")
		}
		if _, ok := h.node().Annotations[pidstats.AnnotationUsed]; ok {
			t.Error("PID totals written despite the error")
		}
	})
	t.Run("every probe fails", func(t *testing.T) {
		cfg := testConfig()
		cfg.CgroupRoot = t.TempDir()
		h := newHarness(t, cfg, nil)
		h.proc.err = errors.New("no loadavg")
		if err := h.r.Once(h.ctx); err == nil || !strings.Contains(err.Error(), "no loadavg") {
			t.Fatalf("err = %v", err)
		}
		h.wantPatches(0)
	})
	t.Run("API error", func(t *testing.T) {
		h := newHarness(t, testConfig(), nil)
		h.patchErrs = []error{apierrors.NewForbidden(corev1.Resource("nodes"), "node-1", errors.New("RBAC"))}
		if err := h.r.Once(h.ctx); !apierrors.IsForbidden(err) {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestRunWritesAndStops(t *testing.T) {
	h := newHarness(t, testConfig(), nil)
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- h.r.Run(ctx) }()
	// Run ticks at once, without waiting for the first interval.
	deadline := time.Now().Add(10 * time.Second)
	for len(h.patches()) == 0 || !h.clock.HasWaiters() {
		if time.Now().After(deadline) {
			t.Fatal("Run neither wrote nor waited on its ticker")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	h.wantPatches(1)
	h.wantUsed("5000")
}

func TestConfigValidate(t *testing.T) {
	mod := func(f func(*Config)) Config { c := testConfig(); f(&c); return c }
	tests := []struct {
		cfg       Config
		wantErrIn string
	}{
		{testConfig(), ""},
		{mod(func(c *Config) { c.NodeName = "" }), "NODE_NAME"},
		{mod(func(c *Config) { c.ProcRoot = "" }), "proc root"},
		{mod(func(c *Config) { c.CgroupRoot = "" }), "cgroup root"},
		{mod(func(c *Config) { c.CNIConfDir = "" }), "CNI configuration directory"},
		{mod(func(c *Config) { c.IPHysteresisPercent = 101 }), "pod-IP hysteresis"},
		{mod(func(c *Config) { c.ReservedPIDs = -1 }), "reserved"},
		{mod(func(c *Config) { c.Interval = 0 }), "interval"},
		{mod(func(c *Config) { c.MaxInterval = time.Second }), "max interval"},
		{mod(func(c *Config) { c.Hysteresis.PIDs = -1 }), "hysteresis PIDs"},
		{mod(func(c *Config) { c.Hysteresis.Percent = 101 }), "hysteresis percent"},
		{mod(func(c *Config) { c.Hysteresis.Percent = math.NaN() }), "hysteresis percent"},
		{mod(func(c *Config) { c.MaxIntervalJitter = 1 }), "jitter"},
		{mod(func(c *Config) { c.Backoff.Duration = 0 }), "backoff"},
		{mod(func(c *Config) { c.RequestTimeout = 0 }), "request timeout"},
	}
	for _, tc := range tests {
		err := tc.cfg.Validate()
		if tc.wantErrIn == "" {
			if err != nil {
				t.Errorf("%+v: %v", tc.cfg, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.wantErrIn) {
			t.Errorf("err = %v, want one containing %q", err, tc.wantErrIn)
		}
	}
	if _, err := New(fake.NewClientset(), mod(func(c *Config) { c.NodeName = "" })); err == nil {
		t.Error("New accepted an invalid config")
	}
}

func TestHealthz(t *testing.T) {
	get := func(h *harness) (int, string) {
		rec := httptest.NewRecorder()
		h.r.HealthzHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
		return rec.Code, rec.Body.String()
	}
	t.Run("writes keep it healthy, a stuck write loop does not", func(t *testing.T) {
		h := newHarness(t, testConfig(), nil)
		if code, body := get(h); code != 200 || body != "ok" {
			t.Fatalf("at start: %d %q", code, body)
		}
		if err := h.r.Tick(h.ctx); err != nil {
			t.Fatal(err)
		}
		// Forced writes every max interval keep it healthy.
		for range 90 { // 15 minutes
			if err := h.tick(10 * time.Second); err != nil {
				t.Fatal(err)
			}
			if code, body := get(h); code != 200 {
				t.Fatalf("at %s: %d %q", h.clock.Now().Sub(t0), code, body)
			}
		}
		last := h.r.lastWrite.Load()
		h.patchErrs = make([]error, 1000)
		for i := range h.patchErrs {
			h.patchErrs[i] = apierrors.NewServiceUnavailable("down")
		}
		h.clock.SetTime(time.Unix(0, last).Add(10 * time.Minute))
		if code, body := get(h); code != 200 {
			t.Fatalf("at twice the max interval: %d %q", code, body)
		}
		for range 7 {
			_ = h.tick(10 * time.Second)
		}
		code, body := get(h)
		if code != 503 || !strings.Contains(body, "last successful write 11m10s ago") || !strings.Contains(body, "node-1") {
			t.Fatalf("writes failing for 11m10s: %d %q", code, body)
		}
		// One write later it is healthy again.
		h.patchErrs = nil
		h.clock.Step(5 * time.Minute)
		if err := h.r.Tick(h.ctx); err != nil {
			t.Fatal(err)
		}
		if code, body := get(h); code != 200 {
			t.Fatalf("after a write: %d %q", code, body)
		}
	})
	t.Run("no write since the start", func(t *testing.T) {
		h := newHarness(t, testConfig(), nil)
		h.proc.err = errors.New("garbage")
		h.clock.Step(10 * time.Minute)
		if code, body := get(h); code != 200 {
			t.Fatalf("within the grace: %d %q", code, body)
		}
		h.clock.Step(time.Second)
		if code, body := get(h); code != 503 || !strings.Contains(body, "no successful write") {
			t.Fatalf("after the grace: %d %q", code, body)
		}
	})
}
