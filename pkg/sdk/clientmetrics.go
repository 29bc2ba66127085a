package sdk

import (
	"context"
	"errors"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// client-go reports its requests through process-global hooks that can be
// set only once (k8s.io/client-go/tools/metrics.Register), and every
// request of every goroutine reads them without synchronisation. This
// package sets them in init, before any goroutine of the program runs, to
// record into these collectors, and every Operator registers the same
// collectors into its own registry. Names, labels, help and buckets follow
// k8s.io/component-base, so existing dashboards work.
var (
	clientRequestBuckets = []float64{0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0}

	clientRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "Number of HTTP requests, partitioned by status code, method, and host.",
	}, []string{"code", "method", "host"})
	clientRequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_request_duration_seconds",
		Help:    "Request latency in seconds. Broken down by verb, and host.",
		Buckets: clientRequestBuckets,
	}, []string{"verb", "host"})
	clientRateLimiterDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rest_client_rate_limiter_duration_seconds",
		Help:    "Client side rate limiter latency in seconds. Broken down by verb, and host.",
		Buckets: clientRequestBuckets,
	}, []string{"verb", "host"})
)

// requestResult records rest_client_requests_total.
type requestResult struct{}

// Increment implements clientmetrics.ResultMetric.
func (requestResult) Increment(_ context.Context, code, method, host string) {
	clientRequests.WithLabelValues(code, method, host).Inc()
}

// requestLatency records a latency histogram by verb and host.
type requestLatency struct{ h *prometheus.HistogramVec }

// Observe implements clientmetrics.LatencyMetric.
func (l requestLatency) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	l.h.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}

// Importing this package sets client-go's request metric hooks, as
// controller-runtime's metrics package does: the hooks record every
// client-go request of the process, not only the Operators'. Register
// takes effect once per process, so when another package's init (or a
// program's own code run before this init) registered first, its hooks
// stay and this package's collectors record nothing.
func init() {
	clientmetrics.Register(clientmetrics.RegisterOpts{
		RequestResult:      requestResult{},
		RequestLatency:     requestLatency{clientRequestDuration},
		RateLimiterLatency: requestLatency{clientRateLimiterDuration},
	})
}

// clientMetricsHooked reports whether client-go's hooks record into this
// package's collectors: they do not when another library registered first.
// The hooks are written only during init (Register is once-only), so
// reading them here does not race with requests.
func clientMetricsHooked() bool {
	_, ours := clientmetrics.RequestResult.(requestResult)
	return ours
}

// registerClientMetrics puts client-go's request metrics into reg. A
// conflict with metrics that another library registered under the same
// names is logged, not fatal: the metrics are then that library's.
func registerClientMetrics(reg prometheus.Registerer, log logrus.FieldLogger) {
	if !clientMetricsHooked() {
		log.Warn("client-go's request metrics were hooked by another library before package sdk's init; rest_client_* series are not exported by the Operator")
		return
	}
	for _, c := range []prometheus.Collector{clientRequests, clientRequestDuration, clientRateLimiterDuration} {
		err := reg.Register(c)
		var are prometheus.AlreadyRegisteredError
		if err == nil || (errors.As(err, &are) && are.ExistingCollector == c) {
			continue
		}
		log.WithError(err).Warn("cannot register client-go's request metrics; leaving the existing ones")
	}
}
