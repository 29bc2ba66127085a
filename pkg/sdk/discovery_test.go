package sdk_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// A watch of a built-in kind that does not exist (a typo) can never start:
// Run fails at once with an error naming the kind, instead of retrying
// discovery forever as it does for a CRD that is not installed yet.
func TestWatchOfAKindThatCanNeverExistFailsRun(t *testing.T) {
	for _, c := range []struct{ apiVersion, kind string }{
		{"v1", "ConfigMapp"},
		{"apps/v1", "Deploymentt"},
	} {
		t.Run(c.kind, func(t *testing.T) {
			f := newFixture(t, sdk.WithDiscoveryBackoff(50*time.Millisecond, 100*time.Millisecond))
			if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
				t.Fatal(err)
			}
			if err := f.op.Watch(c.apiVersion, c.kind, f.ns, 0); err != nil {
				t.Fatal(err)
			}
			f.op.Handle(&recorder{})
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := f.op.Run(ctx)
			if ctx.Err() != nil {
				t.Fatalf("Run kept retrying until its context ended (returned %v); want a prompt error", err)
			}
			t.Logf("Run = %v", err)
			if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", c.kind)) || !strings.Contains(err.Error(), c.apiVersion) {
				t.Fatalf("Run = %v, want an error naming %s %s", err, c.apiVersion, c.kind)
			}
		})
	}
}

// A served CRD group may gain kinds when more CRDs are installed, so a
// missing kind there is retried, not fatal.
func TestMissingKindOfAServedCRDGroupIsRetried(t *testing.T) {
	group := fmt.Sprintf("partial%d.handlerkit.dev", time.Now().UnixNano())
	env := sdk.SharedEnv(t)
	if err := env.InstallCRDs(context.Background(), gadgetCRD(group)); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, sdk.WithDiscoveryBackoff(50*time.Millisecond, 100*time.Millisecond))
	if err := f.op.Watch(group+"/v1", "Doohickey", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(&recorder{})
	run := f.runAsync(t)
	if done, err := run.returned(2 * time.Second); done {
		t.Fatalf("Run returned %v for a kind whose CRD may still be installed; want it to keep retrying", err)
	}
}

// countDiscovery counts requests for the discovery roots /api and /apis.
type countDiscovery struct{ n atomic.Int64 }

func (c *countDiscovery) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		if p := req.URL.Path; p == "/api" || p == "/apis" {
			c.n.Add(1)
		}
		return rt.RoundTrip(req)
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Every lookup of a kind the server does not serve used to throw the whole
// discovery cache away and fetch it again. A handler that reads such a kind
// on every event must not cost a full discovery each time.
func TestLookupsOfAMissingKindResetDiscoveryAtMostOncePerInterval(t *testing.T) {
	env := sdk.SharedEnv(t)
	counter := &countDiscovery{}
	cfg := env.Config()
	cfg.WrapTransport = counter.wrap
	f := newFixtureWithConfig(t, env, cfg)
	missing := schema.GroupVersionKind{Group: "absent.handlerkit.dev", Version: "v1", Kind: "Nothing"}
	const lookups = 50
	start := time.Now()
	for range lookups {
		if _, err := f.op.RESTMapping(missing); !meta.IsNoMatchError(err) {
			t.Fatalf("RESTMapping(%s) = %v, want a no-match error", missing, err)
		}
	}
	elapsed := time.Since(start)
	got := counter.n.Load()
	t.Logf("%d lookups of a missing kind in %s made %d requests to /api and /apis", lookups, elapsed, got)
	if elapsed >= sdk.DiscoveryResetInterval {
		t.Skipf("the lookups took %s, longer than the reset interval; the bound does not apply", elapsed)
	}
	// One fetch to fill the cache and one reset: two requests for each root.
	if got > 4 {
		t.Errorf("%d lookups made %d discovery root requests, want at most 4", lookups, got)
	}
}
