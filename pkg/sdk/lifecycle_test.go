package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

func gadgetCRD(group string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "gadgets." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: "gadgets", Singular: "gadget", Kind: "Gadget", ListKind: "GadgetList"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:                   "object",
					XPreserveUnknownFields: ptrTo(true),
				}},
			}},
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

func TestCRDCreatedAfterRunStartsIsPickedUp(t *testing.T) {
	// A fresh group per run: CRDs outlive the test in the shared control plane.
	group := fmt.Sprintf("late%d.handlerkit.dev", time.Now().UnixNano())
	f := newFixture(t, sdk.WithDiscoveryBackoff(100*time.Millisecond, 500*time.Millisecond))
	rec := &recorder{}
	if err := f.op.Watch(group+"/v1", "Gadget", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	run := f.runAsync(t)

	// The watch on an existing kind works while the CRD is missing.
	f.createCM(t, "meanwhile")
	eventually(t, 10*time.Second, "configmap handled while the CRD is missing", func() bool {
		return len(rec.find("meanwhile", nil)) == 1
	})
	if err := f.op.Ready(); err == nil || !strings.Contains(err.Error(), "gadget."+group) {
		t.Errorf("Ready with a missing CRD = %v, want an error naming the gadget watch", err)
	}

	if err := f.env.InstallCRDs(context.Background(), gadgetCRD(group)); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(f.env.Config())
	if err != nil {
		t.Fatal(err)
	}
	g := &unstructured.Unstructured{}
	g.SetAPIVersion(group + "/v1")
	g.SetKind("Gadget")
	g.SetName("first")
	g.SetNamespace(f.ns)
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "gadgets"}
	if _, err := dyn.Resource(gvr).Namespace(f.ns).Create(context.Background(), g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "gadget handled", func() bool { return len(rec.find("first", nil)) == 1 })
	e := rec.find("first", nil)[0]
	if u, ok := e.Object.(*unstructured.Unstructured); !ok || u.GetKind() != "Gadget" || e.Watch != "gadget."+group+"/"+f.ns {
		t.Errorf("gadget event = %T on %q, want *unstructured.Unstructured of kind Gadget", e.Object, e.Watch)
	}
	eventually(t, 10*time.Second, "ready once the CRD watch synced", func() bool { return f.op.Ready() == nil })
	if done, err := run.returned(0); done {
		t.Fatalf("Run returned %v", err)
	}
}

// transportCloser remembers the transports of a config so the test can
// close their idle keep-alive connections, whose goroutines belong to the
// HTTP client and not to the Operator.
type transportCloser struct {
	mu  sync.Mutex
	rts []http.RoundTripper
}

func (c *transportCloser) wrap(rt http.RoundTripper) http.RoundTripper {
	c.mu.Lock()
	c.rts = append(c.rts, rt)
	c.mu.Unlock()
	return rt
}

