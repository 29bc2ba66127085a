package metrics_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/handlerkit/handlerkit/pkg/metrics"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// serve starts s and returns its base URL and a func that stops it and
// returns Serve's error.
func serve(t *testing.T, s *metrics.Server) (string, func() error) {
	t.Helper()
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx) }()
	stopped := false
	var result error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			result = <-done
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return "http://" + s.Addr(), stop
}

func TestServerAnswersMetricsHealthAndReadiness(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "test_things_total", Help: "Things."})
	reg.MustRegister(c)
	c.Add(3)
	var notReady atomic.Bool
	notReady.Store(true)
	s := metrics.NewServer("127.0.0.1:0",
		metrics.WithGatherer(reg),
		metrics.WithReadyCheck(func() error {
			if notReady.Load() {
				return errors.New("cache not synced yet")
			}
			return nil
		}),
	)
	if s.Addr() != "" {
		t.Fatalf("Addr before Start = %q, want empty", s.Addr())
	}
	base, _ := serve(t, s)

	code, body := get(t, base+"/metrics")
	if code != http.StatusOK || !strings.Contains(body, "test_things_total 3") {
		t.Errorf("/metrics = %d %q, want 200 with test_things_total 3", code, body)
	}
	if code, body := get(t, base+"/healthz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/healthz = %d %q, want 200 ok", code, body)
	}
	if code, body := get(t, base+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "cache not synced yet") {
		t.Errorf("/readyz while not ready = %d %q, want 503 with the error text", code, body)
	}
	notReady.Store(false)
	if code, body := get(t, base+"/readyz"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/readyz when ready = %d %q, want 200 ok", code, body)
	}
}

func TestHealthCheckFailureAnswers503(t *testing.T) {
	s := metrics.NewServer("127.0.0.1:0", metrics.WithHealthCheck(func() error { return errors.New("informer stuck") }))
	base, _ := serve(t, s)
	if code, body := get(t, base+"/healthz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "informer stuck") {
		t.Errorf("/healthz = %d %q, want 503 with the error text", code, body)
	}
}

func TestStartReportsPortInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = metrics.NewServer(l.Addr().String()).Start()
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Start on a used port = %v, want an address-in-use error", err)
	}
}

func TestServeStopsOnCancelAndFreesThePort(t *testing.T) {
	s := metrics.NewServer("127.0.0.1:0", metrics.WithShutdownTimeout(time.Second))
	base, stop := serve(t, s)
	if code, _ := get(t, base+"/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz = %d before stop", code)
	}
	if err := stop(); err != nil {
		t.Fatalf("Serve after cancel = %v, want nil", err)
	}
	l, err := net.Listen("tcp", s.Addr())
	if err != nil {
		t.Fatalf("port still bound after Serve returned: %v", err)
	}
	l.Close()
}

func TestStartTwiceIsAnError(t *testing.T) {
	s := metrics.NewServer("127.0.0.1:0")
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = s.Serve(ctx)
	})
	if err := s.Start(); err == nil {
		t.Fatal("second Start succeeded, want an error")
	}
}
