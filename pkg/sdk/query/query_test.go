package query_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
	"github.com/handlerkit/handlerkit/pkg/testenv"
)

var shared testenv.Shared

func sharedEnv(t testing.TB) *testenv.Environment {
	t.Helper()
	return shared.Get(t)
}

func TestMain(m *testing.M) {
	os.Exit(shared.Main(m))
}

// requestCounter counts the requests a client makes, by method and path,
// leaving out watches (long-running, opened once per informer).
type requestCounter struct {
	mu     sync.Mutex
	counts map[string]int
}

type countingRoundTripper struct {
	c    *requestCounter
	next http.RoundTripper
}

func (rt countingRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Query().Get("watch") != "true" {
		rt.c.mu.Lock()
		rt.c.counts[req.Method+" "+req.URL.Path]++
		rt.c.mu.Unlock()
	}
	return rt.next.RoundTrip(req)
}

// matching counts requests whose "METHOD path" contains every fragment.
func (c *requestCounter) matching(fragments ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
next:
	for k, v := range c.counts {
		for _, f := range fragments {
			if !strings.Contains(k, f) {
				continue next
			}
		}
		n += v
	}
	return n
}

type fixture struct {
	env      *testenv.Environment
	op       *sdk.Operator
	ns       string
	requests *requestCounter
	reader   *query.Reader
}

// newFixture runs an Operator watching ConfigMaps in a fresh namespace with
// handler h and the watch options opts, through a client that counts its
// requests.
func newFixture(t *testing.T, h sdk.HandlerFunc, opts ...sdk.WatchOption) *fixture {
	t.Helper()
	env := sharedEnv(t)
	ns, err := env.CreateNamespace(context.Background(), "query-")
	if err != nil {
		t.Fatal(err)
	}
	rc := &requestCounter{counts: map[string]int{}}
	cfg := env.Config()
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return countingRoundTripper{c: rc, next: rt} }
	log := logrus.New()
	log.SetOutput(io.Discard)
	op, err := sdk.New(cfg, sdk.WithRegisterer(prometheus.NewRegistry()), sdk.WithMetricsAddr("0"), sdk.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	if err := op.Watch("v1", "ConfigMap", ns, 0, opts...); err != nil {
		t.Fatal(err)
	}
	if h == nil {
		h = func(context.Context, sdk.Event) error { return nil }
	}
	op.Handle(h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- op.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for op.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("operator not ready: %v", op.Ready())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return &fixture{env: env, op: op, ns: ns, requests: rc, reader: query.For(op)}
}

func (f *fixture) createCM(t *testing.T, name string, labels map[string]string) {
	t.Helper()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: labels}, Data: map[string]string{"name": name}}
	if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// waitCached waits until the Operator's cache holds name.
func (f *fixture) waitCached(t *testing.T, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := f.reader.Get(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name}})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never reached the cache: %v", name, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestWatchedKindIsReadFromTheCacheWithoutRequests(t *testing.T) {
	var handled atomic.Int32
	var readErr atomic.Value
	var f *fixture
	ready := make(chan struct{})
	f = newFixture(t, func(ctx context.Context, e sdk.Event) error {
		<-ready
		cm := e.Object.(*corev1.ConfigMap)
		// The pattern the early operator-sdk turned into API traffic: a Get
		// and a List on every event.
		got := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name}}
		if err := f.reader.Get(ctx, got); err != nil {
			readErr.Store(err)
		}
		var all corev1.ConfigMapList
		if err := f.reader.List(ctx, cm.Namespace, &all); err != nil {
			readErr.Store(err)
		}
		handled.Add(1)
		return nil
	})
	close(ready)
	before := f.requests.matching("/configmaps")
	const n = 20
	for i := range n {
		f.createCM(t, fmt.Sprintf("cm-%02d", i), nil)
	}
	deadline := time.Now().Add(20 * time.Second)
	for handled.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("handled %d of %d", handled.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err, _ := readErr.Load().(error); err != nil {
		t.Fatalf("query in the handler: %v", err)
	}
	if got := f.requests.matching("GET ", "/configmaps") - before; got != 0 {
		t.Errorf("the operator's client sent %d GET requests for configmaps while handling %d events, want 0 (reads come from the cache)", got, n)
	}

	// An unwatched kind goes to the API server, once per read.
	secretsBefore := f.requests.matching("GET ", "/secrets")
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "s"}}
	if _, err := f.env.Clientset().CoreV1().Secrets(f.ns).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := f.reader.Get(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "s"}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.requests.matching("GET ", "/secrets") - secretsBefore; got != 3 {
		t.Errorf("3 reads of an unwatched kind sent %d requests, want 3", got)
	}

	// Live forces a request even for a watched kind.
	liveBefore := f.requests.matching("GET ", "/configmaps/cm-00")
	if err := f.reader.Get(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "cm-00"}}, query.Live()); err != nil {
		t.Fatal(err)
	}
	if got := f.requests.matching("GET ", "/configmaps/cm-00") - liveBefore; got != 1 {
		t.Errorf("a Live read sent %d requests, want 1", got)
	}
}

