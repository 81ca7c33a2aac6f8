package nodeagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/headroom-k8s/headroom/pkg/pidstats"
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
	// DefaultMaxIntervalJitter pulls each forced write up to 10% earlier, so
	// that agents started together do not write in lock-step for ever.
	DefaultMaxIntervalJitter = 0.1
	DefaultRequestTimeout    = 10 * time.Second
)

// DefaultBackoff spaces out retries of a failed write: 10 s doubling per
// failure up to 5 min, each delay stretched by up to 50% at random so that
// a whole cluster's agents do not retry in step after an API outage.
func DefaultBackoff() wait.Backoff {
	return wait.Backoff{Duration: 10 * time.Second, Factor: 2, Jitter: 0.5, Steps: math.MaxInt32, Cap: 5 * time.Minute}
}

// Config is what the reporter needs; Options turns flags into it.
type Config struct {
	NodeName     string
	ProcRoot     string
	ReservedPIDs int64
	Interval     time.Duration
	Policy
	// MaxIntervalJitter is the fraction by which a forced write may come
	// early: due at SampledAt + MaxInterval·(1 − MaxIntervalJitter·r), r in
	// [0,1). It never comes late, so the annotation's age stays below
	// MaxInterval + Interval while sampling and writing succeed.
	MaxIntervalJitter float64
	Backoff           wait.Backoff
	RequestTimeout    time.Duration
}

// DefaultConfig returns a Config with the defaults for everything but
// NodeName.
func DefaultConfig() Config {
	return Config{
		ProcRoot: DefaultProcRoot,
		Interval: DefaultInterval,
		Policy: Policy{
			HysteresisPIDs:    DefaultHysteresisPIDs,
			HysteresisPercent: DefaultHysteresisPercent,
			MaxInterval:       DefaultMaxInterval,
		},
		MaxIntervalJitter: DefaultMaxIntervalJitter,
		Backoff:           DefaultBackoff(),
		RequestTimeout:    DefaultRequestTimeout,
	}
}

// Validate reports the first unusable setting.
func (c Config) Validate() error {
	switch {
	case c.NodeName == "":
		return errors.New("node name is empty: set --node-name or NODE_NAME (downward API spec.nodeName)")
	case c.ProcRoot == "":
		return errors.New("proc root is empty")
	case c.ReservedPIDs < 0:
		return fmt.Errorf("reserved PIDs %d is negative", c.ReservedPIDs)
	case c.Interval <= 0:
		return fmt.Errorf("interval %s must be positive", c.Interval)
	case c.MaxInterval < c.Interval:
		return fmt.Errorf("max interval %s is shorter than the interval %s", c.MaxInterval, c.Interval)
	case c.HysteresisPIDs < 0:
		return fmt.Errorf("hysteresis PIDs %d is negative", c.HysteresisPIDs)
	case !(c.HysteresisPercent >= 0 && c.HysteresisPercent <= 100): // also rejects NaN
		return fmt.Errorf("hysteresis percent %v is not within [0, 100]", c.HysteresisPercent)
	case !(c.MaxIntervalJitter >= 0 && c.MaxIntervalJitter < 1):
		return fmt.Errorf("max interval jitter %v is not within [0, 1)", c.MaxIntervalJitter)
	case c.Backoff.Duration <= 0:
		return fmt.Errorf("backoff duration %s must be positive", c.Backoff.Duration)
	case c.RequestTimeout <= 0:
		return fmt.Errorf("request timeout %s must be positive", c.RequestTimeout)
	}
	return nil
}

// Reporter samples /proc and keeps the node's PID annotations current.
// It is not safe for concurrent use; Run drives it from one goroutine.
type Reporter struct {
	cfg    Config
	client kubernetes.Interface
	clock  clock.WithTicker
	read   func(procRoot string) (ProcSample, error)
	rand   func() float64

	latest  *pidstats.NodeStats // last good sample; kept when sampling fails
	written *pidstats.NodeStats // last sample the API server accepted
	dueAt   time.Time           // when a write is due regardless of change

	backoff  wait.Backoff // current retry state; reset after a success
	retryAt  time.Time    // no write attempt before this
	failures int          // consecutive failed writes
}

// Option adjusts a Reporter; tests use them to fake time and /proc.
type Option func(*Reporter)

// WithClock replaces the real clock.
func WithClock(c clock.WithTicker) Option { return func(r *Reporter) { r.clock = c } }

// WithProcReader replaces ReadProc.
func WithProcReader(f func(procRoot string) (ProcSample, error)) Option {
	return func(r *Reporter) { r.read = f }
}

// WithRand replaces the source of the max-interval jitter (values in [0,1)).
func WithRand(f func() float64) Option { return func(r *Reporter) { r.rand = f } }

// New returns a Reporter for cfg, which must be valid.
func New(client kubernetes.Interface, cfg Config, opts ...Option) (*Reporter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Reporter{
		cfg:     cfg,
		client:  client,
		clock:   clock.RealClock{},
		read:    ReadProc,
		rand:    rand.Float64,
		backoff: cfg.Backoff,
	}
	for _, o := range opts {
		o(r)
	}
	return r, nil
}

// Run adopts what the node already carries, then samples every Interval
// until ctx ends. Only an unknown node name is fatal; sampling and API
// errors are logged and retried.
func (r *Reporter) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if err := r.adopt(ctx); err != nil {
		return err
	}
	ticker := r.clock.NewTicker(r.cfg.Interval)
	defer ticker.Stop()
	for {
		if err := r.Tick(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "PID report failed", "node", r.cfg.NodeName)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C():
		}
	}
}

