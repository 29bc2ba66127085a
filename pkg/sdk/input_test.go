package sdk_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// offline is a config for tests that never reach a server.
func offline() *rest.Config { return &rest.Config{Host: "https://127.0.0.1:1"} }

func TestNewRejectsBadOptions(t *testing.T) {
	cases := []struct {
		name string
		cfg  *rest.Config
		opts []sdk.Option
		want string
	}{
		{"nil config", nil, nil, "nil rest.Config"},
		{"nil scheme", offline(), []sdk.Option{sdk.WithScheme(nil)}, "nil scheme"},
		{"nil logger", offline(), []sdk.Option{sdk.WithLogger(nil)}, "nil logger"},
		{"nil registerer", offline(), []sdk.Option{sdk.WithRegisterer(nil)}, "nil prometheus registerer"},
		{"zero sync timeout", offline(), []sdk.Option{sdk.WithCacheSyncTimeout(0)}, "timeouts must be positive"},
		{"backoff max below base", offline(), []sdk.Option{sdk.WithBackoff(time.Second, time.Millisecond)}, "invalid backoff"},
		{"empty bucket", offline(), []sdk.Option{sdk.WithRetryBucket(0, 0)}, "invalid retry bucket"},
		{"negative max retries", offline(), []sdk.Option{sdk.WithMaxRetries(-1)}, "negative max retries"},
		{"bad discovery backoff", offline(), []sdk.Option{sdk.WithDiscoveryBackoff(0, 0)}, "invalid discovery backoff"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := append([]sdk.Option{sdk.WithRegisterer(newRegistry())}, c.opts...)
			_, err := sdk.New(c.cfg, opts...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("New = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestWatchRejectsBadInput(t *testing.T) {
	cases := []struct {
		name             string
		apiVersion, kind string
		resync           time.Duration
		opts             []sdk.WatchOption
		want             string
	}{
		{"bad apiVersion", "a/b/c", "Thing", 0, nil, "invalid apiVersion"},
		{"no version", "apps/", "Deployment", 0, nil, "has no version"},
		{"empty kind", "v1", "", 0, nil, "empty kind"},
		{"negative resync", "v1", "ConfigMap", -time.Second, nil, "negative resync"},
		{"no workers", "v1", "ConfigMap", 0, []sdk.WatchOption{sdk.WithNumWorkers(0)}, "need at least 1"},
		{"bad label selector", "v1", "ConfigMap", 0, []sdk.WatchOption{sdk.WithLabelSelector("a in (")}, "invalid label selector"},
		{"bad field selector", "v1", "ConfigMap", 0, []sdk.WatchOption{sdk.WithFieldSelector("a==b==c")}, "invalid field selector"},
		{"bad owner", "v1", "Secret", 0, []sdk.WatchOption{sdk.WithOwnerOf("a/b/c", "X")}, "WithOwnerOf"},
		{"owner without kind", "v1", "Secret", 0, []sdk.WatchOption{sdk.WithOwnerOf("v1", "")}, "empty kind"},
		{"duplicate name", "v1", "ConfigMap", 0, []sdk.WatchOption{sdk.WithName("taken")}, "already used"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			op, err := sdk.New(offline(), sdk.WithRegisterer(newRegistry()))
			if err != nil {
				t.Fatal(err)
			}
			if err := op.Watch("v1", "ConfigMap", "", 0, sdk.WithName("taken")); err != nil {
				t.Fatal(err)
			}
			err = op.Watch(c.apiVersion, c.kind, "", c.resync, c.opts...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Watch = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestRunRejectsIncompleteSetups(t *testing.T) {
	noop := sdk.HandlerFunc(func(context.Context, sdk.Event) error { return nil })
	cases := []struct {
		name  string
		setup func(*sdk.Operator) error
		want  string
	}{
		{"no watches", func(op *sdk.Operator) error { op.Handle(noop); return nil }, "call Watch before Run"},
		{"no handler", func(op *sdk.Operator) error { return op.Watch("v1", "ConfigMap", "", 0) }, "has no handler"},
		{"owner watch missing", func(op *sdk.Operator) error {
			op.Handle(noop)
			return op.Watch("v1", "Secret", "", 0, sdk.WithOwnerOf("apps/v1", "Deployment"))
		}, "no watch on that kind"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			op, err := sdk.New(offline(), sdk.WithRegisterer(newRegistry()), sdk.WithMetricsAddr("0"))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.setup(op); err != nil {
				t.Fatal(err)
			}
			err = op.Run(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

func TestRunReportsABusyMetricsPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	op, err := sdk.New(offline(), sdk.WithRegisterer(newRegistry()), sdk.WithMetricsAddr(l.Addr().String()), sdk.WithLogger(testLogger()))
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Watch("v1", "ConfigMap", "", 0); err != nil {
		t.Fatal(err)
	}
	op.Handle(sdk.HandlerFunc(func(context.Context, sdk.Event) error { return nil }))
	err = op.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Run = %v, want an address-in-use error", err)
	}
}

func TestRunRejectsANamespaceOnAClusterScopedKind(t *testing.T) {
	f := newFixture(t)
	if err := f.op.Watch("v1", "Namespace", "default", 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(sdk.HandlerFunc(func(context.Context, sdk.Event) error { return nil }))
	err := f.op.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "cluster-scoped") {
		t.Fatalf("Run = %v, want a cluster-scoped error", err)
	}
}
