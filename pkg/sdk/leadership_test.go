package sdk_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// gateElector grants one term per token sent on grants, ends the current term on revoke, and reports the health
// it is told to. It counts Release calls.
type gateElector struct {
	grants chan struct{}

	mu       sync.Mutex
	end      context.CancelFunc
	health   error
	releases int
}

func newGateElector() *gateElector { return &gateElector{grants: make(chan struct{}, 1)} }

func (g *gateElector) Lead(ctx context.Context) (context.Context, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-g.grants:
	}
	term, end := context.WithCancel(context.Background())
	g.mu.Lock()
	g.end = end
	g.mu.Unlock()
	return term, nil
}

func (g *gateElector) revoke() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.end != nil {
		g.end()
	}
}

func (g *gateElector) Release(context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.releases++
	if g.end != nil {
		g.end()
	}
	return nil
}

func (g *gateElector) Healthy() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.health
}

func (g *gateElector) setHealth(err error) {
	g.mu.Lock()
	g.health = err
	g.mu.Unlock()
}

func (g *gateElector) releaseCount() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.releases
}

func TestHealthzServesTheElectorsHealth(t *testing.T) {
	el := newGateElector()
	f := newFixture(t, sdk.WithElector(el), sdk.WithMetricsAddr("127.0.0.1:0"))
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(sdk.HandlerFunc(func(context.Context, sdk.Event) error { return nil }))
	f.runAsync(t)
	eventually(t, 10*time.Second, "metrics server bound", func() bool { return f.op.MetricsAddr() != "" })
	base := "http://" + f.op.MetricsAddr()
	httpGet(t, base+"/healthz", http.StatusOK)

	el.setHealth(errors.New("lease not renewed for 40s"))
	body := httpGet(t, base+"/healthz", http.StatusServiceUnavailable)
	if !strings.Contains(body, "lease not renewed for 40s") {
		t.Errorf("/healthz body = %q, want the elector's reason", body)
	}
	if err := f.op.Healthy(); err == nil {
		t.Error("Healthy() = nil while the elector is unhealthy")
	}
	el.setHealth(nil)
	httpGet(t, base+"/healthz", http.StatusOK)
}

func TestEveryRunEndReleasesLeadership(t *testing.T) {
	el := newGateElector()
	f := newFixture(t, sdk.WithElector(el))
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(sdk.HandlerFunc(func(context.Context, sdk.Event) error { return nil }))

	// Cancelled while standing by: Release is still called, in case Lead held something when it gave up.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := f.op.Run(ctx); err != nil {
		t.Fatalf("Run cancelled while standing by = %v, want nil", err)
	}
	if got := el.releaseCount(); got != 1 {
		t.Fatalf("Release calls after a Run that never led = %d, want 1", got)
	}

	// Leadership lost: Release once the handlers stopped.
	el.grants <- struct{}{}
	run := f.runAsync(t)
	eventually(t, 30*time.Second, "ready", func() bool { return f.op.Ready() == nil })
	el.revoke()
	if done, err := run.returned(30 * time.Second); !done || !errors.Is(err, sdk.ErrLeadershipLost) {
		t.Fatalf("Run after revoke: returned=%v err=%v, want ErrLeadershipLost", done, err)
	}
	if got := el.releaseCount(); got != 2 {
		t.Fatalf("Release calls = %d, want 2", got)
	}
}

func TestQueryReadsThroughAfterRunAndWhileStandingBy(t *testing.T) {
	el := newGateElector()
	f := newFixture(t, sdk.WithElector(el))
	reader := query.For(f.op)
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	f.op.Handle(rec)
	ctx := context.Background()
	cms := f.env.Clientset().CoreV1().ConfigMaps(f.ns)
	get := func(name string) error {
		return reader.Get(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}})
	}

	// First term: "kept" is cached.
	el.grants <- struct{}{}
	run := f.runAsync(t)
	eventually(t, 30*time.Second, "ready", func() bool { return f.op.Ready() == nil })
	f.createCM(t, "kept")
	eventually(t, 10*time.Second, "kept handled", func() bool { return len(rec.find("kept", nil)) > 0 })
	if err := get("kept"); err != nil {
		t.Fatalf("Get while leading: %v", err)
	}
	el.revoke()
	if done, _ := run.returned(30 * time.Second); !done {
		t.Fatal("Run did not return after leadership ended")
	}

	// Run has returned: its cache is frozen. Changes made now must be visible to query.
	if err := cms.Delete(ctx, "kept", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := get("kept"); !apierrors.IsNotFound(err) {
		t.Fatalf("Get of a deleted object after Run returned = %v, want NotFound (a stale cache answered)", err)
	}
	f.createCM(t, "new-after-run")
	if err := get("new-after-run"); err != nil {
		t.Fatalf("Get of an object created after Run returned: %v", err)
	}

	// Second Run, standing by (no grant yet): still read through.
	standby := f.runAsync(t)
	eventually(t, 10*time.Second, "standing by", func() bool { return f.op.Ready() == nil })
	if err := cms.Delete(ctx, "new-after-run", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := get("new-after-run"); !apierrors.IsNotFound(err) {
		t.Fatalf("Get of a deleted object while standing by = %v, want NotFound", err)
	}
	f.createCM(t, "new-while-standing-by")
	if err := get("new-while-standing-by"); err != nil {
		t.Fatalf("Get while standing by: %v", err)
	}
	if err := standby.stop(); err != nil {
		t.Fatalf("Run standing by: %v", err)
	}
}
