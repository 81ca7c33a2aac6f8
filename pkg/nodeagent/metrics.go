package nodeagent

import (
	"math"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	// podIPCrossCheckDifference is the last PodIPCrossCheck's source count
	// less the pods' (absent when not known); disagreements counts the
	// reported ones.
	podIPCrossCheckDifference    *metrics.GaugeVec
	podIPCrossCheckDisagreements *metrics.CounterVec
	// The figures of the latest successful sample of each probe, as the
	// annotations would carry them; absent before the first (vectors
	// without labels, so that "not known" does not read as 0).
	pidsUsed, pidsCapacity, pidsReserved *metrics.GaugeVec
	podIPsUsed, podIPsCapacity           *metrics.GaugeVec
	memoryUsed, memoryCapacity           *metrics.GaugeVec
	// lastWrittenSample is the UnixNano time of the oldest sample of the
	// last accepted write (or of the adopted annotations); 0 for none.
	// collectors are all it registered, for Names.
	collectors        []prometheus.Collector
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
		pidsUsed:       figure("pids_used", "PIDs (threads) in use on the node at the latest sample, as headroom.dev/pid-used carries it."),
		pidsCapacity:   figure("pids_capacity", "PIDs the node can hold at the latest sample (headroom.dev/pid-capacity)."),
		pidsReserved:   figure("pids_reserved", "PIDs reserved for the system and the kubelet (headroom.dev/pid-reserved)."),
		podIPsUsed:     figure("pod_ips_used", "Pod IPs allocated in the node's CNI IPAM state at the latest sample (headroom.dev/ip-used)."),
		podIPsCapacity: figure("pod_ips_capacity", "Pod IPs the node's CNI IPAM can hand out at the latest sample (headroom.dev/ip-capacity)."),
		memoryUsed:     figure("memory_used_bytes", "The node's memory working set in bytes at the latest sample, as headroom.dev/memory-used carries it."),
		memoryCapacity: figure("memory_capacity_bytes", "The node's memory in bytes (MemTotal) at the latest sample, which the memory hysteresis is a percentage of."),
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
		podIPCrossCheckDifference: metrics.NewGaugeVec(&metrics.GaugeOpts{
			Subsystem: metricsSubsystem, Name: "pod_ip_cross_check_difference",
			Help:           "At the last sample, the pod-IP source's count of addresses held by pods less the node's pods the API server shows holding one; absent when the pods are not known.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"source"}),
		podIPCrossCheckDisagreements: metrics.NewCounterVec(&metrics.CounterOpts{
			Subsystem: metricsSubsystem, Name: "pod_ip_cross_check_disagreements_total",
			Help:           "Disagreements beyond the tolerance between the pod-IP source and the node's pods, reported with a PodIPFiguresDisagree Event.",
			StabilityLevel: metrics.ALPHA,
		}, []string{"source"}),
	}
	var c clock.PassiveClock = clock.RealClock{}
	m.clock.Store(&c)
	own := []metrics.Registerable{m.samples, m.probeErrors, m.writes, m.writeFailures,
		m.pidsUsed, m.pidsCapacity, m.pidsReserved, m.podIPsUsed, m.podIPsCapacity, m.memoryUsed, m.memoryCapacity, m.podIPsLeaked, m.podIPsReleased,
		m.podIPCrossCheckDifference, m.podIPCrossCheckDisagreements}
	m.registry.MustRegister(own...)
	m.podIPsLeaked.Set(math.NaN())
	raw := []prometheus.Collector{
		metrics.NewGaugeFunc(&metrics.GaugeOpts{
			Subsystem: metricsSubsystem, Name: "last_written_sample_age_seconds",
			Help:           "Age of the oldest sample in the node's annotations as last written (or adopted at start); NaN before any.",
			StabilityLevel: metrics.ALPHA,
		}, m.lastWrittenSampleAge),
		// The process's own figures, as every Kubernetes component exports
		// them: go_* (runtime, memory, goroutines) and process_* (CPU,
		// resident memory, open files).
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
	m.registry.RawMustRegister(raw...)
	for _, c := range own {
		m.collectors = append(m.collectors, c)
	}
	m.collectors = append(m.collectors, raw...)
	return m
}

// figure is a gauge of one figure the agent publishes, without labels: the
// only one would be the node, which the scrape target already names.
func figure(name, help string) *metrics.GaugeVec {
	return metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem: metricsSubsystem, Name: name, Help: help,
		StabilityLevel: metrics.ALPHA,
	}, nil)
}

// observe sets the figure gauges from a probe's fresh sample.
func (m *Metrics) observe(s Sample) {
	switch s := s.(type) {
	case pidSample:
		m.pidsUsed.WithLabelValues().Set(float64(s.stats.Used))
		m.pidsCapacity.WithLabelValues().Set(float64(s.stats.Capacity))
		m.pidsReserved.WithLabelValues().Set(float64(s.stats.Reserved))
	case memSample:
		m.memoryUsed.WithLabelValues().Set(float64(s.stats.Used))
		m.memoryCapacity.WithLabelValues().Set(float64(s.capacity))
	case ipSample:
		m.podIPsUsed.WithLabelValues().Set(float64(s.stats.Used))
		m.podIPsCapacity.WithLabelValues().Set(float64(s.stats.Capacity))
	}
}

func (m *Metrics) setClock(c clock.PassiveClock) { m.clock.Store(&c) }

func (m *Metrics) lastWrittenSampleAge() float64 {
	at := m.lastWrittenSample.Load()
	if at == 0 {
		return math.NaN()
	}
	return (*m.clock.Load()).Since(time.Unix(0, at)).Seconds()
}

// Descs returns the descriptor of every metric the agent serves, also of
// those without a sample yet (a vector before its first observation), so
// that dashboards and alerts can be checked against them.
func (m *Metrics) Descs() []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range m.collectors {
			c.Describe(ch)
		}
		close(ch)
	}()
	var descs []*prometheus.Desc
	for d := range ch {
		descs = append(descs, d)
	}
	return descs
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return metrics.HandlerFor(m.registry, metrics.HandlerOpts{})
}