func TestCachedObjectsAreCopiesSafeToMutate(t *testing.T) {
	f := newFixture(t, nil)
	f.createCM(t, "shared", nil)
	f.waitCached(t, "shared")
	first := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "shared"}}
	if err := f.reader.Get(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	first.Data["name"] = "scribbled"
	first.Labels = map[string]string{"scribbled": "yes"}
	var list corev1.ConfigMapList
	if err := f.reader.List(context.Background(), f.ns, &list); err != nil {
		t.Fatal(err)
	}
	list.Items[0].Data["name"] = "scribbled too"

	again := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "shared"}}
	if err := f.reader.Get(context.Background(), again); err != nil {
		t.Fatal(err)
	}
	if again.Data["name"] != "shared" || again.Labels["scribbled"] != "" {
		t.Errorf("the cache changed under a caller's mutation: %v %v", again.Data, again.Labels)
	}
	if again.Kind != "ConfigMap" || again.APIVersion != "v1" {
		t.Errorf("kind = %q %q, want v1 ConfigMap", again.APIVersion, again.Kind)
	}
}

func TestGetOfAMissingObjectIsNotFound(t *testing.T) {
	f := newFixture(t, nil)
	for _, opts := range [][]query.Option{nil, {query.Live()}} {
		err := f.reader.Get(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "absent"}}, opts...)
		if !apierrors.IsNotFound(err) {
			t.Errorf("Get(absent, %d opts) = %v, want NotFound", len(opts), err)
		}
	}
}

func TestReadOfAnUnservedKindIsAClearError(t *testing.T) {
	f := newFixture(t, nil)
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("nothing.handlerkit.dev/v1")
	u.SetKind("Nope")
	u.SetNamespace(f.ns)
	u.SetName("x")
	if err := f.reader.Get(context.Background(), u); err == nil || !strings.Contains(err.Error(), "does not serve kind") {
		t.Errorf("Get of an unserved kind = %v, want a 'does not serve kind' error", err)
	}
}

func TestListSelectsByLabelsFromCacheAndServer(t *testing.T) {
	f := newFixture(t, nil)
	f.createCM(t, "web-1", map[string]string{"app": "web"})
	f.createCM(t, "web-2", map[string]string{"app": "web"})
	f.createCM(t, "db-1", map[string]string{"app": "db"})
	f.waitCached(t, "db-1")
	f.waitCached(t, "web-2")
	f.waitCached(t, "web-1")
	for _, live := range []bool{false, true} {
		for _, sel := range []struct {
			opt  query.Option
			want string
		}{
			{query.WithLabelSelector("app=web"), "web-1,web-2"},
			{query.MatchingLabels(map[string]string{"app": "db"}), "db-1"},
			{query.WithLabelSelector("app"), "db-1,web-1,web-2"},
		} {
			opts := []query.Option{sel.opt}
			if live {
				opts = append(opts, query.Live())
			}
			var typed corev1.ConfigMapList
			if err := f.reader.List(context.Background(), f.ns, &typed, opts...); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, cm := range typed.Items {
				names = append(names, cm.Name)
			}
			if got := strings.Join(names, ","); got != sel.want {
				t.Errorf("typed list (live=%v) = %s, want %s", live, got, sel.want)
			}

			ul := &unstructured.UnstructuredList{}
			ul.SetAPIVersion("v1")
			ul.SetKind("ConfigMapList")
			if err := f.reader.List(context.Background(), f.ns, ul, opts...); err != nil {
				t.Fatal(err)
			}
			names = names[:0]
			for _, u := range ul.Items {
				names = append(names, u.GetName())
				if u.GetKind() != "ConfigMap" {
					t.Errorf("unstructured item kind = %q, want ConfigMap", u.GetKind())
				}
			}
			if got := strings.Join(names, ","); got != sel.want {
				t.Errorf("unstructured list (live=%v) = %s, want %s", live, got, sel.want)
			}
		}
	}
}