// Once samples and writes unconditionally, once; for --once.
func (r *Reporter) Once(ctx context.Context) error {
	s, err := r.sample(ctx)
	if err != nil {
		return err
	}
	if err := r.patch(ctx, s); err != nil {
		return err
	}
	r.latest, r.written = &s, &s
	return nil
}

// adopt takes the node's current annotations as the last write when they
// agree with what this agent would write, so that restarting every agent
// (a DaemonSet rollout) does not rewrite every Node at once.
func (r *Reporter) adopt(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	reqCtx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	node, err := r.client.CoreV1().Nodes().Get(reqCtx, r.cfg.NodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("node %q not found: --node-name or NODE_NAME must name the node this agent runs on", r.cfg.NodeName)
	}
	if err != nil {
		logger.Error(err, "Reading the node failed; writing a fresh sample", "node", r.cfg.NodeName)
		return nil
	}
	now := r.clock.Now()
	s, err := pidstats.ParseNode(node.Annotations, now, r.cfg.MaxInterval)
	if err != nil {
		logger.V(2).Info("Not adopting the node's PID annotations", "node", r.cfg.NodeName, "reason", err)
		return nil
	}
	if s.Reserved != r.cfg.ReservedPIDs {
		logger.V(2).Info("Not adopting the node's PID annotations: reservation differs", "node", r.cfg.NodeName,
			"annotated", s.Reserved, "configured", r.cfg.ReservedPIDs)
		return nil
	}
	r.written = &s
	r.dueAt = r.nextDue(s.SampledAt)
	logger.V(2).Info("Adopted the node's PID annotations", "node", r.cfg.NodeName, "stats", s, "nextForcedWrite", r.dueAt)
	return nil
}

// Tick takes one sample and writes it if the policy asks for a write and no
// backoff is pending. A failed sample keeps the last good one; a failed
// write is retried on a later tick once the backoff has passed.
func (r *Reporter) Tick(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	now := r.clock.Now()
	s, sampleErr := r.sample(ctx)
	if sampleErr != nil {
		sampleErr = fmt.Errorf("sampling %s failed, keeping the last good sample: %w", r.cfg.ProcRoot, sampleErr)
	} else {
		r.latest = &s
	}
	if r.latest == nil {
		return sampleErr
	}
	write, reason := r.cfg.Decide(r.written, r.dueAt, *r.latest, now)
	if !write {
		logger.V(5).Info("Not writing", "node", r.cfg.NodeName, "reason", reason, "stats", *r.latest)
		return sampleErr
	}
	if now.Before(r.retryAt) {
		logger.V(4).Info("Write due but backing off", "node", r.cfg.NodeName, "reason", reason, "retryAt", r.retryAt)
		return sampleErr
	}
	if err := r.patch(ctx, *r.latest); err != nil {
		delay := r.backoff.Step()
		r.retryAt = now.Add(delay)
		r.failures++
		return errors.Join(sampleErr, fmt.Errorf("writing PID annotations (failure %d in a row, next attempt in %s): %w",
			r.failures, delay.Round(time.Second), err))
	}
	written := *r.latest
	r.written = &written
	r.dueAt = r.nextDue(written.SampledAt)
	r.backoff, r.retryAt, r.failures = r.cfg.Backoff, time.Time{}, 0
	logger.V(2).Info("Wrote PID annotations", "node", r.cfg.NodeName, "reason", reason, "stats", written)
	return sampleErr
}

func (r *Reporter) nextDue(sampledAt time.Time) time.Time {
	early := time.Duration(float64(r.cfg.MaxInterval) * r.cfg.MaxIntervalJitter * r.rand())
	return sampledAt.Add(r.cfg.MaxInterval - early)
}

// sample reads /proc and turns it into the stats to publish.
func (r *Reporter) sample(ctx context.Context) (pidstats.NodeStats, error) {
	ps, err := r.read(r.cfg.ProcRoot)
	if err != nil {
		return pidstats.NodeStats{}, err
	}
	s := pidstats.NodeStats{Capacity: ps.Capacity, Reserved: r.cfg.ReservedPIDs, Used: ps.Used, SampledAt: r.clock.Now()}
	// Readers reject reserved or used above capacity as invalid, which would
	// make the fullest nodes look unknown. Clamp instead: allocatable 0 and
	// free 0 are what such a node has.
	if s.Reserved > s.Capacity {
		klog.FromContext(ctx).Info("Warning: reserved PIDs exceed capacity; publishing reserved = capacity",
			"node", r.cfg.NodeName, "reserved", s.Reserved, "capacity", s.Capacity)
		s.Reserved = s.Capacity
	}
	if s.Used > s.Capacity {
		klog.FromContext(ctx).Info("Warning: tasks in use exceed capacity; publishing used = capacity",
			"node", r.cfg.NodeName, "used", s.Used, "capacity", s.Capacity)
		s.Used = s.Capacity
	}
	if err := s.Validate(); err != nil {
		return pidstats.NodeStats{}, err
	}
	return s, nil
}

// patch writes all four annotations in one JSON merge patch, which leaves
// the Node's other annotations alone.
func (r *Reporter) patch(ctx context.Context, s pidstats.NodeStats) error {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": s.Annotations()}})
	if err != nil {
		return err
	}
	reqCtx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	_, err = r.client.CoreV1().Nodes().Patch(reqCtx, r.cfg.NodeName, types.MergePatchType, body,
		metav1.PatchOptions{FieldManager: FieldManager})
	return err
}
