package webhook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"mime"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Defaults of ServerOptions.
const (
	// DefaultAddr is where a Server listens unless told otherwise.
	DefaultAddr = ":9443"
	// DefaultMaxBodyBytes bounds a request's body: an AdmissionReview holds
	// an object and its old version, each up to the apiserver's 3 MiB.
	DefaultMaxBodyBytes = 7 << 20
	// DefaultHandlerTimeout bounds one handler call. The apiserver's own
	// limit (the webhook's timeoutSeconds, at most 30 s) also applies: the
	// server answers before it when the request says how long it waits.
	DefaultHandlerTimeout = 10 * time.Second
	// DefaultShutdownTimeout is how long Serve waits for requests in flight
	// once its context ends.
	DefaultShutdownTimeout = 5 * time.Second
)

// Handler decides on one admission request. Its response's UID is set by
// the Server; a nil response allows the request unchanged.
type Handler interface {
	Admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse
}

// HandlerFunc adapts a function to a Handler.
type HandlerFunc func(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse

// Admit calls f.
func (f HandlerFunc) Admit(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	return f(ctx, req)
}

// ServerOptions configures a Server. GetCertificate and Handlers are
// required.
type ServerOptions struct {
	// Addr is the address to listen on. Default: DefaultAddr.
	Addr string
	// GetCertificate returns the serving certificate for each TLS
	// handshake, so a new certificate is served without a restart:
	// CertManager.GetCertificate.
	GetCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)
	// Handlers maps URL paths (such as "/mutate-pods") to their handlers.
	Handlers map[string]Handler
	// MaxBodyBytes bounds a request's body; a larger one gets 413.
	// Default: DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// HandlerTimeout bounds a handler call; past it the request is allowed
	// unchanged with a warning. Default: DefaultHandlerTimeout.
	HandlerTimeout time.Duration
	// ShutdownTimeout bounds the wait for requests in flight once Serve's
	// context ends. Default: DefaultShutdownTimeout.
	ShutdownTimeout time.Duration
	// Registerer receives the request metrics. Default:
	// prometheus.DefaultRegisterer.
	Registerer prometheus.Registerer
	// Logger logs handler failures. Default: logrus.StandardLogger().
	Logger logrus.FieldLogger

	// noKeepAlives closes each connection after one request, so that every
	// call is a TLS handshake of its own (the tests' view of trust).
	noKeepAlives bool
}

// Server serves admission.k8s.io/v1 AdmissionReviews over HTTPS. It fails
// open: a handler that panics or overruns its time allows the object
// unchanged, with a warning the client sees, so that the webhook never
// stands between a user and their pod.
type Server struct {
	o       ServerOptions
	log     logrus.FieldLogger
	metrics *serverMetrics

	mu       sync.Mutex
	listener net.Listener
	bound    string

	inFlight atomic.Int64 // requests being answered
}

// NewServer checks opts and fills in their defaults.
func NewServer(opts ServerOptions) (*Server, error) {
	o := opts
	if o.GetCertificate == nil {
		return nil, errors.New("webhook: ServerOptions need GetCertificate")
	}
	if len(o.Handlers) == 0 {
		return nil, errors.New("webhook: ServerOptions need at least one handler")
	}
	for path, h := range o.Handlers {
		if !strings.HasPrefix(path, "/") || h == nil {
			return nil, fmt.Errorf("webhook: handler path %q must start with / and have a handler", path)
		}
	}
	if o.Addr == "" {
		o.Addr = DefaultAddr
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.HandlerTimeout <= 0 {
		o.HandlerTimeout = DefaultHandlerTimeout
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.DefaultRegisterer
	}
	if o.Logger == nil {
		o.Logger = logrus.StandardLogger()
	}
	m, err := newServerMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	return &Server{o: o, log: o.Logger, metrics: m}, nil
}

// Start binds the listener, so that a port in use is reported to the
// caller. Serve calls it when it was not called.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return errors.New("webhook: server already started")
	}
	l, err := net.Listen("tcp", s.o.Addr)
	if err != nil {
		return fmt.Errorf("webhook: listen on %q: %w", s.o.Addr, err)
	}
	s.listener, s.bound = l, l.Addr().String()
	return nil
}