func TestGetIntoUnstructuredFromTheCache(t *testing.T) {
	f := newFixture(t, nil)
	f.createCM(t, "plain", nil)
	f.waitCached(t, "plain")
	u := &unstructured.Unstructured{}
	u.SetAPIVersion("v1")
	u.SetKind("ConfigMap")
	u.SetNamespace(f.ns)
	u.SetName("plain")
	if err := f.reader.Get(context.Background(), u); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(u.Object, "data", "name"); v != "plain" || u.GetKind() != "ConfigMap" {
		t.Errorf("unstructured get = %v", u.Object)
	}
}

func TestPackageFunctionsUseTheDefaultOperator(t *testing.T) {
	f := newFixture(t, nil)
	sdk.SetDefault(f.op)
	t.Cleanup(func() { sdk.SetDefault(nil) })
	f.createCM(t, "via-default", nil)
	f.waitCached(t, "via-default")
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "via-default"}}
	if err := query.Get(context.Background(), cm); err != nil || cm.Data["name"] != "via-default" {
		t.Fatalf("query.Get = %v, %v", err, cm.Data)
	}
	var list corev1.ConfigMapList
	if err := query.List(context.Background(), f.ns, &list); err != nil || len(list.Items) != 1 {
		t.Fatalf("query.List = %v, %d items", err, len(list.Items))
	}
}

func TestBadReadsReturnClearErrors(t *testing.T) {
	op, err := sdk.New(&rest.Config{Host: "https://127.0.0.1:1"}, sdk.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		t.Fatal(err)
	}
	r := query.For(op)
	var nilCM *corev1.ConfigMap
	noKind := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}}}
	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"nil object", func() error { return r.Get(context.Background(), nil) }, "object is nil"},
		{"typed nil", func() error { return r.Get(context.Background(), nilCM) }, "object is nil"},
		{"no kind", func() error { return r.Get(context.Background(), noKind) }, "set apiVersion and kind"},
		{"list into Get", func() error { return r.Get(context.Background(), &corev1.ConfigMapList{}) }, "use List"},
		{"no name", func() error { return r.Get(context.Background(), &corev1.ConfigMap{}) }, "metadata.name is empty"},
		{"selector on Get", func() error {
			return r.Get(context.Background(), &corev1.ConfigMap{}, query.WithLabelSelector("a=b"))
		}, "apply to List"},
		{"bad selector", func() error {
			return r.List(context.Background(), "", &corev1.ConfigMapList{}, query.WithLabelSelector("a in ("))
		}, "invalid label selector"},
		{"object into List", func() error { return r.List(context.Background(), "", &corev1.ConfigMap{}) }, "not a list"},
		{"nil list", func() error { return r.List(context.Background(), "", nil) }, "object is nil"},
		{"reader without operator", func() error { return query.For(nil).Get(context.Background(), &corev1.ConfigMap{}) }, "no Operator"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.call()
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// TestFromWatchReadsATransformedWatchsOwnCache: a watch with a transform
// keeps its own, rewritten cache. Plain reads never use it (they go to the
// API server, since the cache holds a rewritten form), FromWatch reads it
// with no request, and reads that cannot be answered from it fail clearly.
func TestFromWatchReadsATransformedWatchsOwnCache(t *testing.T) {
	trim := func(obj runtime.Object) (runtime.Object, error) {
		cm := obj.(*corev1.ConfigMap)
		cm.Data = map[string]string{"trimmed": "yes"}
		return cm, nil
	}
	f := newFixture(t, nil, sdk.WithName("trimmed"), sdk.WithTransform(trim))
	ctx, env, ns, rc := context.Background(), f.env, f.ns, f.requests
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a", Labels: map[string]string{"app": "x"}}, Data: map[string]string{"k": "v"}}
	if _, err := env.Clientset().CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := f.reader
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}
		err := r.Get(ctx, got, query.FromWatch("trimmed"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the watch's cache never held the ConfigMap: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	before := rc.matching("GET ", "/configmaps")
	got := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}
	if err := r.Get(ctx, got, query.FromWatch("trimmed")); err != nil {
		t.Fatal(err)
	}
	if got.Data["trimmed"] != "yes" || got.Data["k"] != "" {
		t.Errorf("FromWatch Get returned data %v, want the transformed form", got.Data)
	}
	var list corev1.ConfigMapList
	if err := r.List(ctx, ns, &list, query.FromWatch("trimmed"), query.MatchingLabels(map[string]string{"app": "x"})); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Data["trimmed"] != "yes" {
		t.Errorf("FromWatch List returned %d items %+v", len(list.Items), list.Items)
	}
	if n := rc.matching("GET ", "/configmaps") - before; n != 0 {
		t.Errorf("FromWatch reads sent %d requests, want 0", n)
	}
	// A plain read does not take the rewritten form for the object: it goes
	// to the API server.
	plain := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}
	if err := r.Get(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if plain.Data["k"] != "v" || rc.matching("GET ", "/configmaps")-before != 1 {
		t.Errorf("a plain read returned %v after %d requests, want the stored object after 1", plain.Data, rc.matching("GET ", "/configmaps")-before)
	}

	for name, read := range map[string]func() error{
		"unknown watch": func() error {
			return r.Get(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}, query.FromWatch("nope"))
		},
		"other namespace": func() error {
			return r.Get(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "a"}}, query.FromWatch("trimmed"))
		},
		"other kind": func() error {
			return r.Get(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}, query.FromWatch("trimmed"))
		},
		"live": func() error {
			return r.Get(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}, query.FromWatch("trimmed"), query.Live())
		},
		"empty name": func() error {
			return r.Get(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "a"}}, query.FromWatch(""))
		},
	} {
		err := read()
		if err == nil || apierrors.IsNotFound(err) {
			t.Errorf("%s: err %v, want a clear error", name, err)
		}
	}
	missing := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "missing"}}
	if err := r.Get(ctx, missing, query.FromWatch("trimmed")); !apierrors.IsNotFound(err) {
		t.Errorf("a missing object through FromWatch: %v, want NotFound", err)
	}
}

