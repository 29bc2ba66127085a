package sdk

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/client-go/rest"
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

// resourceRequests is handlerkit_client_requests_total: the requests of one
// Operator's own clients, by Kubernetes verb and resource. Unlike the
// rest_client_* series, which client-go's process-wide hooks fill with
// every client of the process and label by host, it is counted by a
// round-tripper on the Operator's rest.Config, so it holds exactly what the
// Operator's clients sent (and what clients built from RESTConfig send),
// and says which resource each request was for: what an operator costs the
// API server per object it handles.
func newResourceRequests(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	return registerOrReuse(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "handlerkit_client_requests_total",
		Help: "Requests the Operator's clients sent, by Kubernetes verb (get, list, watch, create, update, patch, delete, deletecollection), resource (plural, with /subresource; empty for discovery and other non-resource paths) and HTTP status code (<error> when no response came).",
	}, []string{"verb", "resource", "code"}))
}

// countRequests wraps rc's transport so that every request its clients
// send is counted in c.
func countRequests(rc *rest.Config, c *prometheus.CounterVec) {
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return &countingTransport{next: rt, counter: c} })
}

// countingTransport counts each request once its response (or error)
// arrives; a watch counts when its stream opens, a retried request once per
// attempt.
type countingTransport struct {
	next    http.RoundTripper
	counter *prometheus.CounterVec
}

// RoundTrip implements http.RoundTripper.
func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	code := "<error>"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	verb, resource := RequestVerb(req.Method, req.URL)
	t.counter.WithLabelValues(verb, resource, code).Inc()
	return resp, err
}

// WrappedRoundTripper lets client-go reach the transport underneath (see
// k8s.io/apimachinery/pkg/util/net.RoundTripperWrapper).
func (t *countingTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// RequestVerb returns the Kubernetes verb and resource of a request, the
// labels handlerkit_client_requests_total counts it under, as the
// API server's authorizer names them (k8s.io/apiserver's RequestInfo): the
// resource is the plural name, with "/subresource" when there is one
// ("pods/ephemeralcontainers", "prometheusjmxexporters/status"); requests
// outside a group version's resources (discovery, /version, /openapi) get
// the lower-case method as verb and an empty resource.
func RequestVerb(method string, u *url.URL) (verb, resource string) {
	parts := strings.Split(strings.Trim(u.Path, "/"), "/")
	switch {
	case len(parts) >= 3 && parts[0] == "api":
		parts = parts[2:] // api/v1/...
	case len(parts) >= 4 && parts[0] == "apis":
		parts = parts[3:] // apis/group/version/...
	default:
		return strings.ToLower(method), ""
	}
	watch := false
	if parts[0] == "watch" { // the deprecated /watch/ paths
		watch, parts = true, parts[1:]
	}
	if len(parts) >= 3 && parts[0] == "namespaces" && parts[2] != "status" && parts[2] != "finalize" {
		parts = parts[2:] // namespaces/<ns>/<resource>/...
	}
	if len(parts) == 0 || parts[0] == "" {
		return strings.ToLower(method), ""
	}
	resource = parts[0]
	if len(parts) >= 3 {
		resource += "/" + parts[2]
	}
	named := len(parts) >= 2
	switch method {
	case http.MethodGet, http.MethodHead:
		switch {
		case watch || u.Query().Get("watch") == "true" || u.Query().Get("watch") == "1":
			verb = "watch"
		case named:
			verb = "get"
		default:
			verb = "list"
		}
	case http.MethodPost:
		verb = "create"
	case http.MethodPut:
		verb = "update"
	case http.MethodPatch:
		verb = "patch"
	case http.MethodDelete:
		verb = "delete"
		if !named {
			verb = "deletecollection"
		}
	default:
		verb = strings.ToLower(method)
	}
	return verb, resource
}
