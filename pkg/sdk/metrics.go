package sdk

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// Handling results, the values of the result label of handlerkit_handle_total.
const (
	resultSuccess      = "success"
	resultError        = "error"
	resultRequeueAfter = "requeue_after"
	resultTerminal     = "terminal"
	resultPanic        = "panic"
)

var handleResults = []string{resultSuccess, resultError, resultRequeueAfter, resultTerminal, resultPanic}

// handlerMetrics are the framework's own metrics. Vectors are shared by
// every watch of an Operator and, through registerOrReuse, by every Operator
// that uses the same registry.
type handlerMetrics struct {
	events     *prometheus.CounterVec
	handled    *prometheus.CounterVec
	duration   *prometheus.HistogramVec
	active     *prometheus.GaugeVec
	maxWorkers *prometheus.GaugeVec
	decodeErrs *prometheus.CounterVec
	watchErrs  *prometheus.CounterVec
}

func newHandlerMetrics(reg prometheus.Registerer) (*handlerMetrics, error) {
	m := &handlerMetrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handlerkit_events_total",
			Help: "Informer notifications received, by watch and type (add, update, delete, resync).",
		}, []string{"watch", "type"}),
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handlerkit_handle_total",
			Help: "Handler calls, by watch and result (success, error, requeue_after, terminal, panic).",
		}, []string{"watch", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "handlerkit_handle_duration_seconds",
			Help:    "Time spent in the handler, by watch.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"watch"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handlerkit_active_workers",
			Help: "Workers currently running the handler, by watch.",
		}, []string{"watch"}),
		maxWorkers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "handlerkit_max_workers",
			Help: "Configured number of workers, by watch.",
		}, []string{"watch"}),
		decodeErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handlerkit_decode_errors_total",
			Help: "Objects that their Go type in the scheme could not decode, cached and delivered unstructured instead, by watch.",
		}, []string{"watch"}),
		watchErrs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handlerkit_watch_errors_total",
			Help: "Failed lists and watches of a watch's informer, which client-go retries, by watch.",
		}, []string{"watch"}),
	}
	var err error
	if m.events, err = registerOrReuse(reg, m.events); err != nil {
		return nil, err
	}
	if m.handled, err = registerOrReuse(reg, m.handled); err != nil {
		return nil, err
	}
	if m.duration, err = registerOrReuse(reg, m.duration); err != nil {
		return nil, err
	}
	if m.active, err = registerOrReuse(reg, m.active); err != nil {
		return nil, err
	}
	if m.maxWorkers, err = registerOrReuse(reg, m.maxWorkers); err != nil {
		return nil, err
	}
	if m.decodeErrs, err = registerOrReuse(reg, m.decodeErrs); err != nil {
		return nil, err
	}
	if m.watchErrs, err = registerOrReuse(reg, m.watchErrs); err != nil {
		return nil, err
	}
	return m, nil
}

// initWatch creates every series of a watch, so counters read 0 before the
// first event instead of being absent.
func (m *handlerMetrics) initWatch(watch string, workers int) {
	for _, t := range eventTypes {
		m.events.WithLabelValues(watch, string(t))
	}
	for _, r := range handleResults {
		m.handled.WithLabelValues(watch, r)
	}
	m.duration.WithLabelValues(watch)
	m.active.WithLabelValues(watch)
	m.maxWorkers.WithLabelValues(watch).Set(float64(workers))
	m.decodeErrs.WithLabelValues(watch)
	m.watchErrs.WithLabelValues(watch)
}

// registerOrReuse registers c, or returns the identical collector already
// registered, so two Operators can share one registry.
func registerOrReuse[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		var zero C
		return zero, err
	}
	return c, nil
}

// queueMetrics provides the standard workqueue_* metrics for the Operator's
// named queues through the queue's own MetricsProvider, so that the global
// workqueue.SetProvider is never touched.
type queueMetrics struct {
	depth          *prometheus.GaugeVec
	adds           *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	workDuration   *prometheus.HistogramVec
	unfinished     *prometheus.GaugeVec
	longestRunning *prometheus.GaugeVec
	retries        *prometheus.CounterVec
}

var _ workqueue.MetricsProvider = (*queueMetrics)(nil)

func newQueueMetrics(reg prometheus.Registerer) (*queueMetrics, error) {
	// Names, help and buckets follow k8s.io/component-base so that existing
	// workqueue dashboards work unchanged.
	buckets := prometheus.ExponentialBuckets(10e-9, 10, 10)
	q := &queueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "workqueue_depth", Help: "Current depth of workqueue",
		}, []string{"name"}),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "workqueue_adds_total", Help: "Total number of adds handled by workqueue",
		}, []string{"name"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "workqueue_queue_duration_seconds", Help: "How long in seconds an item stays in workqueue before being requested.",
			Buckets: buckets,
		}, []string{"name"}),
		workDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "workqueue_work_duration_seconds", Help: "How long in seconds processing an item from workqueue takes.",
			Buckets: buckets,
		}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "workqueue_unfinished_work_seconds",
			Help: "How many seconds of work has done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
		}, []string{"name"}),
		longestRunning: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "workqueue_longest_running_processor_seconds",
			Help: "How many seconds has the longest running processor for workqueue been running.",
		}, []string{"name"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "workqueue_retries_total", Help: "Total number of retries handled by workqueue",
		}, []string{"name"}),
	}
	var err error
	if q.depth, err = registerOrReuse(reg, q.depth); err != nil {
		return nil, err
	}
	if q.adds, err = registerOrReuse(reg, q.adds); err != nil {
		return nil, err
	}
	if q.latency, err = registerOrReuse(reg, q.latency); err != nil {
		return nil, err
	}
	if q.workDuration, err = registerOrReuse(reg, q.workDuration); err != nil {
		return nil, err
	}
	if q.unfinished, err = registerOrReuse(reg, q.unfinished); err != nil {
		return nil, err
	}
	if q.longestRunning, err = registerOrReuse(reg, q.longestRunning); err != nil {
		return nil, err
	}
	if q.retries, err = registerOrReuse(reg, q.retries); err != nil {
		return nil, err
	}
	return q, nil
}

// initQueue creates the series of a watch's queue, so that they read 0
// from the moment the watch is registered, not only once Run creates the
// queue.
func (q *queueMetrics) initQueue(name string) {
	q.depth.WithLabelValues(name)
	q.adds.WithLabelValues(name)
	q.latency.WithLabelValues(name)
	q.workDuration.WithLabelValues(name)
	q.unfinished.WithLabelValues(name)
	q.longestRunning.WithLabelValues(name)
	q.retries.WithLabelValues(name)
}

// NewDepthMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return q.depth.WithLabelValues(name)
}

// NewAddsMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return q.adds.WithLabelValues(name)
}

// NewLatencyMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return q.latency.WithLabelValues(name)
}

// NewWorkDurationMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return q.workDuration.WithLabelValues(name)
}

// NewUnfinishedWorkSecondsMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.unfinished.WithLabelValues(name)
}

// NewLongestRunningProcessorSecondsMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return q.longestRunning.WithLabelValues(name)
}

// NewRetriesMetric implements workqueue.MetricsProvider.
func (q *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return q.retries.WithLabelValues(name)
}
