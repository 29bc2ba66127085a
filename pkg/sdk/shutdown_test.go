package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

func TestCancelLetsARunningHandlerFinishWithALiveContext(t *testing.T) {
	f := newFixture(t, sdk.WithGracefulTimeout(time.Minute))
	entered := make(chan struct{})
	release := make(chan struct{})
	ctxErrAtRelease := make(chan error, 1)
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		close(entered)
		<-release
		ctxErrAtRelease <- ctx.Err()
		return nil
	}))
	run := f.runAsync(t)
	eventually(t, 30*time.Second, "ready", func() bool { return f.op.Ready() == nil })
	f.createCM(t, "slow")
	<-entered

	run.cancel()
	// Run must wait for the handler: it cannot have returned while the
	// handler is still blocked.
	if done, err := run.returned(200 * time.Millisecond); done {
		t.Fatalf("Run returned (%v) while a handler was still running", err)
	}
	close(release)
	if err := <-ctxErrAtRelease; err != nil {
		t.Errorf("handler context during the graceful period = %v, want still alive", err)
	}
	done, err := run.returned(30 * time.Second)
	if !done || err != nil {
		t.Fatalf("Run after the handler finished: returned=%v err=%v, want nil", done, err)
	}
}

func TestGracefulTimeoutCancelsTheHandlersContext(t *testing.T) {
	f := newFixture(t, sdk.WithGracefulTimeout(200*time.Millisecond))
	entered := make(chan struct{})
	cancelled := make(chan struct{})
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		close(entered)
		<-ctx.Done()
		close(cancelled)
		return ctx.Err()
	}))
	run := f.runAsync(t)
	eventually(t, 30*time.Second, "ready", func() bool { return f.op.Ready() == nil })
	f.createCM(t, "stuck")
	<-entered
	run.cancel()
	select {
	case <-cancelled:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler's context was never cancelled after the graceful timeout")
	}
	if done, err := run.returned(30 * time.Second); !done || err != nil {
		t.Fatalf("Run: returned=%v err=%v, want nil", done, err)
	}
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
