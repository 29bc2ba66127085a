package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/workqueue"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// callLog records when each key was handled.
type callLog struct {
	mu    sync.Mutex
	times map[string][]time.Time
}

func (c *callLog) add(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.times == nil {
		c.times = map[string][]time.Time{}
	}
	c.times[name] = append(c.times[name], time.Now())
	return len(c.times[name])
}

func (c *callLog) get(name string) []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.times[name]...)
}

func nameOf(e sdk.Event) string {
	m, _ := metaOf(e)
	return m.GetName()
}

// startWithHandler watches ConfigMaps in the fixture's namespace and runs fn.
func startWithHandler(t *testing.T, f *fixture, fn sdk.HandlerFunc, opts ...sdk.WatchOption) string {
	t.Helper()
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, opts...); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(fn)
	f.start(t)
	return "configmap/" + f.ns
}

func (f *fixture) createCM(t *testing.T, name string) {
	t.Helper()
	if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Create(context.Background(), configMap(f.ns, name, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestThousandObjectsAreAllHandledAndKeysNeverRunConcurrently(t *testing.T) {
	f := newFixture(t)
	const n, workers = 1000, 4
	var (
		mu          sync.Mutex
		inFlight    = map[string]int{}
		handled     = map[string]bool{}
		running     int
		maxRunning  int
		selfOverlap atomic.Int32
	)
	startWithHandler(t, f, func(_ context.Context, e sdk.Event) error {
		key := nameOf(e)
		mu.Lock()
		inFlight[key]++
		if inFlight[key] > 1 {
			selfOverlap.Add(1)
		}
		running++
		maxRunning = max(maxRunning, running)
		mu.Unlock()
		time.Sleep(2 * time.Millisecond) // long enough for other workers to overlap
		mu.Lock()
		inFlight[key]--
		running--
		handled[key] = true
		mu.Unlock()
		return nil
	}, sdk.WithNumWorkers(workers))

	cs, err := kubernetes.NewForConfig(fastConfig(f.env.Config()))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 8 {
				cm := configMap(f.ns, fmt.Sprintf("cm-%04d", i), map[string]string{"i": fmt.Sprint(i)})
				if _, err := cs.CoreV1().ConfigMaps(f.ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
				// Touch every tenth object again so keys also get updates
				// while they may be in flight.
				if i%10 == 0 {
					cm.Data["again"] = "yes"
					if _, err := cs.CoreV1().ConfigMaps(f.ns).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "all 1000 objects handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == n
	})
	if v := selfOverlap.Load(); v != 0 {
		t.Errorf("a key was handled by two workers at once %d times", v)
	}
	mu.Lock()
	defer mu.Unlock()
	if maxRunning < 2 {
		t.Errorf("at most %d handlers ran at once with %d workers, want distinct keys to overlap", maxRunning, workers)
	}
	if maxRunning > workers {
		t.Errorf("%d handlers ran at once, more than the %d workers", maxRunning, workers)
	}
}

func TestErrorsAreRetriedWithBackoffUntilSuccess(t *testing.T) {
	const base = 20 * time.Millisecond
	f := newFixture(t, sdk.WithBackoff(base, 10*time.Second))
	var calls callLog
	watch := startWithHandler(t, f, func(_ context.Context, e sdk.Event) error {
		if n := calls.add(nameOf(e)); n <= 4 {
			return fmt.Errorf("failure %d", n)
		}
		return nil
	})
	f.createCM(t, "flaky")
	eventually(t, 20*time.Second, "success after four failures", func() bool {
		return f.counter(t, "handlerkit_handle_total", map[string]string{"watch": watch, "result": "success"}) == 1
	})
	times := calls.get("flaky")
	if len(times) != 5 {
		t.Fatalf("handled %d times, want 5 (4 failures, 1 success)", len(times))
	}
	for i := 1; i < len(times); i++ {
		// The per-item limiter doubles from base: 20ms, 40ms, 80ms, 160ms.
		want := base << (i - 1)
		if gap := times[i].Sub(times[i-1]); gap < want {
			t.Errorf("retry %d came after %s, want at least the %s backoff", i, gap, want)
		}
	}
	if got := f.counter(t, "handlerkit_handle_total", map[string]string{"watch": watch, "result": "error"}); got != 4 {
		t.Errorf("error count = %v, want 4", got)
	}
	if got := f.counter(t, "workqueue_retries_total", map[string]string{"name": watch}); got != 4 {
		t.Errorf("workqueue_retries_total = %v, want 4", got)
	}
}

func TestRequeueAfterHandlesAgainLaterWithoutCountingAnError(t *testing.T) {
	const after = 300 * time.Millisecond
	f := newFixture(t)
	var calls callLog
	watch := startWithHandler(t, f, func(_ context.Context, e sdk.Event) error {
		if calls.add(nameOf(e)) == 1 {
			return sdk.RequeueAfter(after)
		}
		return nil
	})
	f.createCM(t, "later")
	eventually(t, 10*time.Second, "second handling", func() bool {
		return f.counter(t, "handlerkit_handle_total", map[string]string{"watch": watch, "result": "success"}) == 1
	})
	times := calls.get("later")
	if len(times) != 2 {
		t.Fatalf("handled %d times, want 2", len(times))
	}
	if gap := times[1].Sub(times[0]); gap < after {
		t.Errorf("requeued handling came after %s, want at least %s", gap, after)
	}
	for result, want := range map[string]float64{"requeue_after": 1, "error": 0} {
		if got := f.counter(t, "handlerkit_handle_total", map[string]string{"watch": watch, "result": result}); got != want {
			t.Errorf("%s count = %v, want %v", result, got, want)
		}
	}
	// The workqueue counts every delayed add as a retry; the framework's
	// own counters above are what tell a requeue from a failure.
	if got := f.counter(t, "workqueue_retries_total", map[string]string{"name": watch}); got != 1 {
		t.Errorf("workqueue_retries_total = %v, want 1 (the delayed add)", got)
	}
}

func TestTerminalErrorIsRecordedAndNotRetried(t *testing.T) {
	f := newFixture(t)
	var calls callLog
	watch := startWithHandler(t, f, func(_ context.Context, e sdk.Event) error {
		calls.add(nameOf(e))
		if nameOf(e) == "broken" {
			return sdk.Terminal(errors.New("spec can never work"))
		}
		return nil
	})
	f.createCM(t, "broken")
	eventually(t, 10*time.Second, "terminal handling", func() bool { return len(calls.get("broken")) == 1 })
	// One worker: once a later key is handled, the terminal key's
	// processing (and any requeue it would have done) is over.
	f.createCM(t, "sentinel")
	eventually(t, 10*time.Second, "sentinel handled", func() bool { return len(calls.get("sentinel")) == 1 })
	if n := len(calls.get("broken")); n != 1 {
		t.Errorf("terminal key handled %d times, want 1", n)
	}
	if got := f.counter(t, "handlerkit_handle_total", map[string]string{"watch": watch, "result": "terminal"}); got != 1 {
		t.Errorf("terminal count = %v, want 1", got)
	}
	if got := f.counter(t, "workqueue_retries_total", map[string]string{"name": watch}); got != 0 {
		t.Errorf("workqueue_retries_total = %v, want 0", got)
	}
	if !sdk.IsTerminal(fmt.Errorf("wrapped: %w", sdk.Terminal(errors.New("x")))) || sdk.Terminal(nil) != nil {
		t.Error("Terminal/IsTerminal do not round-trip")
	}
}

func TestPanicIsRecoveredCountedAndRetried(t *testing.T) {
	f := newFixture(t)
	var calls callLog
	watch := startWithHandler(t, f, func(_ context.Context, e sdk.Event) error {
		if calls.add(nameOf(e)) == 1 {
			panic("handler bug")
		}
		return nil
	})
	f.createCM(t, "boom")
	eventually(t, 10*time.Second, "success after the panic", func() bool {
		return f.counter(t, "handlerkit_handle_total", map[string]string{"watch": watch, "result": "success"}) == 1
	})
	if got := f.counter(t, "handlerkit_handle_total", map[string]string{"watch": watch, "result": "panic"}); got != 1 {
		t.Errorf("panic count = %v, want 1", got)
	}
	if got := f.counter(t, "workqueue_retries_total", map[string]string{"name": watch}); got != 1 {
		t.Errorf("workqueue_retries_total = %v, want 1", got)
	}
	if got := f.counter(t, "handlerkit_active_workers", map[string]string{"watch": watch}); got != 0 {
		t.Errorf("active workers after a panic = %v, want 0", got)
	}
}

func TestMaxRetriesGivesUp(t *testing.T) {
	f := newFixture(t, sdk.WithMaxRetries(2))
	var calls callLog
	watch := startWithHandler(t, f, func(_ context.Context, e sdk.Event) error {
		calls.add(nameOf(e))
		if nameOf(e) == "hopeless" {
			return errors.New("always fails")
		}
		return nil
	})
	f.createCM(t, "hopeless")
	eventually(t, 10*time.Second, "three attempts", func() bool { return len(calls.get("hopeless")) >= 3 })
	f.createCM(t, "sentinel")
	eventually(t, 10*time.Second, "sentinel handled", func() bool { return len(calls.get("sentinel")) == 1 })
	if n := len(calls.get("hopeless")); n != 3 {
		t.Errorf("handled %d times, want 3 (first try and two retries)", n)
	}
	if got := f.counter(t, "workqueue_retries_total", map[string]string{"name": watch}); got != 2 {
		t.Errorf("workqueue_retries_total = %v, want 2", got)
	}
}

// RequeueAfter(0) and negative delays go through the watch's rate limiter,
// so a handler that keeps asking for an immediate requeue backs off instead
// of spinning. With a 10ms base doubling to 1s, half a second holds a
// handful of handlings; a hot loop makes tens of thousands.
func TestRequeueAfterZeroBacksOffInsteadOfSpinning(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second} {
		t.Run(d.String(), func(t *testing.T) {
			f := newFixture(t, sdk.WithBackoff(10*time.Millisecond, time.Second))
			var calls atomic.Int64
			watch := startWithHandler(t, f, func(_ context.Context, e sdk.Event) error {
				if nameOf(e) != "again" {
					return nil
				}
				calls.Add(1)
				return sdk.RequeueAfter(d)
			})
			f.createCM(t, "again")
			eventually(t, 10*time.Second, "first handling", func() bool { return calls.Load() > 0 })
			const window = 500 * time.Millisecond
			start := calls.Load()
			// A deliberate pause, not a wait: the handlings counted in it bound the requeue rate from
			// above, so a slower machine only counts fewer.
			time.Sleep(window)
			n := calls.Load() - start
			t.Logf("RequeueAfter(%s): %d handlings in %s", d, n, window)
			if n >= 100 {
				t.Errorf("RequeueAfter(%s) handled the key %d times in %s, want the backoff to hold it under 100", d, n, window)
			}
			if got := f.counter(t, "handlerkit_handle_total", map[string]string{"watch": watch, "result": "error"}); got != 0 {
				t.Errorf("RequeueAfter counted %v errors, want 0", got)
			}
		})
	}
}

// WithMaxRetries(n) retries a failing key n times after its first failure,
// n+1 handlings in all, whatever rate limiter the watch uses; requeues do
// not count as failures.
func TestMaxRetriesAllowsExactlyNRetriesAfterTheFirstFailure(t *testing.T) {
	bucketOnly := func() workqueue.TypedRateLimiter[string] {
		// A limiter that does not count requeues per key.
		return &workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(1000), 1000)}
	}
	for _, c := range []struct {
		name     string
		opts     []sdk.Option
		requeues int
	}{
		{"default limiter", nil, 0},
		{"limiter without per-key counts", []sdk.Option{sdk.WithRateLimiter(bucketOnly)}, 0},
		{"requeues before the failures", nil, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			const maxRetries = 2
			f := newFixture(t, append([]sdk.Option{sdk.WithMaxRetries(maxRetries)}, c.opts...)...)
			var calls callLog
			watch := startWithHandler(t, f, func(_ context.Context, e sdk.Event) error {
				n := calls.add(nameOf(e))
				switch {
				case nameOf(e) != "hopeless":
					return nil
				case n <= c.requeues:
					return sdk.RequeueAfter(0)
				}
				return errors.New("always fails")
			})
			f.createCM(t, "hopeless")
			want := c.requeues + 1 + maxRetries
			eventually(t, 10*time.Second, "the last retry", func() bool { return len(calls.get("hopeless")) >= want })
			// One worker: once a later key is handled, the hopeless key's
			// last handling and any requeue it would have caused are over.
			f.createCM(t, "sentinel")
			eventually(t, 10*time.Second, "sentinel handled", func() bool { return len(calls.get("sentinel")) == 1 })
			if n := len(calls.get("hopeless")); n != want {
				t.Errorf("handled %d times, want %d (%d requeues, the first failure and %d retries)", n, want, c.requeues, maxRetries)
			}
			if got := f.counter(t, "handlerkit_handle_total", map[string]string{"watch": watch, "result": "error"}); got != 1+maxRetries {
				t.Errorf("error count = %v, want %d", got, 1+maxRetries)
			}
		})
	}
}
