package sdk_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

func TestCancelCancelsHandlersAtOnceAndWaitsForThem(t *testing.T) {
	f := newFixture(t, sdk.WithGracefulTimeout(time.Minute))
	entered := make(chan struct{})
	release := make(chan struct{})
	cancelledAt := make(chan time.Time, 1)
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		close(entered)
		<-ctx.Done()
		cancelledAt <- time.Now()
		<-release // a write that does not watch its context, finishing after the cancel
		return nil
	}))
	run := f.runAsync(t)
	eventually(t, 30*time.Second, "ready", func() bool { return f.op.Ready() == nil })
	f.createCM(t, "slow")
	<-entered

	stoppedAt := time.Now()
	run.cancel()
	select {
	case at := <-cancelledAt:
		t.Logf("shutdown -> handler context cancelled: %s", at.Sub(stoppedAt))
	case <-time.After(10 * time.Second):
		t.Fatal("the handler's context was not cancelled when Run's context ended")
	}
	// Run must still wait for the handler: it cannot have returned while the handler runs.
	if done, err := run.returned(300 * time.Millisecond); done {
		t.Fatalf("Run returned (%v) while a handler was still running", err)
	}
	if err := f.op.Ready(); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("Ready while draining = %v, want shutting down", err)
	}
	close(release)
	done, err := run.returned(30 * time.Second)
	if !done || err != nil {
		t.Fatalf("Run after the handler finished: returned=%v err=%v, want nil", done, err)
	}
}

func TestHandlerIgnoringItsContextIsLeftBehindAfterTheGracefulTimeout(t *testing.T) {
	hook := &messageHook{substr: "still running after the graceful timeout"}
	logger := testLogger()
	logger.AddHook(hook)
	const graceful = 200 * time.Millisecond
	f := newFixture(t, sdk.WithGracefulTimeout(graceful), sdk.WithLogger(logger))
	entered := make(chan struct{})
	release := make(chan struct{})
	defer close(release)
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		close(entered)
		<-release
		return nil
	}))
	run := f.runAsync(t)
	eventually(t, 30*time.Second, "ready", func() bool { return f.op.Ready() == nil })
	f.createCM(t, "stuck")
	<-entered
	stoppedAt := time.Now()
	run.cancel()
	if done, err := run.returned(30 * time.Second); !done || err != nil {
		t.Fatalf("Run: returned=%v err=%v, want nil", done, err)
	}
	if took := time.Since(stoppedAt); took < graceful {
		t.Errorf("Run returned after %s, before the graceful timeout %s", took, graceful)
	}
	if !hook.fired() {
		t.Error("no log line says a handler outlived the graceful timeout")
	}
}

// messageHook records whether a log message contained substr.
type messageHook struct {
	substr string
	mu     sync.Mutex
	seen   bool
}

func (h *messageHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *messageHook) Fire(e *logrus.Entry) error {
	if strings.Contains(e.Message, h.substr) {
		h.mu.Lock()
		h.seen = true
		h.mu.Unlock()
	}
	return nil
}

func (h *messageHook) fired() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.seen
}

func TestCacheThatCannotSyncMakesRunFail(t *testing.T) {
	env := sdk.SharedEnv(t)
	// A user without RBAC permissions cannot list, so the cache never syncs.
	cfg, err := env.ConfigForUser("nobody")
	if err != nil {
		t.Fatal(err)
	}
	f := newFixtureWithConfig(t, env, cfg, sdk.WithCacheSyncTimeout(500*time.Millisecond))
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(sdk.HandlerFunc(func(context.Context, sdk.Event) error { return nil }))
	err = f.op.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "did not sync") {
		t.Fatalf("Run = %v, want a cache sync timeout", err)
	}
}

type failingElector struct{}

func (failingElector) Lead(context.Context) (context.Context, error) {
	return nil, errors.New("lease API unreachable")
}

func (failingElector) Release(context.Context) error { return nil }

func (failingElector) Healthy() error { return nil }

func TestElectorFailureIsReturned(t *testing.T) {
	f := newFixture(t, sdk.WithElector(failingElector{}))
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(sdk.HandlerFunc(func(context.Context, sdk.Event) error { return nil }))
	err := f.op.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "lease API unreachable") {
		t.Fatalf("Run = %v, want the elector's error", err)
	}
}

func TestPerWatchHandlerOverridesTheDefault(t *testing.T) {
	f := newFixture(t)
	general, special := &recorder{}, &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.op.Watch("v1", "Secret", f.ns, 0, sdk.WithHandler(special)); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(general)
	f.start(t)
	f.createCM(t, "to-general")
	createSecret(t, f, "to-special")
	eventually(t, 10*time.Second, "both handled", func() bool {
		return len(general.find("to-general", nil)) == 1 && len(special.find("to-special", nil)) == 1
	})
	if len(general.find("to-special", nil)) != 0 || len(special.find("to-general", nil)) != 0 {
		t.Error("an event reached the wrong handler")
	}
}
