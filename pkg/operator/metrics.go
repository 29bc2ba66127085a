package operator

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The operator's own metrics (docs/metrics.md lists them with the framework's).
type metrics struct {
	injections *prometheus.CounterVec   // result, reason, strategy
	failures   *prometheus.CounterVec   // strategy
	duration   *prometheus.HistogramVec // strategy, result
	jvms       *prometheus.GaugeVec     // namespace, exporter
	pods       *prometheus.GaugeVec     // namespace, exporter, state
}

// Pod states of jmx_operator_pods.
const (
	podInjected = "injected"
	podPending  = "pending"
	podFailed   = "failed"
	podNoJVM    = "no_jvm"
	podConflict = "conflict"
	// podNotAtStart: with mode AtStart, a running pod created without the
	// agent, which is never attached.
	podNotAtStart = "not_injected_at_start"
)

var podStates = []string{podInjected, podPending, podFailed, podNoJVM, podConflict, podNotAtStart}

var registerOnce sync.Map // prometheus.Registerer -> *metrics

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		injections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jmx_operator_injections_total",
			Help: "Injections of one container start, by result (success, failure: permanent, retry: transient), reason and strategy.",
		}, []string{"result", "reason", "strategy"}),
		// The permanent failures of injections again, without reason: its
		// series exist at 0 from start-up (initStrategies), so that
		// increase() sees the first failure after a start, which a series
		// of jmx_operator_injections_total created by that failure (at 1)
		// would hide. HandlerkitInjectionFailures reads it.
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jmx_operator_injection_failures_total",
			Help: "Permanent injection failures by strategy (those of jmx_operator_injections_total{result=\"failure\"}), each enabled strategy's present at 0 from start-up.",
		}, []string{"strategy"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "jmx_operator_injection_duration_seconds",
			Help:    "Time one injection of one container took, from the request to its result.",
			Buckets: []float64{0.25, 0.5, 1, 2, 3, 5, 8, 13, 21, 34, 60, 120},
		}, []string{"strategy", "result"}),
		jvms: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jmx_operator_managed_jvms",
			Help: "JVMs that have the agent loaded, by exporter.",
		}, []string{"namespace", "exporter"}),
		pods: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jmx_operator_pods",
			Help: "Pods matched by each exporter, by state (injected, pending, failed, no_jvm, conflict, not_injected_at_start).",
		}, []string{"namespace", "exporter", "state"}),
	}
	if reg == nil {
		return m
	}
	if prev, ok := registerOnce.Load(reg); ok {
		return prev.(*metrics)
	}
	for _, c := range []prometheus.Collector{m.injections, m.failures, m.duration, m.jvms, m.pods} {
		if err := reg.Register(c); err != nil {
			if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
				_ = are
				continue
			}
		}
	}
	registerOnce.Store(reg, m)
	return m
}

func (m *metrics) observe(strategy, result, reason string, took time.Duration) {
	m.injections.WithLabelValues(result, reason, strategy).Inc()
	if result == resultFailure {
		m.failures.WithLabelValues(strategy).Inc()
	}
	m.duration.WithLabelValues(strategy, result).Observe(took.Seconds())
}

// initStrategies creates the jmx_operator_injection_failures_total series of
// each strategy name (inject.Strategy.Name()) and of its config rewrites
// ("<name>/reconfigure", as job.go labels them) at 0: every strategy value
// observe counts failures under.
func (m *metrics) initStrategies(names ...string) {
	for _, n := range names {
		m.failures.WithLabelValues(n)
		m.failures.WithLabelValues(n + "/reconfigure")
	}
}

func (m *metrics) setExporter(namespace, name string, jvms int, pods map[string]int) {
	m.jvms.WithLabelValues(namespace, name).Set(float64(jvms))
	for _, s := range podStates {
		m.pods.WithLabelValues(namespace, name, s).Set(float64(pods[s]))
	}
}

func (m *metrics) forgetExporter(namespace, name string) {
	m.jvms.DeleteLabelValues(namespace, name)
	for _, s := range podStates {
		m.pods.DeleteLabelValues(namespace, name, s)
	}
}