// TestWhereMetaKeepsObjectsByTheirMetadata: WhereMeta filters a List by the
// objects' metadata, from the cache (plain, by index, with a label
// selector) and from the API server alike.
func TestWhereMetaKeepsObjectsByTheirMetadata(t *testing.T) {
	byApp := func(obj runtime.Object) ([]string, error) {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		return []string{m.GetLabels()["app"]}, nil
	}
	f := newFixture(t, nil, sdk.WithIndex("app", byApp))
	f.createCM(t, "web-1", map[string]string{"app": "web", "tier": "front"})
	f.createCM(t, "web-2", map[string]string{"app": "web"})
	f.createCM(t, "db-1", map[string]string{"app": "db", "tier": "back"})
	for _, n := range []string{"web-1", "web-2", "db-1"} {
		f.waitCached(t, n)
	}
	withTier := query.WhereMeta(func(m metav1.Object) bool { _, ok := m.GetLabels()["tier"]; return ok })
	for _, c := range []struct {
		name string
		opts []query.Option
		want string
	}{
		{"cache", []query.Option{withTier}, "db-1,web-1"},
		{"cache, selector", []query.Option{withTier, query.WithLabelSelector("app=web")}, "web-1"},
		{"cache, index", []query.Option{withTier, query.MatchingIndex("app", "web")}, "web-1"},
		{"API server", []query.Option{withTier, query.Live()}, "db-1,web-1"},
		{"API server, selector", []query.Option{withTier, query.Live(), query.WithLabelSelector("app=db")}, "db-1"},
		{"none kept", []query.Option{query.WhereMeta(func(metav1.Object) bool { return false })}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var list corev1.ConfigMapList
			if err := f.reader.List(context.Background(), f.ns, &list, c.opts...); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, cm := range list.Items {
				names = append(names, cm.Name)
				if cm.Data["name"] != cm.Name {
					t.Errorf("%s: data %v, want the whole object", cm.Name, cm.Data)
				}
			}
			if got := strings.Join(names, ","); got != c.want {
				t.Errorf("List = %q, want %q", got, c.want)
			}
		})
	}
	if err := f.reader.Get(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "web-1"}}, withTier); err == nil ||
		!strings.Contains(err.Error(), "apply to List") {
		t.Errorf("Get with WhereMeta: %v, want an error", err)
	}
	if err := f.reader.List(context.Background(), f.ns, &corev1.ConfigMapList{}, query.WhereMeta(nil)); err == nil {
		t.Error("WhereMeta(nil): no error")
	}
}
