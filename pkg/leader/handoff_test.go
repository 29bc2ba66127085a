package leader_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// These tests hold the framework and both election modes to the two-phase leadership contract: when leadership
// ends, the handlers' context is cancelled at once; leadership is released only after the handlers have returned
// (or the graceful timeout ran out); and when Run returns, the replica holds nothing.

// recordingElector notes when Lead granted leadership.
type recordingElector struct {
	sdk.Elector
	mu    sync.Mutex
	ledAt time.Time
}

func (r *recordingElector) Lead(ctx context.Context) (context.Context, error) {
	lc, err := r.Elector.Lead(ctx)
	if err == nil {
		r.mu.Lock()
		r.ledAt = time.Now()
		r.mu.Unlock()
	}
	return lc, err
}

// led returns when Lead granted leadership, or the zero time.
func (r *recordingElector) led() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ledAt
}

// stuckHandler blocks on the ConfigMap named "slow" until released, whatever its context says, as a handler in
// the middle of a write that does not watch its context would. It records when its context was cancelled and when
// it returned.
type stuckHandler struct {
	entered  chan struct{}
	release  chan struct{}
	once     sync.Once
	mu       sync.Mutex
	cancelAt time.Time
	returnAt time.Time
	// onCancel, when set (under mu), runs in the handler at the moment its
	// context ends.
	onCancel func()
}

func newStuckHandler() *stuckHandler {
	return &stuckHandler{entered: make(chan struct{}), release: make(chan struct{})}
}

func (h *stuckHandler) Handle(ctx context.Context, e sdk.Event) error {
	if e.Object.(*corev1.ConfigMap).Name != "slow" {
		return nil
	}
	h.once.Do(func() { close(h.entered) })
	done := ctx.Done()
	for {
		select {
		case <-done:
			h.mu.Lock()
			h.cancelAt = time.Now()
			onCancel := h.onCancel
			h.mu.Unlock()
			if onCancel != nil {
				onCancel()
			}
			done = nil
		case <-h.release:
			h.mu.Lock()
			h.returnAt = time.Now()
			h.mu.Unlock()
			return nil
		}
	}
}

func (h *stuckHandler) times() (cancelAt, returnAt time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cancelAt, h.returnAt
}