func (c *transportCloser) closeIdle() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rt := range c.rts {
		if ci, ok := rt.(interface{ CloseIdleConnections() }); ok {
			ci.CloseIdleConnections()
		}
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

func TestCancelStopsEverythingAndGoroutinesReturnToBaseline(t *testing.T) {
	env := sdk.SharedEnv(t)
	closer := &transportCloser{}
	cycle := func() {
		cfg := env.Config()
		cfg.WrapTransport = closer.wrap
		f := newFixtureWithConfig(t, env, cfg, sdk.WithMetricsAddr("127.0.0.1:0"), sdk.WithDiscoveryBackoff(50*time.Millisecond, 100*time.Millisecond))
		rec := &recorder{}
		for _, w := range []struct {
			apiVersion, kind string
			opts             []sdk.WatchOption
		}{
			{"v1", "ConfigMap", []sdk.WatchOption{sdk.WithNumWorkers(3)}},
			{"v1", "Secret", []sdk.WatchOption{sdk.WithOwnerOf("v1", "ConfigMap")}},
			{"v1", "Service", []sdk.WatchOption{sdk.WithMetadataOnly()}},
			{"never.handlerkit.dev/v1", "Missing", nil},
		} {
			if err := f.op.Watch(w.apiVersion, w.kind, f.ns, time.Hour, w.opts...); err != nil {
				t.Fatal(err)
			}
		}
		f.op.Handle(rec)
		stop := f.runAsync(t).stop
		f.createCM(t, "one")
		eventually(t, 10*time.Second, "handled", func() bool { return len(rec.find("one", nil)) == 1 })
		eventually(t, 10*time.Second, "metrics server bound", func() bool { return f.op.MetricsAddr() != "" })
		resp, err := http.Get("http://" + f.op.MetricsAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err := stop(); err != nil {
			t.Fatalf("Run after cancel = %v, want nil", err)
		}
		if f.op.MetricsAddr() != "" {
			t.Errorf("MetricsAddr after Run returned = %q, want empty", f.op.MetricsAddr())
		}
	}
	// The first cycle starts process-wide goroutines (client caches,
	// klog's flush daemon); the baseline is taken after it.
	cycle()
	closer.closeIdle()
	var base int
	eventually(t, 10*time.Second, "goroutine count to settle", func() bool {
		a := runtime.NumGoroutine()
		// A deliberate pause inside the wait: settled means unchanged over 100 ms.
		time.Sleep(100 * time.Millisecond)
		base = runtime.NumGoroutine()
		return a == base
	})
	cycle()
	eventually(t, 20*time.Second, fmt.Sprintf("goroutines back to the baseline of %d", base), func() bool {
		closer.closeIdle()
		return runtime.NumGoroutine() <= base
	})
}

// startOwnerOf runs ConfigMaps as owners and Secrets as their secondary
// watch, and returns the owners' recorder.
func startOwnerOf(t *testing.T, f *fixture) *recorder {
	t.Helper()
	rec := &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	if err := f.op.Watch("v1", "Secret", f.ns, 0, sdk.WithOwnerOf("v1", "ConfigMap")); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)
	return rec
}

func TestOwnerOfEnqueuesTheControllerOwner(t *testing.T) {
	f := newFixture(t)
	rec := startOwnerOf(t, f)
	ctx := context.Background()
	owner, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Create(ctx, configMap(f.ns, "owner", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "owner added", func() bool { return len(rec.find("owner", nil)) == 1 })

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Namespace: f.ns, Name: "owned",
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptrTo(true),
		}},
	}}
	if _, err := f.env.Clientset().CoreV1().Secrets(f.ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "owner enqueued by its secret", func() bool { return len(rec.find("owner", nil)) == 2 })
	second := rec.find("owner", nil)[1]
	if second.Type != sdk.EventUpdate || second.Deleted {
		t.Errorf("owner event from its secret = %+v, want a non-deleted update", second)
	}
	for _, e := range rec.snapshot() {
		if _, ok := e.Object.(*corev1.Secret); ok {
			t.Errorf("secret delivered to the handler: %s", e.Watch)
		}
	}
}

func TestMetricsAppearWithTheRightNamesAndValues(t *testing.T) {
	f := newFixture(t, sdk.WithMetricsAddr("127.0.0.1:0"))
	rec := &recorder{}
	watch := startWithHandler(t, f, rec.Handle, sdk.WithNumWorkers(3))
	f.createCM(t, "a")
	f.createCM(t, "b")
	eventually(t, 10*time.Second, "both handled", func() bool {
		return f.counter(t, "handlerkit_handle_total", map[string]string{"watch": watch, "result": "success"}) == 2
	})
	want := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"handlerkit_events_total", map[string]string{"watch": watch, "type": "add"}, 2},
		{"handlerkit_events_total", map[string]string{"watch": watch, "type": "update"}, 0},
		{"handlerkit_events_total", map[string]string{"watch": watch, "type": "delete"}, 0},
		{"handlerkit_events_total", map[string]string{"watch": watch, "type": "resync"}, 0},
		{"handlerkit_handle_total", map[string]string{"watch": watch, "result": "error"}, 0},
		{"handlerkit_handle_total", map[string]string{"watch": watch, "result": "requeue_after"}, 0},
		{"handlerkit_handle_total", map[string]string{"watch": watch, "result": "terminal"}, 0},
		{"handlerkit_handle_total", map[string]string{"watch": watch, "result": "panic"}, 0},
		{"handlerkit_handle_duration_seconds", map[string]string{"watch": watch}, 2},
		{"handlerkit_active_workers", map[string]string{"watch": watch}, 0},
		{"handlerkit_max_workers", map[string]string{"watch": watch}, 3},
		{"workqueue_adds_total", map[string]string{"name": watch}, 2},
		{"workqueue_depth", map[string]string{"name": watch}, 0},
		{"workqueue_retries_total", map[string]string{"name": watch}, 0},
		{"workqueue_queue_duration_seconds", map[string]string{"name": watch}, 2},
		{"workqueue_work_duration_seconds", map[string]string{"name": watch}, 2},
	}
	for _, w := range want {
		if got := f.counter(t, w.name, w.labels); got != w.value {
			t.Errorf("%s%v = %v, want %v", w.name, w.labels, got, w.value)
		}
	}
	for _, name := range []string{"workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds"} {
		if _, ok := metricValue(t, f.reg, name, map[string]string{"name": watch}); !ok {
			t.Errorf("%s{name=%q} is missing", name, watch)
		}
	}

	base := "http://" + f.op.MetricsAddr()
	body := httpGet(t, base+"/metrics", http.StatusOK)
	line := fmt.Sprintf(`handlerkit_handle_total{result="success",watch=%q} 2`, watch)
	if !strings.Contains(body, line) {
		t.Errorf("/metrics lacks %q", line)
	}
	httpGet(t, base+"/healthz", http.StatusOK)
	httpGet(t, base+"/readyz", http.StatusOK)
}

