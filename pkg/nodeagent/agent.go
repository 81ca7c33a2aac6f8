package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/headroom-k8s/headroom/pkg/ciliumipam"
	"github.com/headroom-k8s/headroom/pkg/cniipam"
	"github.com/headroom-k8s/headroom/pkg/watchcache"
)

// FieldManager names this agent in the Node's managedFields.
const FieldManager = "headroom-node-agent"

// Defaults. See cmd/node-agent/README.md for the write rate they cost.
const (
	DefaultProcRoot          = "/proc"
	DefaultInterval          = 10 * time.Second
	DefaultMaxInterval       = 5 * time.Minute
	DefaultHysteresisPIDs    = 500
	DefaultHysteresisPercent = 2.0
	// DefaultIPHysteresisPercent: a change of pod IPs in use is written
	// when it reaches 5% of the pool (at least 1), and always near
	// exhaustion (IPProbe).
	DefaultIPHysteresisPercent = 5.0
	// DefaultMemoryHysteresisBytes is 100 MiB, the kubelet's default hard
	// eviction threshold (memory.available<100Mi): a smaller move of a
	// node far from it decides nothing. It is also the hysteresis of one
	// pod's figure in memory-pods.
	DefaultMemoryHysteresisBytes = 100 << 20
	// DefaultMemoryHysteresisPercent of the node's memory, as for PIDs.
	DefaultMemoryHysteresisPercent = 2.0
	// DefaultMaxIntervalJitter pulls each forced write up to 10% earlier, so
	// that agents started together do not write in lock-step for ever.
	DefaultMaxIntervalJitter = 0.1
	DefaultRequestTimeout    = 10 * time.Second
	DefaultMetricsAddress    = ":8080"
	// DefaultPressureSamples is RelieveNodePressure's default
	// pressureSamples: the descheduler relieves a node once that many
	// consecutive samples show it above its threshold.
	DefaultPressureSamples = 2
	// maxPressureSamples is RelieveNodePressure's bound on pressureSamples.
	maxPressureSamples = 10
)

// DefaultBackoff spaces out retries of a failed write: 10 s doubling per
// failure up to 5 min, each delay stretched by up to 50% at random so that
// a whole cluster's agents do not retry in step after an API outage.
func DefaultBackoff() wait.Backoff {
	return wait.Backoff{Duration: 10 * time.Second, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: 5 * time.Minute}
}

// Config is what the agent needs; Options turns flags into it.
type Config struct {
	NodeName   string
	ProcRoot   string
	CgroupRoot string
	// CNIConfDir is where the container runtime's CNI network
	// configuration is (IPProbe).
	CNIConfDir string
	// ContainerRuntimeEndpoint is the CRI endpoint asked for the node's pod
	// sandboxes, to tell leaked host-local allocations; empty for none.
	ContainerRuntimeEndpoint string
	// CiliumAgentSocket is the Cilium agent's API socket, asked where the
	// CiliumNode does not list the addresses in use; empty not to ask.
	CiliumAgentSocket string
	// PodUID is the agent's own pod's UID: the runtime's answer is trusted
	// only when it lists that pod's sandbox.
	PodUID string
	// IPLeakGrace is how old an allocation must be to count as leaked.
	IPLeakGrace time.Duration
	// ReclaimLeakedIPs releases an allocation leaked for
	// ReclaimLeakedIPsAfter, as host-local's DEL would.
	ReclaimLeakedIPs      bool
	ReclaimLeakedIPsAfter time.Duration
	ReservedPIDs          int64
	Interval              time.Duration
	Hysteresis
	// IPHysteresisPercent is the pod-IP probe's hysteresis, in percent of
	// the pool.
	IPHysteresisPercent float64
	// IPCrossCheck compares the pod-IP figures with the node's pods
	// (PodIPCrossCheck), watching the pods bound to the node.
	IPCrossCheck bool
	// AWSIPAMD and AzureNNC configure the AWS VPC CNI's and Azure CNI's
	// pod-IP sources.
	AWSIPAMD AWSIPAMDConfig
	AzureNNC AzureNNCConfig
	// MemoryHysteresis is the memory probes' hysteresis.
	MemoryHysteresis MemoryHysteresis
	// MaxInterval bounds the time between writes, so that readers can tell
	// a live agent from a dead one by the sample's age.
	MaxInterval time.Duration
	// MaxIntervalJitter is the fraction by which a forced write may come
	// early: due at SampledAt + MaxInterval·(1 − MaxIntervalJitter·r), r in
	// [0,1). It never comes late, so the annotation's age stays below
	// MaxInterval + Interval while sampling and writing succeed.
	MaxIntervalJitter float64
	// PIDThresholdPercent is the descheduler's PID trigger
	// (RelieveNodePressure's pids.thresholdPercent), 0 for none. A PID
	// sample above it (used > this % of allocatable, as the plugin
	// compares) is written at once, hysteresis or not, until
	// PressureSamples + 1 consecutive written samples have shown it there
	// (pressureWrites): the descheduler, running as often as the agent
	// samples, then has all the samples it waits for one Interval apart,
	// instead of waiting for a move beyond the hysteresis or the max
	// interval. Below it, writes follow the hysteresis as before.
	PIDThresholdPercent int64
	// PressureSamples is the descheduler's pressureSamples.
	PressureSamples int
	Backoff         wait.Backoff
	RequestTimeout  time.Duration
}