// Addr returns the bound address once Start succeeded, and "" before.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound
}

// Handler returns the HTTP handler of the admission paths, for tests and
// for callers with a server of their own.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	for path, h := range s.o.Handlers {
		mux.Handle(path, s.review(path, h))
	}
	return mux
}

// Serve answers requests over TLS until ctx ends, then shuts down
// gracefully: requests in flight get up to ShutdownTimeout to finish.
func (s *Server) Serve(ctx context.Context) error {
	s.mu.Lock()
	l := s.listener
	s.mu.Unlock()
	if l == nil {
		if err := s.Start(); err != nil {
			return err
		}
		s.mu.Lock()
		l = s.listener
		s.mu.Unlock()
	}
	// HTTP/1.1 only: the apiserver speaks it, and HTTP/2's stream resets
	// (CVE-2023-44487) are a cost a webhook need not carry.
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	srv := &http.Server{
		Handler:           s.Handler(),
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: s.o.GetCertificate},
		Protocols:         protocols,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      s.o.HandlerTimeout + 30*time.Second,
		IdleTimeout:       90 * time.Second,
		// TLS handshake failures tell of callers that do not trust the
		// certificate: worth a line in the operator's log.
		ErrorLog: log.New(logWriter{s.log, s.metrics.handshakeErrors}, "", 0),
	}
	srv.SetKeepAlivesEnabled(!s.o.noKeepAlives)
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(l, "", "") }()
	select {
	case err := <-served:
		return fmt.Errorf("webhook: serve on %s: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.o.ShutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	if err != nil {
		// Shutdown also waits for connections that never sent a request
		// (a client dials ahead, or reads the certificate and hangs up):
		// it counts them idle only after 5 s. Those are closed; only
		// requests cut short are an error.
		_ = srv.Close()
		if n := s.inFlight.Load(); n == 0 {
			err = nil
		} else {
			err = fmt.Errorf("%w with %d requests in flight", err, n)
		}
	}
	<-served
	if err != nil {
		return fmt.Errorf("webhook: shut down: %w", err)
	}
	return nil
}

// logWriter writes the http.Server's own messages to the logger, and
// counts the failed TLS handshakes among them.
type logWriter struct {
	log        logrus.FieldLogger
	handshakes prometheus.Counter
}

func (w logWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "TLS handshake error") {
		w.handshakes.Inc()
	}
	w.log.Warn("webhook: " + msg)
	return len(p), nil
}

// The results a request is counted under.
const (
	resultAllowed = "allowed" // allowed unchanged
	resultPatched = "patched" // allowed with a patch
	resultDenied  = "denied"
	resultPanic   = "panic"   // the handler panicked: allowed unchanged
	resultTimeout = "timeout" // the handler overran: allowed unchanged
	resultInvalid = "invalid" // not an AdmissionReview this server takes
)

