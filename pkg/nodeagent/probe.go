package nodeagent

import (
	"context"
	"time"
)

// A Probe measures one figure of the node and owns the Node annotations the
// figure is published in. The Agent samples every probe on every tick and
// writes the fresh samples of all probes in one JSON merge patch when any
// of them changed significantly or a forced write is due, so the figures of
// one write always come from the same tick.
type Probe interface {
	// Name identifies the probe in logs and metrics.
	Name() string
	// Sample measures the figure now. A probe that fails returns a nil
	// Sample and the error: its annotations are left as they are (they
	// age) and the other probes are written as usual. A probe may return a
	// Sample together with an error when its old figure must not outlive
	// the next write (the per-pod probe withdraws its list, see
	// Withdrawer); the error is still counted and logged.
	Sample(ctx context.Context, now time.Time) (Sample, error)
	// Adopt returns the probe's figure as the node's annotations carry it,
	// to be taken as the last write when the agent starts, or an error
	// saying why not (missing, malformed, or not what this agent would
	// write): then the first sample is written.
	Adopt(annotations map[string]string, now time.Time) (Sample, error)
}

// A Probe that also implements Dependent publishes a figure that belongs
// with another probe's sample (the per-pod list is subtracted from the PID
// total of the same sample). Its sample is written only in a patch that
// also carries a fresh sample of the probe DependsOn names; while that probe
// fails, the dependent's annotations are left alone too, so that they stay
// next to the sample they were taken with.
type Dependent interface {
	DependsOn() string
}

// A Sample is one measurement of a Probe.
type Sample interface {
	// Annotations are the figure's Node annotations.
	Annotations() map[string]string
	// Changed reports whether the sample differs from last, the probe's last
	// written sample (never nil), by more than the probe's hysteresis, and
	// why, for the log.
	Changed(last Sample) (bool, string)
	// SampledAt is the time the annotations carry, or zero when they carry
	// none; the forced write is due MaxInterval after the oldest of them.
	SampledAt() time.Time
}

// A Sample that also implements Withdrawer removes annotations: the patch
// that carries it sets the keys Withdrawn names to null (JSON merge patch),
// so readers see no figure rather than a wrong one.
type Withdrawer interface {
	Withdrawn() []string
}

// A Sample that also implements Pressing tells whether its figure is above
// the descheduler's threshold for it (Config.PIDThresholdPercent): the
// agent writes such samples at once, ahead of the hysteresis, until the
// descheduler has seen as many in a row as it waits for.
type Pressing interface {
	Pressing() bool
}

// pressing reports whether s is a Pressing sample above its threshold.
func pressing(s Sample) bool {
	p, ok := s.(Pressing)
	return ok && p.Pressing()
}
