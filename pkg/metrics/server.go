package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultShutdownTimeout is how long Serve waits for in-flight requests when
// its context ends, unless WithShutdownTimeout says otherwise.
const DefaultShutdownTimeout = 5 * time.Second

// Server serves /metrics, /healthz and /readyz on one address.
type Server struct {
	addr            string
	gatherer        prometheus.Gatherer
	ready           func() error
	healthy         func() error
	shutdownTimeout time.Duration

	mu       sync.Mutex
	listener net.Listener
	bound    string
}

// ServerOption configures a Server.
type ServerOption func(*Server)

// WithGatherer sets where /metrics reads from. The default is
// prometheus.DefaultGatherer.
func WithGatherer(g prometheus.Gatherer) ServerOption {
	return func(s *Server) {
		if g != nil {
			s.gatherer = g
		}
	}
}

// WithReadyCheck sets the check behind /readyz: 200 "ok" when f returns nil,
// otherwise 503 with the error text. Without it /readyz always answers ok.
func WithReadyCheck(f func() error) ServerOption {
	return func(s *Server) { s.ready = f }
}

// WithHealthCheck sets the check behind /healthz, answered like /readyz.
// Without it /healthz always answers ok, meaning "the process serves HTTP".
func WithHealthCheck(f func() error) ServerOption {
	return func(s *Server) { s.healthy = f }
}

// WithShutdownTimeout bounds how long Serve waits for in-flight requests
// after its context ends. The default is DefaultShutdownTimeout.
func WithShutdownTimeout(d time.Duration) ServerOption {
	return func(s *Server) {
		if d > 0 {
			s.shutdownTimeout = d
		}
	}
}

// NewServer returns a Server for addr (host:port; port 0 picks a free port).
// Nothing is bound until Start.
func NewServer(addr string, opts ...ServerOption) *Server {
	s := &Server{
		addr:            addr,
		gatherer:        prometheus.DefaultGatherer,
		shutdownTimeout: DefaultShutdownTimeout,
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Start binds the listener. It is synchronous so that a port already in use
// is reported to the caller instead of being lost in a goroutine.
func (s *Server) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listener != nil {
		return errors.New("metrics: server already started")
	}
	l, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("metrics: listen on %q: %w", s.addr, err)
	}
	s.listener = l
	s.bound = l.Addr().String()
	return nil
}

// Addr returns the bound address once Start succeeded, and "" before.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bound
}

// Handler returns the HTTP handler with the three endpoints, for callers
// that want to mount them on their own server.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", probe(s.healthy))
	mux.HandleFunc("/readyz", probe(s.ready))
	return mux
}

// Serve answers requests until ctx ends, then shuts down gracefully. It
// binds first if Start was not called.
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
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	select {
	case err := <-served:
		return fmt.Errorf("metrics: serve on %s: %w", l.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), s.shutdownTimeout)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-served
	if err != nil {
		return fmt.Errorf("metrics: shut down: %w", err)
	}
	return nil
}

func probe(check func() error) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if check != nil {
			if err := check(); err != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				fmt.Fprintln(w, err.Error())
				return
			}
		}
		fmt.Fprintln(w, "ok")
	}
}
