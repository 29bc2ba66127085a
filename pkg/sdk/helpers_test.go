package sdk_test

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

// testLogger discards logs unless HANDLERKIT_TEST_LOGS is set.
func testLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	if os.Getenv("HANDLERKIT_TEST_LOGS") != "" {
		l.SetOutput(os.Stderr)
		l.SetLevel(logrus.DebugLevel)
	}
	return l
}

// fixture is an Operator on the shared control plane with its own registry
// and namespace.
type fixture struct {
	env *testenv.Environment
	op  *sdk.Operator
	reg *prometheus.Registry
	ns  string
}

func newFixture(t *testing.T, opts ...sdk.Option) *fixture {
	t.Helper()
	env := sdk.SharedEnv(t)
	return newFixtureWithConfig(t, env, env.Config(), opts...)
}

func newFixtureWithConfig(t *testing.T, env *testenv.Environment, cfg *rest.Config, opts ...sdk.Option) *fixture {
	t.Helper()
	ns, err := env.CreateNamespace(context.Background(), "sdk-")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	base := []sdk.Option{
		sdk.WithRegisterer(reg),
		sdk.WithMetricsAddr("0"),
		sdk.WithLogger(testLogger()),
		sdk.WithBackoff(time.Millisecond, time.Second),
	}
	op, err := sdk.New(cfg, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{env: env, op: op, reg: reg, ns: ns}
}

// start runs the Operator until the test ends, fails the test if Run
// returns an error, and waits until the Operator is ready.
func (f *fixture) start(t *testing.T) (stop func() error) {
	t.Helper()
	h := f.runAsync(t)
	eventually(t, 30*time.Second, "operator ready", func() bool {
		if done, err := h.returned(0); done {
			t.Fatalf("Run returned early: %v", err)
		}
		return f.op.Ready() == nil
	})
	return h.stop
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func configMap(ns, name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
}

// recorder is a Handler that records events per key.
type recorder struct {
	mu     sync.Mutex
	events []sdk.Event
	fn     func(sdk.Event) error
}

func (r *recorder) Handle(_ context.Context, e sdk.Event) error {
	r.mu.Lock()
	r.events = append(r.events, e)
	fn := r.fn
	r.mu.Unlock()
	if fn != nil {
		return fn(e)
	}
	return nil
}

func (r *recorder) snapshot() []sdk.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]sdk.Event(nil), r.events...)
}

// find returns the events for name that satisfy match.
func (r *recorder) find(name string, match func(sdk.Event) bool) []sdk.Event {
	var out []sdk.Event
	for _, e := range r.snapshot() {
		m, err := metaOf(e)
		if err != nil || m.GetName() != name {
			continue
		}
		if match == nil || match(e) {
			out = append(out, e)
		}
	}
	return out
}

func metaOf(e sdk.Event) (metav1.Object, error) {
	if o, ok := e.Object.(metav1.Object); ok {
		return o, nil
	}
	return nil, errors.New("no metadata")
}

// metricValue returns the value of the series of name with exactly labels,
// and whether it exists.
func metricValue(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !labelsMatch(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue(), true
			case m.Gauge != nil:
				return m.Gauge.GetValue(), true
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount()), true
			}
		}
	}
	return 0, false
}

func labelsMatch(m *dto.Metric, want map[string]string) bool {
	if len(m.GetLabel()) != len(want) {
		return false
	}
	for _, l := range m.GetLabel() {
		if want[l.GetName()] != l.GetValue() {
			return false
		}
	}
	return true
}

// fastConfig is cfg without client-side rate limiting, for tests that write
// many objects quickly.
func fastConfig(cfg *rest.Config) *rest.Config {
	cfg.QPS = -1
	cfg.Burst = 0
	return cfg
}

// runHandle is a Run started in the background.
type runHandle struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// stop cancels Run and returns its error.
func (h *runHandle) stop() error {
	h.cancel()
	select {
	case <-h.done:
		return h.err
	case <-time.After(time.Minute):
		return errors.New("Run did not return within a minute of cancel")
	}
}

// returned reports whether Run returned within timeout, and its error.
func (h *runHandle) returned(timeout time.Duration) (bool, error) {
	select {
	case <-h.done:
		return true, h.err
	case <-time.After(timeout):
		return false, nil
	}
}

// runAsync starts Run without waiting for readiness; the test's cleanup
// stops it and fails the test if Run returned an unexpected error.
func (f *fixture) runAsync(t *testing.T) *runHandle {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h := &runHandle{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		h.err = f.op.Run(ctx)
	}()
	t.Cleanup(func() {
		if err := h.stop(); err != nil && !errors.Is(err, sdk.ErrLeadershipLost) {
			t.Errorf("Run: %v", err)
		}
	})
	return h
}

func (f *fixture) counter(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	v, ok := metricValue(t, f.reg, name, labels)
	if !ok {
		t.Fatalf("metric %s%v does not exist", name, labels)
	}
	return v
}

func newRegistry() *prometheus.Registry { return prometheus.NewRegistry() }

func createSecret(t *testing.T, f *fixture, name string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}}
	if _, err := f.env.Clientset().CoreV1().Secrets(f.ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

var metaCreate = metav1.CreateOptions{}
