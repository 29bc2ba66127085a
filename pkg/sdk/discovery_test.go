package sdk_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

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