func httpGet(t *testing.T, url string, wantCode int) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != wantCode {
		t.Fatalf("GET %s = %d %q, want %d", url, resp.StatusCode, b, wantCode)
	}
	return string(b)
}

func TestResyncEventsAreMarkedAndPredicatesCanDropThem(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{}
	// A one-second resync (client-go's minimum) keeps the test short; real
	// operators use hours.
	if err := f.op.Watch("v1", "ConfigMap", f.ns, time.Second, sdk.WithName("all")); err != nil {
		t.Fatal(err)
	}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, time.Second, sdk.WithName("filtered"), sdk.WithPredicate(sdk.IgnoreResync())); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)
	f.createCM(t, "steady")
	eventually(t, 10*time.Second, "a resync event on the unfiltered watch", func() bool {
		return len(rec.find("steady", func(e sdk.Event) bool { return e.Watch == "all" && e.Type == sdk.EventResync })) > 0
	})
	eventually(t, 10*time.Second, "two resyncs seen by the filtered watch", func() bool {
		return f.counter(t, "handlerkit_events_total", map[string]string{"watch": "filtered", "type": "resync"}) >= 2
	})
	// Predicates run before the key is queued, so the filtered watch's
	// queue saw only the add.
	if got := f.counter(t, "workqueue_adds_total", map[string]string{"name": "filtered"}); got != 1 {
		t.Errorf("filtered watch queued %v keys, want 1 (the add only)", got)
	}
}

func TestMetadataOnlyWatchDeliversPartialObjectMetadata(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{}
	if err := f.op.Watch("v1", "Secret", f.ns, 0, sdk.WithMetadataOnly()); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "meta", Labels: map[string]string{"app": "x"}}, StringData: map[string]string{"k": "v"}}
	if _, err := f.env.Clientset().CoreV1().Secrets(f.ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "secret metadata handled", func() bool { return len(rec.find("meta", nil)) == 1 })
	e := rec.find("meta", nil)[0]
	pm, ok := e.Object.(*metav1.PartialObjectMetadata)
	if !ok {
		t.Fatalf("object is %T, want *metav1.PartialObjectMetadata", e.Object)
	}
	if pm.Labels["app"] != "x" || pm.Kind != "Secret" || pm.APIVersion != "v1" {
		t.Errorf("metadata = %s %s labels %v, want v1 Secret with app=x", pm.APIVersion, pm.Kind, pm.Labels)
	}
}