// DefaultConfig returns a Config with the defaults for everything but
// NodeName.
func DefaultConfig() Config {
	return Config{
		ProcRoot:            DefaultProcRoot,
		CgroupRoot:          DefaultCgroupRoot,
		CNIConfDir:          cniipam.DefaultConfDir,
		IPHysteresisPercent: DefaultIPHysteresisPercent,
		IPCrossCheck:        true,
		AWSIPAMD:            DefaultAWSIPAMDConfig(),
		AzureNNC:            DefaultAzureNNCConfig(),

		IPLeakGrace:           DefaultIPLeakGrace,
		ReclaimLeakedIPsAfter: DefaultReclaimLeakedIPsAfter,
		Interval:              DefaultInterval,
		Hysteresis:            Hysteresis{PIDs: DefaultHysteresisPIDs, Percent: DefaultHysteresisPercent},
		MemoryHysteresis:      MemoryHysteresis{Bytes: DefaultMemoryHysteresisBytes, Percent: DefaultMemoryHysteresisPercent},
		MaxInterval:           DefaultMaxInterval,
		MaxIntervalJitter:     DefaultMaxIntervalJitter,
		PressureSamples:       DefaultPressureSamples,
		Backoff:               DefaultBackoff(),
		RequestTimeout:        DefaultRequestTimeout,
	}
}