func (s *Server) review(path string, h Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		result := resultInvalid
		s.inFlight.Add(1)
		defer s.inFlight.Add(-1)
		defer func() {
			s.metrics.requests.WithLabelValues(path, result).Inc()
			s.metrics.latency.WithLabelValues(path).Observe(time.Since(start).Seconds())
		}()
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "webhook: POST an AdmissionReview", http.StatusMethodNotAllowed)
			return
		}
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			http.Error(w, "webhook: Content-Type must be application/json", http.StatusUnsupportedMediaType)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.o.MaxBodyBytes))
		if err != nil {
			var tooLarge *http.MaxBytesError
			if errors.As(err, &tooLarge) {
				http.Error(w, fmt.Sprintf("webhook: body over %d bytes", tooLarge.Limit), http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "webhook: reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		var in admissionv1.AdmissionReview
		if err := json.Unmarshal(body, &in); err != nil {
			http.Error(w, "webhook: not an AdmissionReview: "+err.Error(), http.StatusBadRequest)
			return
		}
		gvk := admissionv1.SchemeGroupVersion.WithKind("AdmissionReview")
		if in.APIVersion != gvk.GroupVersion().String() || in.Kind != gvk.Kind || in.Request == nil {
			http.Error(w, fmt.Sprintf("webhook: want an %s %s with a request (admissionReviewVersions: [v1])", gvk.GroupVersion(), gvk.Kind), http.StatusBadRequest)
			return
		}
		var resp *admissionv1.AdmissionResponse
		resp, result = s.admit(r, path, h, in.Request)
		out := admissionv1.AdmissionReview{
			TypeMeta: metav1.TypeMeta{APIVersion: in.APIVersion, Kind: in.Kind},
			Response: resp,
		}
		data, err := json.Marshal(&out)
		if err != nil {
			result = resultInvalid
			http.Error(w, "webhook: encoding the response: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(data)
	})
}

// admit calls h in a goroutine of its own, so that a handler that neither
// returns nor heeds its context in time cannot hold the request: the
// request is then allowed and the call left to finish on its own.
func (s *Server) admit(r *http.Request, path string, h Handler, req *admissionv1.AdmissionRequest) (*admissionv1.AdmissionResponse, string) {
	timeout := s.o.HandlerTimeout
	// The apiserver adds ?timeout= (its timeoutSeconds); answering before
	// it gives up lets the warning reach the user.
	if t, err := time.ParseDuration(r.URL.Query().Get("timeout")); err == nil && t > 0 {
		timeout = min(timeout, t*4/5)
	}
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	rlog := s.log.WithFields(logrus.Fields{"path": path, "uid": req.UID, "kind": req.Kind.Kind,
		"namespace": req.Namespace, "name": req.Name, "operation": req.Operation})
	done := make(chan *admissionv1.AdmissionResponse, 1)
	panicked := make(chan any, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				rlog.WithField("stack", string(debug.Stack())).Errorf("webhook: handler panicked: %v", p)
				panicked <- p
			}
		}()
		done <- h.Admit(ctx, req)
	}()
	var resp *admissionv1.AdmissionResponse
	select {
	case resp = <-done:
	case <-panicked:
		return failOpen(req, "the handler failed"), resultPanic
	case <-ctx.Done():
		rlog.Errorf("webhook: handler did not answer within %s; allowed unchanged", timeout)
		return failOpen(req, "the handler did not answer in time"), resultTimeout
	}
	if resp == nil {
		resp = &admissionv1.AdmissionResponse{Allowed: true}
	}
	resp.UID = req.UID
	if len(resp.Patch) > 0 && resp.PatchType == nil {
		pt := admissionv1.PatchTypeJSONPatch
		resp.PatchType = &pt
	}
	switch {
	case !resp.Allowed:
		return resp, resultDenied
	case len(resp.Patch) > 0:
		return resp, resultPatched
	}
	return resp, resultAllowed
}

// failOpen allows req unchanged with a warning that says why.
func failOpen(req *admissionv1.AdmissionRequest, why string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{
		UID:      req.UID,
		Allowed:  true,
		Warnings: []string{"admission webhook: " + why + "; admitted unchanged"},
	}
}

// serverMetrics are a Server's metrics.
type serverMetrics struct {
	requests        *prometheus.CounterVec
	latency         *prometheus.HistogramVec
	handshakeErrors prometheus.Counter
}

func newServerMetrics(reg prometheus.Registerer) (*serverMetrics, error) {
	m := &serverMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "handlerkit_webhook_requests_total",
			Help: "Admission requests by path and result: allowed, patched, denied, panic and timeout (both allowed unchanged), invalid (answered with an HTTP error).",
		}, []string{"path", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "handlerkit_webhook_request_duration_seconds",
			Help:    "Time to answer an admission request, by path.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"path"}),
		handshakeErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "handlerkit_webhook_tls_handshake_errors_total",
			Help: "Failed TLS handshakes, such as a caller that does not trust the served certificate (the apiserver with a stale caBundle).",
		}),
	}
	var err error
	if m.requests, err = register(reg, m.requests); err != nil {
		return nil, err
	}
	if m.latency, err = register(reg, m.latency); err != nil {
		return nil, err
	}
	if m.handshakeErrors, err = register(reg, m.handshakeErrors); err != nil {
		return nil, err
	}
	return m, nil
}