func TestManagedFieldsAreStrippedUnlessKept(t *testing.T) {
	f := newFixture(t)
	rec := &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithName("stripped")); err != nil {
		t.Fatal(err)
	}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithName("kept"), sdk.WithManagedFields()); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)
	// Data gives the creator fields to own; an empty object has no entries.
	if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Create(context.Background(),
		configMap(f.ns, "fields", map[string]string{"k": "v"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "both watches handled", func() bool { return len(rec.find("fields", nil)) == 2 })
	for _, e := range rec.find("fields", nil) {
		n := len(e.Object.(*corev1.ConfigMap).ManagedFields)
		if e.Watch == "stripped" && n != 0 {
			t.Errorf("stripped watch delivered %d managedFields entries", n)
		}
		if e.Watch == "kept" && n == 0 {
			t.Error("WithManagedFields watch delivered no managedFields")
		}
	}
}

func TestTwoOperatorsRunInOneProcessWithOneRegistry(t *testing.T) {
	first := newFixture(t)
	second := newFixture(t, sdk.WithRegisterer(first.reg))
	second.reg = first.reg
	recs := []*recorder{{}, {}}
	for i, f := range []*fixture{first, second} {
		if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithName(fmt.Sprintf("op%d", i))); err != nil {
			t.Fatal(err)
		}
		f.op.Handle(recs[i])
		f.start(t)
	}
	first.createCM(t, "for-first")
	second.createCM(t, "for-second")
	eventually(t, 10*time.Second, "each operator handled its object", func() bool {
		return len(recs[0].find("for-first", nil)) == 1 && len(recs[1].find("for-second", nil)) == 1
	})
	if len(recs[0].find("for-second", nil)) != 0 || len(recs[1].find("for-first", nil)) != 0 {
		t.Error("an operator handled the other's namespace")
	}
	for i := range 2 {
		if got := first.counter(t, "handlerkit_handle_total", map[string]string{"watch": fmt.Sprintf("op%d", i), "result": "success"}); got != 1 {
			t.Errorf("op%d success count in the shared registry = %v, want 1", i, got)
		}
	}
}

// stubElector grants leadership when told to and takes it back when told to.
type stubElector struct {
	grant  chan struct{}
	mu     sync.Mutex
	revoke context.CancelFunc
}

func (s *stubElector) Lead(ctx context.Context) (context.Context, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-s.grant:
	}
	lc, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.mu.Lock()
	s.revoke = cancel
	s.mu.Unlock()
	return lc, nil
}

func (s *stubElector) Release(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.revoke != nil {
		s.revoke()
	}
	return nil
}

func (s *stubElector) Healthy() error { return nil }

func TestElectorGatesHandlingAndLosingLeadershipEndsRun(t *testing.T) {
	el := &stubElector{grant: make(chan struct{})}
	f := newFixture(t, sdk.WithElector(el), sdk.WithMetricsAddr("127.0.0.1:0"))
	rec := &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	run := f.runAsync(t)

	eventually(t, 10*time.Second, "metrics server bound before leadership", func() bool { return f.op.MetricsAddr() != "" })
	base := "http://" + f.op.MetricsAddr()
	httpGet(t, base+"/healthz", http.StatusOK)
	httpGet(t, base+"/metrics", http.StatusOK)
	eventually(t, 10*time.Second, "ready while standing by", func() bool { return f.op.Ready() == nil })
	f.createCM(t, "waiting")

	close(el.grant)
	eventually(t, 10*time.Second, "handled once leading", func() bool { return len(rec.find("waiting", nil)) == 1 })
	el.mu.Lock()
	el.revoke()
	el.mu.Unlock()
	done, err := run.returned(30 * time.Second)
	if !done {
		t.Fatal("Run did not return after leadership was lost")
	}
	if !errors.Is(err, sdk.ErrLeadershipLost) {
		t.Fatalf("Run after losing leadership = %v, want ErrLeadershipLost", err)
	}
	if f.op.MetricsAddr() != "" {
		t.Error("metrics server still bound after Run returned")
	}
}