// Validate reports the first unusable setting.
func (c Config) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("node name is empty: set --node-name or NODE_NAME (downward API spec.nodeName)")
	case c.ProcRoot == "":
		return errors.New("proc root is empty")
	case c.CgroupRoot == "":
		return errors.New("cgroup root is empty")
	case c.CNIConfDir == "":
		return errors.New("CNI configuration directory is empty")
	case c.IPLeakGrace < MinIPLeakGrace:
		return fmt.Errorf("--ip-leak-grace %s is below %s: a pod's CNI ADD runs before the runtime lists its sandbox, so pods being started would count as leaked", c.IPLeakGrace, MinIPLeakGrace)
	case c.ReclaimLeakedIPs && c.ContainerRuntimeEndpoint == "":
		return errors.New("--reclaim-leaked-ips needs --container-runtime-endpoint: the runtime is asked which sandboxes own their addresses")
	case c.ReclaimLeakedIPs && c.PodUID == "":
		return errors.New("--reclaim-leaked-ips needs --pod-uid (POD_UID from the downward API's metadata.uid): a runtime's answer is trusted only when it lists the agent's own pod")
	case c.ReclaimLeakedIPs && c.IPLeakGrace < MinReclaimIPLeakGrace:
		return fmt.Errorf("--ip-leak-grace %s is below %s with --reclaim-leaked-ips: the kubelet's default runtime request timeout bounds a RunPodSandbox, whose allocation must never be released", c.IPLeakGrace, MinReclaimIPLeakGrace)
	case c.ReclaimLeakedIPsAfter < max(MinReclaimLeakedIPsAfter, MinLeakedSamples*c.Interval):
		return fmt.Errorf("--reclaim-leaked-ips-after %s is below %s (at least %s and %d intervals): one listing that misses a sandbox must never release its addresses",
			c.ReclaimLeakedIPsAfter, max(MinReclaimLeakedIPsAfter, MinLeakedSamples*c.Interval), MinReclaimLeakedIPsAfter, MinLeakedSamples)
	case c.ReservedPIDs < 0:
		return fmt.Errorf("reserved PIDs %d is negative", c.ReservedPIDs)
	case c.Interval <= 0:
		return fmt.Errorf("interval %s must be positive", c.Interval)
	case c.MaxInterval < c.Interval:
		return fmt.Errorf("max interval %s is shorter than the interval %s", c.MaxInterval, c.Interval)
	case c.Hysteresis.PIDs < 0:
		return fmt.Errorf("hysteresis PIDs %d is negative", c.Hysteresis.PIDs)
	case !(c.Hysteresis.Percent >= 0 && c.Hysteresis.Percent <= 100): // also rejects NaN
		return fmt.Errorf("hysteresis percent %v is not within [0, 100]", c.Hysteresis.Percent)
	case !(c.IPHysteresisPercent >= 0 && c.IPHysteresisPercent <= 100):
		return fmt.Errorf("pod-IP hysteresis percent %v is not within [0, 100]", c.IPHysteresisPercent)
	case c.MemoryHysteresis.Bytes < 0:
		return fmt.Errorf("memory hysteresis bytes %d is negative", c.MemoryHysteresis.Bytes)
	case !(c.MemoryHysteresis.Percent >= 0 && c.MemoryHysteresis.Percent <= 100):
		return fmt.Errorf("memory hysteresis percent %v is not within [0, 100]", c.MemoryHysteresis.Percent)
	case !(c.MaxIntervalJitter >= 0 && c.MaxIntervalJitter < 1):
		return fmt.Errorf("max interval jitter %v is not within [0, 1)", c.MaxIntervalJitter)
	case c.PIDThresholdPercent < 0 || c.PIDThresholdPercent > 100:
		return fmt.Errorf("--pids-threshold-percent %d is not within [0, 100] (0: none)", c.PIDThresholdPercent)
	case c.PressureSamples < 1 || c.PressureSamples > maxPressureSamples:
		return fmt.Errorf("--pressure-samples %d is not within [1, %d] (RelieveNodePressure's pressureSamples)", c.PressureSamples, maxPressureSamples)
	case c.Backoff.Duration <= 0:
		return fmt.Errorf("backoff duration %s must be positive", c.Backoff.Duration)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("request timeout %s must be positive", c.RequestTimeout)
	}
	return c.AWSIPAMD.Validate()
}

// Agent samples its probes and keeps the node's annotations current.
// Tick and Run are not safe for concurrent use; Run drives the agent from
// one goroutine. Metrics may be gathered concurrently.
type Agent struct {
	cfg     Config
	client  kubernetes.Interface
	clock   clock.WithTicker
	read    func(procRoot string) (ProcSample, error)
	rand    func() float64
	probes  []Probe
	metrics *Metrics
	dynamic dynamic.Interface
	// ciliumNode watches the node's CiliumNode for the pod-IP probe; nil
	// without a dynamic client.
	ciliumNode *ciliumipam.NodeWatch
	// nodePods watches the node's pods, started by its first use (the
	// pod-IP cross-check, Azure CNI's use).
	nodePods *NodePodWatch
	// azureNNC watches the node's NodeNetworkConfig; nil without a dynamic
	// client.
	azureNNC *watchcache.Object
	// sandboxes replaces the CRI client in tests.
	sandboxes SandboxLister

	written []Sample  // per probe: the last sample the API server accepted
	dueAt   time.Time // when a write is due regardless of change
	// pressed counts, per probe, the consecutive written samples that were
	// above the descheduler's threshold (Pressing).
	pressed []int

	backoff  wait.Backoff // current retry state; reset after a success
	retryAt  time.Time    // no write attempt before this
	failures int          // consecutive failed writes

	// started and lastWrite (UnixNano of the last accepted write; 0 for
	// none) are what Healthy reads, from another goroutine.
	started   time.Time
	lastWrite atomic.Int64
}

// Option adjusts an Agent; tests use them to fake time, /proc and probes.
type Option func(*Agent)

// WithClock replaces the real clock.
func WithClock(c clock.WithTicker) Option { return func(a *Agent) { a.clock = c } }