func createConfigMap(t *testing.T, ns, name string) {
	t.Helper()
	if _, err := env.Clientset().CoreV1().ConfigMaps(ns).Create(context.Background(),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// holds reports whether pod holds the mode's lock or lease right now.
func (m electionMode) holds(t *testing.T, ns, pod string) bool {
	t.Helper()
	ctx := context.Background()
	if m.lock == leaseName {
		l, err := env.Clientset().CoordinationV1().Leases(ns).Get(ctx, leaseName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		return l.Spec.HolderIdentity != nil && *l.Spec.HolderIdentity == pod
	}
	owner, ok := lockHolder(t, ns)
	return ok && owner == pod
}

// lockHolder returns the name of the pod owning the leader-for-life lock, if the lock exists.
func lockHolder(t *testing.T, ns string) (string, bool) {
	t.Helper()
	cm, err := env.Clientset().CoreV1().ConfigMaps(ns).Get(context.Background(), lockName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range cm.OwnerReferences {
		if r.Kind == "Pod" {
			return r.Name, true
		}
	}
	return "", true
}

// startPair starts replica op-a, waits until it leads, then starts the stand-by op-b. op-a's handler is stuck.
func startPair(t *testing.T, m electionMode, ns string, graceful time.Duration, logger logrus.FieldLogger) (
	a *operatorReplica, stuck *stuckHandler, b *operatorReplica, bElector *recordingElector) {
	t.Helper()
	createPod(t, ns, "op-a", operatorLabels)
	createPod(t, ns, "op-b", operatorLabels)
	stuck = newStuckHandler()
	t.Cleanup(func() {
		select {
		case <-stuck.release:
		default:
			close(stuck.release)
		}
	})
	opts := []sdk.Option{sdk.WithGracefulTimeout(graceful)}
	if logger != nil {
		opts = append(opts, sdk.WithLogger(logger))
	}
	a = startOperatorWith(t, ns, "op-a", func(reg prometheus.Registerer) sdk.Elector {
		return m.elector(t, ns, "op-a", reg)
	}, stuck, opts...)
	eventually(t, 30*time.Second, "op-a leads with synced caches", func() bool {
		return m.holds(t, ns, "op-a") && a.op.Ready() == nil && a.scrapedStatus(t, m.lock) == "1"
	})
	bElector = &recordingElector{}
	b = startOperator(t, ns, "op-b", func(reg prometheus.Registerer) sdk.Elector {
		bElector.Elector = m.elector(t, ns, "op-b", reg)
		return bElector
	})
	createConfigMap(t, ns, "slow")
	select {
	case <-stuck.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("op-a's handler never started")
	}
	return a, stuck, b, bElector
}

func TestShutdownCancelsHandlersAtOnceAndReleasesOnlyAfterThem(t *testing.T) {
	for _, m := range electionModes {
		t.Run(m.name, func(t *testing.T) {
			ns := newNamespace(t)
			a, stuck, b, bElector := startPair(t, m, ns, time.Minute, nil)

			stoppedAt := time.Now()
			a.cancel()
			eventually(t, 10*time.Second, "op-a's handler context is cancelled", func() bool {
				c, _ := stuck.times()
				return !c.IsZero()
			})
			cancelAt, _ := stuck.times()
			t.Logf("shutdown -> handler context cancelled: %s", cancelAt.Sub(stoppedAt))

			// The handler still runs: op-a must keep its leadership, and op-b must not lead, for as long as it does.
			// The stand-by retries several times a second, so this window gives it many chances to get it wrong.
			deadline := time.Now().Add(1500 * time.Millisecond)
			for time.Now().Before(deadline) {
				if !bElector.led().IsZero() {
					t.Fatal("op-b leads while op-a's handler still runs")
				}
				if !m.holds(t, ns, "op-a") {
					t.Fatal("op-a gave up leadership while its handler still runs")
				}
				time.Sleep(50 * time.Millisecond) // deliberate: the window proves that nothing changes
			}

			close(stuck.release)
			select {
			case <-a.done:
			case <-time.After(30 * time.Second):
				t.Fatal("op-a's Run did not return after its handler did")
			}
			if a.runErr != nil {
				t.Fatalf("op-a Run = %v, want nil after its context ended", a.runErr)
			}
			eventually(t, 30*time.Second, "op-b leads", func() bool { return !bElector.led().IsZero() })
			_, returnAt := stuck.times()
			if led := bElector.led(); led.Before(returnAt) {
				t.Fatalf("op-b led at %s, before op-a's handler returned at %s", led, returnAt)
			}
			t.Logf("handler returned -> stand-by leads: %s", bElector.led().Sub(returnAt))
			eventually(t, 30*time.Second, "the new leader handles events", func() bool { return b.handled.Load() > 0 })
		})
	}
}

func TestHandlerOutlivingTheGracefulTimeoutIsLoggedAndLeadershipReleased(t *testing.T) {
	for _, m := range electionModes {
		t.Run(m.name, func(t *testing.T) {
			ns := newNamespace(t)
			hook := &messageHook{substr: "still running after the graceful timeout", seen: make(chan struct{})}
			logger := logrus.New()
			logger.SetOutput(testWriterFor(t))
			logger.AddHook(hook)
			const graceful = 500 * time.Millisecond
			a, stuck, _, bElector := startPair(t, m, ns, graceful, logger.WithField("replica", "op-a"))

			stoppedAt := time.Now()
			a.cancel()
			select {
			case <-a.done:
			case <-time.After(30 * time.Second):
				t.Fatal("op-a's Run did not return after the graceful timeout")
			}
			t.Logf("shutdown -> Run returned with a stuck handler: %s (graceful timeout %s)", time.Since(stoppedAt), graceful)
			select {
			case <-hook.seen:
			default:
				t.Fatal("no log line says a handler outlived the graceful timeout")
			}
			eventually(t, 30*time.Second, "op-b leads while the stuck handler still runs", func() bool {
				return !bElector.led().IsZero()
			})
			if _, returnAt := stuck.times(); !returnAt.IsZero() {
				t.Fatal("the stuck handler returned; the test proves nothing")
			}
			t.Logf("shutdown -> stand-by leads: %s", bElector.led().Sub(stoppedAt))
		})
	}
}

// loseLeadership takes leadership away from op-a behind its back: another holder steals the lease, or the lock
// ConfigMap is deleted by hand. It returns when the theft began.
func loseLeadership(t *testing.T, m electionMode, ns string) time.Time {
	t.Helper()
	start := time.Now()
	ctx := testContext(t)
	if m.lock == leaseName {
		stealLease(t, ns)
		return start
	}
	if err := env.Clientset().CoreV1().ConfigMaps(ns).Delete(ctx, lockName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	return start
}

func TestLeadershipLossCancelsHandlersAtOnce(t *testing.T) {
	for _, m := range electionModes {
		t.Run(m.name, func(t *testing.T) {
			ns := newNamespace(t)
			a, stuck, _, _ := startPair(t, m, ns, time.Minute, nil)
			// What op-a's registry says at the moment its handler's context
			// ends: the status must be 0 by then (it was set only once
			// the term's goroutines had returned, and a check made just
			// after the cancellation read 1 under load).
			statusAtCancel := make(chan string, 1)
			stuck.mu.Lock()
			stuck.onCancel = func() { statusAtCancel <- a.gatheredStatus(m.lock) }
			stuck.mu.Unlock()

			lostAt := loseLeadership(t, m, ns)
			// The lease mode notices at the renew deadline (1.5s here), leader-for-life at the lock's delete event.
			eventually(t, 30*time.Second, "op-a's handler context is cancelled", func() bool {
				c, _ := stuck.times()
				return !c.IsZero()
			})
			cancelAt, _ := stuck.times()
			t.Logf("leadership taken away -> handler context cancelled: %s", cancelAt.Sub(lostAt))
			if got := <-statusAtCancel; got != "0" {
				t.Errorf("op-a's leader_election_master_status when its handler's context ended: %q, want 0", got)
			}
			if a.op.Ready() == nil && a.scrapedStatus(t, m.lock) == "1" {
				t.Error("op-a still reports itself as the leader after losing leadership")
			}
			close(stuck.release)
			select {
			case <-a.done:
			case <-time.After(30 * time.Second):
				t.Fatal("op-a's Run did not return after losing leadership")
			}
			if !errors.Is(a.runErr, sdk.ErrLeadershipLost) {
				t.Fatalf("op-a Run = %v, want ErrLeadershipLost", a.runErr)
			}
		})
	}
}

func TestRunFailingReleasesLeadership(t *testing.T) {
	for _, m := range electionModes {
		t.Run(m.name, func(t *testing.T) {
			ns := newNamespace(t)
			createPod(t, ns, "op-a", operatorLabels)
			createPod(t, ns, "op-b", operatorLabels)
			// A watch that can never work: a cluster-scoped kind in a namespace. Run fails once it leads.
			reg := prometheus.NewRegistry()
			op, err := sdk.New(env.Config(), sdk.WithElector(m.elector(t, ns, "op-a", reg)), sdk.WithMetricsAddr("0"),
				sdk.WithRegisterer(reg), sdk.WithLogger(testLogger(t).WithField("replica", "op-a")))
			if err != nil {
				t.Fatal(err)
			}
			if err := op.Watch("v1", "Namespace", ns, 0); err != nil {
				t.Fatal(err)
			}
			op.Handle(sdk.HandlerFunc(func(context.Context, sdk.Event) error { return nil }))
			runErr := op.Run(testContext(t))
			if runErr == nil || !strings.Contains(runErr.Error(), "cluster-scoped") {
				t.Fatalf("Run = %v, want the watch's error", runErr)
			}
			if m.holds(t, ns, "op-a") {
				t.Fatal("op-a still holds leadership after Run failed")
			}
			bElector := &recordingElector{}
			failedAt := time.Now()
			b := startOperator(t, ns, "op-b", func(reg prometheus.Registerer) sdk.Elector {
				bElector.Elector = m.elector(t, ns, "op-b", reg)
				return bElector
			})
			eventually(t, 30*time.Second, "op-b leads", func() bool { return !bElector.led().IsZero() })
			t.Logf("failed Run returned -> stand-by leads: %s", bElector.led().Sub(failedAt))
			createConfigMap(t, ns, "after")
			eventually(t, 30*time.Second, "op-b handles events", func() bool { return b.handled.Load() > 0 })
		})
	}
}

// testWriterFor returns a writer that logs to t until the test ends.
func testWriterFor(t *testing.T) *testWriter {
	w := &testWriter{t: t}
	t.Cleanup(w.close)
	return w
}