// When a secondary object's controller reference moves to another owner,
// both owners are woken: the old one has lost something it controlled.
// When the reference is removed, the last owner is woken.
func TestOwnerOfWakesTheOldOwnerWhenTheReferenceMovesOrGoes(t *testing.T) {
	f := newFixture(t)
	rec := startOwnerOf(t, f)
	ctx := context.Background()
	owners := map[string]*corev1.ConfigMap{}
	for _, name := range []string{"a", "b"} {
		cm, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Create(ctx, configMap(f.ns, name, nil), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		owners[name] = cm
		eventually(t, 10*time.Second, name+" added", func() bool { return len(rec.find(name, nil)) == 1 })
	}
	controlledBy := func(name string) []metav1.OwnerReference {
		return []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: name, UID: owners[name].UID, Controller: ptrTo(true)}}
	}
	secrets := f.env.Clientset().CoreV1().Secrets(f.ns)
	s, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "owned", OwnerReferences: controlledBy("a")}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a woken by its new secret", func() bool { return len(rec.find("a", nil)) == 2 })

	s.OwnerReferences = controlledBy("b")
	if s, err = secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "b woken by the secret it now controls", func() bool { return len(rec.find("b", nil)) == 2 })
	eventually(t, 10*time.Second, "a woken by the secret it lost", func() bool { return len(rec.find("a", nil)) == 3 })

	s.OwnerReferences = nil
	if _, err = secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "b woken by the secret it lost", func() bool { return len(rec.find("b", nil)) == 3 })
}

// The workqueue series of a watch exist, at zero, from the moment the
// watch is registered, like the framework's own series; a dashboard or an
// alert on them works before the first Run.
func TestWorkqueueSeriesExistBeforeRun(t *testing.T) {
	f := newFixture(t)
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithName("early")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"workqueue_depth", "workqueue_adds_total", "workqueue_queue_duration_seconds", "workqueue_work_duration_seconds",
		"workqueue_unfinished_work_seconds", "workqueue_longest_running_processor_seconds", "workqueue_retries_total",
	} {
		if got, ok := metricValue(t, f.reg, name, map[string]string{"name": "early"}); !ok || got != 0 {
			t.Errorf("%s{name=\"early\"} = %v (exists: %v), want 0 before Run", name, got, ok)
		}
	}
}

// TestReadyChecksApplyStandingByAndLeading: a WithReadyCheck check keeps
// /readyz at 503 with its error, whether the replica stands by or leads, and
// it is ready once the check passes (what a webhook serving on every replica
// needs: its certificates loaded).
func TestReadyChecksApplyStandingByAndLeading(t *testing.T) {
	el := &stubElector{grant: make(chan struct{})}
	var mu sync.Mutex
	checkErr := errors.New("webhook: no serving certificate yet")
	check := func() error { mu.Lock(); defer mu.Unlock(); return checkErr }
	setCheck := func(err error) { mu.Lock(); checkErr = err; mu.Unlock() }
	f := newFixture(t, sdk.WithElector(el), sdk.WithMetricsAddr("127.0.0.1:0"), sdk.WithReadyCheck(check), sdk.WithReadyCheck(nil))
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(&recorder{})
	run := f.runAsync(t)

	eventually(t, 10*time.Second, "metrics server bound", func() bool { return f.op.MetricsAddr() != "" })
	base := "http://" + f.op.MetricsAddr()
	eventually(t, 10*time.Second, "standing by, held back by the check", func() bool {
		err := f.op.Ready()
		return err != nil && strings.Contains(err.Error(), "no serving certificate yet")
	})
	httpGet(t, base+"/readyz", http.StatusServiceUnavailable)
	setCheck(nil)
	eventually(t, 10*time.Second, "ready standing by", func() bool { return f.op.Ready() == nil })
	httpGet(t, base+"/readyz", http.StatusOK)

	close(el.grant)
	// Ready was nil standing by already: wait until the elector has made
	// this replica lead (revoke set), or a loaded machine revokes nothing
	// below (seen in make test: a nil revoke).
	eventually(t, 10*time.Second, "leading", func() bool { el.mu.Lock(); defer el.mu.Unlock(); return el.revoke != nil })
	eventually(t, 10*time.Second, "ready leading", func() bool { return f.op.Ready() == nil })
	setCheck(errors.New("webhook: certificate gone"))
	if err := f.op.Ready(); err == nil || !strings.Contains(err.Error(), "certificate gone") {
		t.Fatalf("leading with a failing check: Ready() = %v", err)
	}
	httpGet(t, base+"/readyz", http.StatusServiceUnavailable)
	el.mu.Lock()
	el.revoke()
	el.mu.Unlock()
	if done, _ := run.returned(30 * time.Second); !done {
		t.Fatal("Run did not return")
	}
}
