package nodeagent

import (
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/utils/clock"
)

const metricsSubsystem = "headroom_node_agent"

// Metrics are the agent's Prometheus metrics, in a registry of their own.
type Metrics struct {
	registry      metrics.KubeRegistry
	samples       *metrics.CounterVec
	probeErrors   *metrics.CounterVec
	writes        *metrics.Counter
	writeFailures *metrics.Counter
	// podIPsLeaked is the last leak count (NaN when unknown);
	// podIPsReleased counts containers whose leaked addresses were released.
	podIPsLeaked   *metrics.Gauge
	podIPsReleased *metrics.Counter
	// lastWrittenSample is the UnixNano time of the oldest sample of the
	// last accepted write (or of the adopted annotations); 0 for none.
	lastWrittenSample atomic.Int64
	clock             atomic.Pointer[clock.PassiveClock]
}

// NewMetrics registers the agent's metrics in a new registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		registry: metrics.NewKubeRegistry(),
		samples: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem: metricsSubsystem, Name: "samples_total",
			Help:           "Samples taken, by probe, whether or not they succeeded.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"probe"}),
		probeErrors: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem: metricsSubsystem, Name: "probe_errors_total",
			Help:           "Samples that failed or were degraded, by probe.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"probe"}),
		writes: metrics.NewCounter(&metrics.CounterOpts{
			Subsystem: metricsSubsystem, Name: "writes_total",
			Help:           "Node annotation patches the API server accepted.",
			StabilityLevel: metrics.ALPHA,
		}),
		writeFailures: metrics.NewCounter(&metrics.CounterOpts{
			Subsystem: metricsSubsystem, Name: "write_failures_total",
			Help:           "Node annotation patches that failed.",
			StabilityLevel: metrics.ALPHA,
		}),
		podIPsLeaked: metrics.NewGauge(&metrics.GaugeOpts{
			Subsystem: metricsSubsystem, Name: "pod_ips_leaked",
			Help:           "Pod IPs of the node's host-local IPAM allocated to no pod sandbox at the last sample (headroom.dev/ip-leaked); NaN when that cannot be told.",
			StabilityLevel: metrics.ALPHA,
		}),
		podIPsReleased: metrics.NewCounter(&metrics.CounterOpts{
			Subsystem: metricsSubsystem, Name: "leaked_pod_ip_releases_total",
			Help:           "Containers whose leaked pod IPs --reclaim-leaked-ips released.",
			StabilityLevel: metrics.ALPHA,
		}),
	}
	var c clock.PassiveClock = clock.RealClock{}
	m.clock.Store(&c)
	m.registry.MustRegister(m.samples, m.probeErrors, m.writes, m.writeFailures, m.podIPsLeaked, m.podIPsReleased)
	m.podIPsLeaked.Set(math.NaN())
	m.registry.RawMustRegister(metrics.NewGaugeFunc(&metrics.GaugeOpts{
		Subsystem: metricsSubsystem, Name: "last_written_sample_age_seconds",
		Help:           "Age of the oldest sample in the node's annotations as last written (or adopted at start); NaN before any.",
		StabilityLevel: metrics.ALPHA,
	}, m.lastWrittenSampleAge))
	return m
}

func (m *Metrics) setClock(c clock.PassiveClock) { m.clock.Store(&c) }

func (m *Metrics) lastWrittenSampleAge() float64 {
	at := m.lastWrittenSample.Load()
	if at == 0 {
		return math.NaN()
	}
	return (*m.clock.Load()).Since(time.Unix(0, at)).Seconds()
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return metrics.HandlerFor(m.registry, metrics.HandlerOpts{})
}
