package action_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// requestCounter counts the requests an Operator's clients send.
type requestCounter struct {
	mu   sync.Mutex
	reqs []string // "METHOD path"
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (c *requestCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.reqs = append(c.reqs, r.Method+" "+r.URL.Path)
		c.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// count returns how many requests since the last reset had method
// ("" for any) and a path containing pathPart.
func (c *requestCounter) count(method, pathPart string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, r := range c.reqs {
		m, p, _ := strings.Cut(r, " ")
		if (method == "" || m == method) && strings.Contains(p, pathPart) {
			n++
		}
	}
	return n
}

// writes counts POST, PUT, PATCH and DELETE requests since the last reset.
func (c *requestCounter) writes() int {
	return c.count(http.MethodPost, "") + c.count(http.MethodPut, "") + c.count(http.MethodPatch, "") + c.count(http.MethodDelete, "")
}

func (c *requestCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.reqs, "\n")
}

func (c *requestCounter) reset() {
	c.mu.Lock()
	c.reqs = nil
	c.mu.Unlock()
}

// countingFixture is a fixture whose Operator counts its requests.
type countingFixture struct {
	*fixture
	reqs *requestCounter
	r    *query.Reader
}

func newCountingFixture(t *testing.T, opts ...sdk.Option) *countingFixture {
	t.Helper()
	f := newFixture(t)
	c := &requestCounter{}
	cfg := rest.CopyConfig(f.env.Config())
	cfg.WrapTransport = c.wrap
	log := logrus.New()
	log.SetOutput(io.Discard)
	base := []sdk.Option{sdk.WithRegisterer(prometheus.NewRegistry()), sdk.WithLogger(log), sdk.WithMetricsAddr("0")}
	op, err := sdk.New(cfg, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	f.op, f.w = op, action.For(op)
	return &countingFixture{fixture: f, reqs: c, r: query.For(op)}
}

// run runs the Operator until the test ends and waits until it is ready.
func (f *countingFixture) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.op.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for f.op.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("operator not ready: %v", f.op.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// staleReader answers its first cached (not Live) Get with a snapshot
// taken earlier, as a cache that has not seen the latest write would, and
// passes every other read to the API server.
type staleReader struct {
	query.Interface
	mu       sync.Mutex
	snapshot runtime.Object
	served   int
}

func (s *staleReader) Get(ctx context.Context, into runtime.Object, opts ...query.Option) error {
	s.mu.Lock()
	snap := s.snapshot
	if len(opts) == 0 && snap != nil {
		s.snapshot = nil
		s.served++
	}
	s.mu.Unlock()
	if len(opts) == 0 && snap != nil {
		return copyInto(into, snap)
	}
	return s.Interface.Get(ctx, into, opts...)
}

// copyInto replaces into with a deep copy of from, of the same type.
func copyInto(into, from runtime.Object) error {
	dst, src := reflect.ValueOf(into), reflect.ValueOf(from.DeepCopyObject())
	if dst.Type() != src.Type() {
		return fmt.Errorf("snapshot is a %T, not a %T", from, into)
	}
	dst.Elem().Set(src.Elem())
	return nil
}