// WithProcReader replaces ReadProc in the PID probe.
func WithProcReader(f func(procRoot string) (ProcSample, error)) Option {
	return func(a *Agent) { a.read = f }
}

// WithRand replaces the source of the max-interval jitter (values in [0,1)).
func WithRand(f func() float64) Option { return func(a *Agent) { a.rand = f } }

// WithProbes replaces the probes built from the Config.
func WithProbes(p ...Probe) Option { return func(a *Agent) { a.probes = p } }

// WithMetrics records into m instead of a private set of metrics.
func WithMetrics(m *Metrics) Option { return func(a *Agent) { a.metrics = m } }

// WithDynamicClient lets the pod-IP probe watch the node's CiliumNode.
func WithDynamicClient(c dynamic.Interface) Option { return func(a *Agent) { a.dynamic = c } }

// WithSandboxLister replaces the CRI client that lists the node's pod
// sandboxes.
func WithSandboxLister(l SandboxLister) Option { return func(a *Agent) { a.sandboxes = l } }

// New returns an Agent for cfg, which must be valid, with the node PID
// probe, the per-pod PID probe, the pod-IP probe, the node memory probe and
// the per-pod memory probe.
func New(client kubernetes.Interface, cfg Config, opts ...Option) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:     cfg,
		client:  client,
		clock:   clock.RealClock{},
		read:    ReadProc,
		rand:    rand.Float64,
		backoff: cfg.Backoff,
	}
	for _, o := range opts {
		o(a)
	}
	if a.metrics == nil {
		a.metrics = NewMetrics()
	}
	if a.probes == nil {
		a.probes = []Probe{
			&PIDProbe{ProcRoot: cfg.ProcRoot, Reserved: cfg.ReservedPIDs, Hysteresis: cfg.Hysteresis, ThresholdPercent: cfg.PIDThresholdPercent,
				MaxAge: cfg.MaxInterval, Read: a.read},
			&PodPIDsProbe{CgroupRoot: cfg.CgroupRoot, HysteresisPIDs: cfg.Hysteresis.PIDs},
			a.ipProbe(),
			&MemoryProbe{CgroupRoot: cfg.CgroupRoot, ProcRoot: cfg.ProcRoot, Hysteresis: cfg.MemoryHysteresis, MaxAge: cfg.MaxInterval},
			&MemoryPodsProbe{CgroupRoot: cfg.CgroupRoot, HysteresisBytes: cfg.MemoryHysteresis.Bytes},
			&SwapPodsProbe{CgroupRoot: cfg.CgroupRoot, ProcRoot: cfg.ProcRoot, HysteresisBytes: cfg.MemoryHysteresis.Bytes},
		}
	}
	a.started = a.clock.Now()
	a.metrics.setClock(a.clock)
	a.written = make([]Sample, len(a.probes))
	a.pressed = make([]int, len(a.probes))
	return a, nil
}

// Metrics returns the agent's metrics, to be served on /metrics.
func (a *Agent) Metrics() *Metrics { return a.metrics }

// Run adopts what the node already carries, then samples every Interval
// until ctx ends. Only an unknown node name is fatal; sampling and API
// errors are logged and retried.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if err := a.adopt(ctx); err != nil {
		return err
	}
	defer a.stopWatches()
	ticker := a.clock.NewTicker(a.cfg.Interval)
	defer ticker.Stop()
	for {
		if err := a.Tick(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Node report incomplete", "node", a.cfg.NodeName)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// Healthy reports an error when the agent has not written its node for
// twice the max interval: it writes at least once per max interval while
// its probes and the API server work, so a longer silence means it is
// stuck (a probe failing for good, writes refused, a hung request). The
// time since the agent was created counts as the first write's grace.
// Safe for concurrent use.
func (a *Agent) Healthy() error {
	last := a.started
	if w := a.lastWrite.Load(); w != 0 {
		last = time.Unix(0, w)
	}
	if since, limit := a.clock.Since(last), 2*a.cfg.MaxInterval; since > limit {
		what := "last successful write"
		if a.lastWrite.Load() == 0 {
			what = "start, and no successful write since"
		}
		return fmt.Errorf("node %s: %s %s ago, more than twice the max interval (%s)", a.cfg.NodeName, what, since.Round(time.Second), limit)
	}
	return nil
}

// HealthzHandler serves Healthy: 200 "ok", or 503 with its error.
func (a *Agent) HealthzHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if err := a.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
}

// Once samples every probe and writes what they measured, unconditionally,
// once; for --once. The error joins the probes' errors and the write's.
func (a *Agent) Once(ctx context.Context) error {
	if a.ciliumNode != nil {
		// The one sample there is waits for the watch's first list.
		a.ciliumNode.SyncWait = a.cfg.RequestTimeout
	}
	if a.azureNNC != nil {
		a.azureNNC.SyncWait = a.cfg.RequestTimeout
	}
	if a.nodePods != nil {
		a.nodePods.SyncWait = a.cfg.RequestTimeout
	}
	defer a.stopWatches()
	fresh, sampleErr := a.sample(ctx)
	if !hasAny(fresh) {
		return fmt.Errorf("no probe produced a sample: %w", sampleErr)
	}
	if err := a.patch(ctx, fresh); err != nil {
		return errors.Join(sampleErr, err)
	}
	a.recordWrite(fresh)
	return sampleErr
}

// stopWatches ends the watches the probes started.
func (a *Agent) stopWatches() {
	if a.ciliumNode != nil {
		a.ciliumNode.Stop()
	}
	if a.azureNNC != nil {
		a.azureNNC.Stop()
	}
	if a.nodePods != nil {
		a.nodePods.Stop()
	}
}

// adopt takes the node's current annotations as the last write where they
// agree with what this agent would write, so that restarting every agent
// (a DaemonSet rollout) does not rewrite every Node at once.
func (a *Agent) adopt(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	reqCtx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	node, err := a.client.CoreV1().Nodes().Get(reqCtx, a.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("node %q not found: --node-name or NODE_NAME must name the node this agent runs on", a.cfg.NodeName)
	}
	if err != nil {
		logger.Error(err, "Reading the node failed; writing a fresh sample", "node", a.cfg.NodeName)
		return nil
	}
	now := a.clock.Now()
	for i, p := range a.probes {
		s, err := p.Adopt(node.Annotations, now)
		if err != nil {
			logger.V(2).Info("Not adopting the node's annotations", "node", a.cfg.NodeName, "probe", p.Name(), "reason", err)
			continue
		}
		a.written[i] = s
		// How many samples above the threshold came before is not known:
		// this one counts, the next in the band is written.
		if pressing(s) {
			a.pressed[i] = 1
		}
		logger.V(2).Info("Adopted the node's annotations", "node", a.cfg.NodeName, "probe", p.Name(), "sample", s)
	}
	if oldest := oldestSampledAt(a.written); !oldest.IsZero() {
		a.dueAt = a.nextDue(oldest)
		a.metrics.lastWrittenSample.Store(oldest.UnixNano())
	}
	return nil
}

// Tick samples every probe and writes the fresh samples if one of them
// changed beyond its hysteresis or the max interval has passed, and no
// backoff is pending. A failed probe's annotations are left alone; a
// failed write is retried on a later tick once the backoff has passed.
func (a *Agent) Tick(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	now := a.clock.Now()
	fresh, sampleErr := a.sample(ctx)
	write, reason := a.decide(fresh, now)
	if !write {
		logger.V(5).Info("Not writing", "node", a.cfg.NodeName, "reason", reason)
		return sampleErr
	}
	if now.Before(a.retryAt) {
		logger.V(4).Info("Write due but backing off", "node", a.cfg.NodeName, "reason", reason, "retryAt", a.retryAt)
		return sampleErr
	}
	if err := a.patch(ctx, fresh); err != nil {
		delay := a.backoff.Step()
		a.retryAt = now.Add(delay)
		a.failures++
		a.metrics.writeFailures.Inc()
		return errors.Join(sampleErr, fmt.Errorf("writing node annotations (failure %d in a row, next attempt in %s): %w",
			a.failures, delay.Round(time.Second), err))
	}
	a.recordWrite(fresh)
	a.backoff, a.retryAt, a.failures = a.cfg.Backoff, time.Time{}, 0
	logger.V(2).Info("Wrote node annotations", "node", a.cfg.NodeName, "reason", reason, "samples", fresh)
	return sampleErr
}

// sample runs every probe; fresh[i] is nil where probe i failed outright,
// or where it is Dependent on a probe that failed.
func (a *Agent) sample(ctx context.Context) ([]Sample, error) {
	now := a.clock.Now()
	fresh := make([]Sample, len(a.probes))
	var errs []error
	for i, p := range a.probes {
		s, err := p.Sample(ctx, now)
		a.metrics.samples.WithLabelValues(p.Name()).Inc()
		if err != nil {
			a.metrics.probeErrors.WithLabelValues(p.Name()).Inc()
			errs = append(errs, fmt.Errorf("probe %s: %w", p.Name(), err))
		}
		if s != nil {
			a.metrics.observe(s)
		}
		fresh[i] = s
	}
	a.dropOrphans(fresh)
	return fresh, errors.Join(errs...)
}

// dropOrphans drops the fresh sample of every Dependent probe whose probe
// of reference produced none this tick, so that no write pairs a figure
// with another tick's sample.
func (a *Agent) dropOrphans(fresh []Sample) {
	for i, p := range a.probes {
		d, ok := p.(Dependent)
		if !ok || fresh[i] == nil {
			continue
		}
		if j := slices.IndexFunc(a.probes, func(q Probe) bool { return q.Name() == d.DependsOn() }); j < 0 || fresh[j] == nil {
			fresh[i] = nil
		}
	}
}

// decide is the write policy shared by all probes.
func (a *Agent) decide(fresh []Sample, now time.Time) (bool, string) {
	if !hasAny(fresh) {
		return false, "no probe produced a sample"
	}
	for i, s := range fresh {
		if s == nil {
			continue
		}
		if a.written[i] == nil {
			return true, "first sample of probe " + a.probes[i].Name()
		}
		// Ahead of the hysteresis: the descheduler acts on a node above its
		// threshold only once it has seen PressureSamples samples there.
		if pressing(s) && a.pressed[i] < a.pressureWrites() {
			return true, fmt.Sprintf("%s: above the descheduler's threshold, sample %d of %d written at once",
				a.probes[i].Name(), a.pressed[i]+1, a.pressureWrites())
		}
		if changed, why := s.Changed(a.written[i]); changed {
			return true, a.probes[i].Name() + ": " + why
		}
	}
	if !now.Before(a.dueAt) {
		return true, "max interval reached"
	}
	return false, "within hysteresis"
}

// pressureWrites is how many consecutive samples above the descheduler's
// threshold are written at once: its pressureSamples, and one more. The
// descheduler runs on a period of its own, as short as the agent's
// interval but not in step with it, and counts the samples its runs see:
// when two writes fall between two runs, the first is never seen, and the
// spare write makes up for it rather than leaving the node to wait for the
// hysteresis.
func (a *Agent) pressureWrites() int { return a.cfg.PressureSamples + 1 }

func (a *Agent) recordWrite(fresh []Sample) {
	for i, s := range fresh {
		if s == nil {
			continue
		}
		a.written[i] = s
		if pressing(s) {
			a.pressed[i]++
		} else {
			a.pressed[i] = 0
		}
	}
	at := oldestSampledAt(fresh)
	if at.IsZero() {
		at = a.clock.Now()
	}
	a.dueAt = a.nextDue(at)
	a.lastWrite.Store(a.clock.Now().UnixNano())
	a.metrics.writes.Inc()
	// The age metric follows the annotations' own times: a write that
	// carried none (the PID probe failing) leaves the old PID sample aging.
	if oldest := oldestSampledAt(a.written); !oldest.IsZero() {
		a.metrics.lastWrittenSample.Store(oldest.UnixNano())
	}
}

// oldestSampledAt is the earliest non-zero SampledAt among samples.
func oldestSampledAt(samples []Sample) time.Time {
	var oldest time.Time
	for _, s := range samples {
		if s == nil {
			continue
		}
		if at := s.SampledAt(); !at.IsZero() && (oldest.IsZero() || at.Before(oldest)) {
			oldest = at
		}
	}
	return oldest
}

func hasAny(samples []Sample) bool {
	for _, s := range samples {
		if s != nil {
			return true
		}
	}
	return false
}

func (a *Agent) nextDue(sampledAt time.Time) time.Time {
	early := time.Duration(float64(a.cfg.MaxInterval) * a.cfg.MaxIntervalJitter * a.rand())
	return sampledAt.Add(a.cfg.MaxInterval - early)
}

// patch writes every fresh sample's annotations in one JSON merge patch,
// which leaves the Node's other annotations alone; keys a sample withdraws
// are set to null, which removes them. A key or value the admission policy
// would refuse (CheckAnnotation) fails the write before it is sent.
func (a *Agent) patch(ctx context.Context, fresh []Sample) error {
	annotations := map[string]*string{}
	for _, s := range fresh {
		if s == nil {
			continue
		}
		if w, ok := s.(Withdrawer); ok {
			for _, k := range w.Withdrawn() {
				if err := CheckAnnotation(k, ""); err != nil {
					return err
				}
				annotations[k] = nil
			}
		}
		for k, v := range s.Annotations() {
			if err := CheckAnnotation(k, v); err != nil {
				return err
			}
			annotations[k] = &v
		}
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
	if err != nil {
		return err
	}
	reqCtx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	_, err = a.client.CoreV1().Nodes().Patch(reqCtx, a.cfg.NodeName, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: FieldManager})
	return err
}

// ipProbe is the pod-IP probe for the agent's configuration.
func (a *Agent) ipProbe() *IPProbe {
	p := &IPProbe{ConfDir: a.cfg.CNIConfDir, HysteresisPercent: a.cfg.IPHysteresisPercent, MaxAge: a.cfg.MaxInterval,
		Metrics: a.metrics, Event: a.nodeEvent}
	lister := a.sandboxes
	if lister == nil && a.cfg.ContainerRuntimeEndpoint != "" {
		lister = &CRISandboxLister{Endpoint: a.cfg.ContainerRuntimeEndpoint, Timeout: a.cfg.RequestTimeout}
	}
	if lister != nil {
		p.Leaks = &LeakFinder{Sandboxes: lister, OwnPodUID: a.cfg.PodUID, Grace: a.cfg.IPLeakGrace,
			Reclaim: a.cfg.ReclaimLeakedIPs, ReclaimAfter: a.cfg.ReclaimLeakedIPsAfter}
	}
	if a.dynamic != nil {
		a.ciliumNode = ciliumipam.NewNodeWatch(a.dynamic, a.cfg.NodeName)
		p.CiliumNode = a.ciliumNode
		if a.cfg.CiliumAgentSocket != "" {
			p.CiliumAgent = ciliumipam.NewAgentClient(a.cfg.CiliumAgentSocket, a.cfg.RequestTimeout)
		}
	}
	a.nodePods = NewNodePodWatch(a.client, a.cfg.NodeName)
	if a.cfg.IPCrossCheck {
		p.CrossCheck = &PodIPCrossCheck{Pods: a.nodePods, Tolerance: DefaultIPCrossCheckTolerance,
			TolerancePercent: DefaultIPCrossCheckTolerancePercent, Samples: DefaultIPCrossCheckSamples, Event: a.nodeEvent, Metrics: a.metrics}
	}
	a.cloudIPSources(p)
	return p
}

// EventNamespace holds the Events the agent records on its Node: a Node is
// cluster-scoped, and the API server takes such Events only in "default",
// where the kubelet records its own.
const EventNamespace = metav1.NamespaceDefault

// nodeEvent records an Event on the agent's Node, as the kubelet records
// its own (the Node's name as its UID). A failure is logged, not retried:
// the log line and the metric carry the same news.
func (a *Agent) nodeEvent(ctx context.Context, eventType, reason, message string) {
	now := metav1.NewTime(a.clock.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: a.cfg.NodeName + ".", Namespace: EventNamespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: a.cfg.NodeName,
			UID: types.UID(a.cfg.NodeName)},
		Type: eventType, Reason: reason, Message: message,
		Source:         corev1.EventSource{Component: FieldManager, Host: a.cfg.NodeName},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	reqCtx, cancel := context.WithTimeout(ctx, a.cfg.RequestTimeout)
	defer cancel()
	if _, err := a.client.CoreV1().Events(EventNamespace).Create(reqCtx, ev, metav1.CreateOptions{}); err != nil {
		klog.FromContext(ctx).Error(err, "Recording an Event on the node failed", "node", a.cfg.NodeName, "reason", reason)
	}
}
