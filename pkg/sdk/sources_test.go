package sdk_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// requestLog records every request an Operator's clients send.
type requestLog struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (l *requestLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(r *http.Request) (*http.Response, error) {
		l.mu.Lock()
		l.reqs = append(l.reqs, r)
		l.mu.Unlock()
		return rt.RoundTrip(r)
	})
}

// count returns how many requests so far went to a path with the given
// suffix (list, watch and get alike).
func (l *requestLog) count(pathSuffix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.reqs {
		if strings.HasSuffix(r.URL.Path, pathSuffix) {
			n++
		}
	}
	return n
}

// countingFixture is a fixture whose Operator's requests are recorded.
func countingFixture(t *testing.T, opts ...sdk.Option) (*fixture, *requestLog) {
	t.Helper()
	env := sdk.SharedEnv(t)
	log := &requestLog{}
	cfg := rest.CopyConfig(env.Config())
	cfg.WrapTransport = log.wrap
	return newFixtureWithConfig(t, env, cfg, opts...), log
}

func newNamespace(t *testing.T, f *fixture) string {
	t.Helper()
	ns, err := f.env.CreateNamespace(context.Background(), "sdk-")
	if err != nil {
		t.Fatal(err)
	}
	return ns
}

func createCMIn(t *testing.T, f *fixture, ns, name string, data map[string]string, lbls map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm := configMap(ns, name, data)
	cm.Labels = lbls
	out, err := f.env.Clientset().CoreV1().ConfigMaps(ns).Create(context.Background(), cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// configMapStreams returns how many list and watch requests went to the
// ConfigMaps of ns.
func configMapStreams(l *requestLog, ns string) int {
	return l.count("/namespaces/" + ns + "/configmaps")
}

func TestWatchesOfOneKindShareOneInformer(t *testing.T) {
	// Baseline: what one watch of the kind costs on this API server (a list
	// and a watch, or one streaming watch-list).
	single, singleLog := countingFixture(t)
	if err := single.op.Watch("v1", "ConfigMap", single.ns, 0); err != nil {
		t.Fatal(err)
	}
	single.op.Handle(&recorder{})
	single.start(t)
	one := configMapStreams(singleLog, single.ns)
	if one == 0 {
		t.Fatal("no list or watch request seen for one watch; the counter proves nothing")
	}

	f, log := countingFixture(t)
	a, b := &recorder{}, &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithName("a"), sdk.WithHandler(a)); err != nil {
		t.Fatal(err)
	}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithName("b"), sdk.WithHandler(b),
		sdk.WithPredicate(func(_ runtime.Object, e sdk.Event) bool { return strings.HasPrefix(nameOf(e), "b-") })); err != nil {
		t.Fatal(err)
	}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithName("mapped"),
		sdk.WithMapTo("a", func(_ context.Context, obj runtime.Object) []string { return nil })); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	createCMIn(t, f, f.ns, "b-1", nil, nil)
	eventually(t, 10*time.Second, "both handlers see the object", func() bool {
		return len(a.find("b-1", nil)) > 0 && len(b.find("b-1", nil)) > 0
	})
	if got := configMapStreams(log, f.ns); got != one {
		t.Fatalf("three watches of one kind sent %d list/watch requests, one watch sends %d: informers are not shared", got, one)
	}
	t.Logf("list/watch requests: one watch %d, three watches of the kind %d", one, configMapStreams(log, f.ns))

	// A different selection is a different cache.
	g, glog := countingFixture(t)
	if err := g.op.Watch("v1", "ConfigMap", g.ns, 0, sdk.WithName("all")); err != nil {
		t.Fatal(err)
	}
	if err := g.op.Watch("v1", "ConfigMap", g.ns, 0, sdk.WithName("selected"), sdk.WithLabelSelector("app=x")); err != nil {
		t.Fatal(err)
	}
	g.op.Handle(&recorder{})
	g.start(t)
	if got := configMapStreams(glog, g.ns); got != 2*one {
		t.Fatalf("two watches with different selections sent %d list/watch requests, want %d (one informer each)", got, 2*one)
	}
}

func TestWatchCoversAListOfNamespaces(t *testing.T) {
	f, log := countingFixture(t)
	ns1, ns2, ns3 := f.ns, newNamespace(t, f), newNamespace(t, f)
	rec := &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", ns1+", "+ns2, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)
	createCMIn(t, f, ns3, "outside", nil, nil)
	createCMIn(t, f, ns1, "in-1", nil, nil)
	createCMIn(t, f, ns2, "in-2", nil, nil)
	eventually(t, 10*time.Second, "both watched namespaces handled", func() bool {
		return len(rec.find("in-1", nil)) > 0 && len(rec.find("in-2", nil)) > 0
	})
	if got := rec.find("outside", nil); len(got) != 0 {
		t.Fatalf("an object of an unwatched namespace was handled: %+v", got)
	}
	ev := rec.find("in-2", nil)[0]
	if ev.Object.(*corev1.ConfigMap).Namespace != ns2 {
		t.Errorf("event for in-2 carries namespace %q", ev.Object.(*corev1.ConfigMap).Namespace)
	}

	// Reads of the watched namespaces come from the caches, one per namespace.
	reader := query.For(f.op)
	ctx := context.Background()
	before := log.count("/configmaps") + log.count("/configmaps/in-1")
	if err := reader.Get(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns1, Name: "in-1"}}); err != nil {
		t.Fatal(err)
	}
	var list corev1.ConfigMapList
	if err := reader.List(ctx, ns2, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "in-2" {
		t.Fatalf("List in %s = %v, want [in-2]", ns2, list.Items)
	}
	if after := log.count("/configmaps") + log.count("/configmaps/in-1"); after != before {
		t.Fatalf("reads of watched namespaces sent %d requests, want 0 (served from the caches)", after-before)
	}
	// An unwatched namespace is read from the API server.
	if err := reader.List(ctx, ns3, &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "outside" {
		t.Fatalf("List in unwatched %s = %v, want [outside]", ns3, list.Items)
	}
}

func TestNamespaceListsAreValidated(t *testing.T) {
	f := newFixture(t)
	for _, bad := range []string{"a,,b", "a,Not_Valid"} {
		if err := f.op.Watch("v1", "ConfigMap", bad, 0, sdk.WithName("w-"+fmt.Sprint(len(bad)))); err == nil {
			t.Errorf("Watch in %q: no error", bad)
		}
	}
}

func TestIndexedListIsAnsweredFromTheCache(t *testing.T) {
	f, log := countingFixture(t)
	rec := &recorder{}
	byRef := func(obj runtime.Object) ([]string, error) {
		if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Data["ref"] != "" {
			return []string{cm.Data["ref"]}, nil
		}
		return nil, nil
	}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithIndex("ref", byRef)); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	f.start(t)
	createCMIn(t, f, f.ns, "a", map[string]string{"ref": "x"}, map[string]string{"tier": "1"})
	createCMIn(t, f, f.ns, "b", map[string]string{"ref": "y"}, nil)
	createCMIn(t, f, f.ns, "c", map[string]string{"ref": "x"}, map[string]string{"tier": "2"})
	eventually(t, 10*time.Second, "all handled", func() bool {
		return len(rec.find("a", nil)) > 0 && len(rec.find("b", nil)) > 0 && len(rec.find("c", nil)) > 0
	})
	reader := query.For(f.op)
	ctx := context.Background()
	before := log.count("/configmaps")
	var list corev1.ConfigMapList
	if err := reader.List(ctx, f.ns, &list, query.MatchingIndex("ref", "x")); err != nil {
		t.Fatal(err)
	}
	if got := names(list.Items); got != "a,c" {
		t.Fatalf("List by index ref=x = %s, want a,c", got)
	}
	if err := reader.List(ctx, f.ns, &list, query.MatchingIndex("ref", "x"), query.MatchingLabels(map[string]string{"tier": "2"})); err != nil {
		t.Fatal(err)
	}
	if got := names(list.Items); got != "c" {
		t.Fatalf("List by index ref=x and tier=2 = %s, want c", got)
	}
	if after := log.count("/configmaps"); after != before {
		t.Fatalf("indexed Lists sent %d requests, want 0", after-before)
	}
	if err := reader.List(ctx, f.ns, &list, query.MatchingIndex("ref", "x"), query.Live()); err == nil {
		t.Error("MatchingIndex with Live: no error")
	}
	if err := reader.List(ctx, f.ns, &list, query.MatchingIndex("missing", "x")); err == nil || !strings.Contains(err.Error(), "WithIndex") {
		t.Errorf("List by an index nobody added = %v, want an error naming WithIndex", err)
	}
}

func names(items []corev1.ConfigMap) string {
	var out []string
	for _, i := range items {
		out = append(out, i.Name)
	}
	return strings.Join(out, ",")
}

// countFor returns how many times rec saw name.
func countFor(rec *recorder, name string) int { return len(rec.find(name, nil)) }

func TestMapToWakesTheTargetsFoundThroughTheCache(t *testing.T) {
	f, log := countingFixture(t)
	targets := &recorder{}
	// ConfigMaps stand for custom resources with a pod selector in data; a
	// Secret event wakes those whose selector matches its labels, found
	// through the ConfigMap cache.
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithName("targets"), sdk.WithHandler(targets)); err != nil {
		t.Fatal(err)
	}
	selecting := func(ctx context.Context, obj runtime.Object) []string {
		s, ok := obj.(*corev1.Secret)
		if !ok {
			return nil
		}
		var cms corev1.ConfigMapList
		if err := query.For(sdk.OperatorFrom(ctx)).List(ctx, s.Namespace, &cms); err != nil {
			return nil
		}
		var keys []string
		for _, cm := range cms.Items {
			sel, err := labels.Parse(cm.Data["selector"])
			if err == nil && !sel.Empty() && sel.Matches(labels.Set(s.Labels)) {
				keys = append(keys, cm.Namespace+"/"+cm.Name)
			}
		}
		return keys
	}
	if err := f.op.Watch("v1", "Secret", f.ns, 0, sdk.WithMapTo("targets", selecting)); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	createCMIn(t, f, f.ns, "t1", map[string]string{"selector": "app=a"}, nil)
	createCMIn(t, f, f.ns, "t2", map[string]string{"selector": "app=b"}, nil)
	eventually(t, 10*time.Second, "targets handled", func() bool { return countFor(targets, "t1") > 0 && countFor(targets, "t2") > 0 })
	cmRequests := log.count("/configmaps")
	t1, t2 := countFor(targets, "t1"), countFor(targets, "t2")

	secrets := f.env.Clientset().CoreV1().Secrets(f.ns)
	s, err := secrets.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "pod", Labels: map[string]string{"app": "a"}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "t1 woken by the matching secret", func() bool { return countFor(targets, "t1") > t1 })
	t1 = countFor(targets, "t1")
	s.Labels = map[string]string{"app": "b"}
	if _, err := secrets.Update(context.Background(), s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "t2 woken by the newly matching secret", func() bool { return countFor(targets, "t2") > t2 })
	eventually(t, 10*time.Second, "t1 woken as the secret left its selection", func() bool { return countFor(targets, "t1") > t1 })
	if got := log.count("/configmaps"); got != cmRequests {
		t.Errorf("the map function sent %d ConfigMap requests, want 0 (cache reads)", got-cmRequests)
	}
}

func TestAnyOwnerOfWakesEveryOwner(t *testing.T) {
	f := newFixture(t)
	owners := &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithName("owners"), sdk.WithHandler(owners)); err != nil {
		t.Fatal(err)
	}
	if err := f.op.Watch("v1", "Secret", f.ns, 0, sdk.WithAnyOwnerOf("v1", "ConfigMap")); err != nil {
		t.Fatal(err)
	}
	f.start(t)
	a := createCMIn(t, f, f.ns, "owner-a", nil, nil)
	b := createCMIn(t, f, f.ns, "owner-b", nil, nil)
	eventually(t, 10*time.Second, "owners handled", func() bool { return countFor(owners, "owner-a") > 0 && countFor(owners, "owner-b") > 0 })
	na, nb := countFor(owners, "owner-a"), countFor(owners, "owner-b")
	ref := func(cm *corev1.ConfigMap) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: "v1", Kind: "ConfigMap", Name: cm.Name, UID: cm.UID}
	}
	if _, err := f.env.Clientset().CoreV1().Secrets(f.ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
		Name: "shared", OwnerReferences: []metav1.OwnerReference{ref(a), ref(b)},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "both non-controller owners woken", func() bool {
		return countFor(owners, "owner-a") > na && countFor(owners, "owner-b") > nb
	})
}

func TestEnqueueWakesAWatchFromAnotherHandler(t *testing.T) {
	f := newFixture(t)
	cms := &recorder{}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithName("cms"), sdk.WithHandler(cms)); err != nil {
		t.Fatal(err)
	}
	enqueueErr := make(chan error, 2)
	if err := f.op.Watch("v1", "Secret", f.ns, 0, sdk.WithHandler(sdk.HandlerFunc(func(ctx context.Context, e sdk.Event) error {
		enqueueErr <- sdk.Enqueue(ctx, "nope", "x")
		return sdk.Enqueue(ctx, "cms", f.ns+"/target")
	}))); err != nil {
		t.Fatal(err)
	}
	run := f.runAsync(t)
	eventually(t, 30*time.Second, "ready", func() bool { return f.op.Ready() == nil })
	createCMIn(t, f, f.ns, "target", nil, nil)
	eventually(t, 10*time.Second, "target handled", func() bool { return countFor(cms, "target") > 0 })
	n := countFor(cms, "target")
	if _, err := f.env.Clientset().CoreV1().Secrets(f.ns).Create(context.Background(),
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "trigger"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "target woken through Enqueue", func() bool { return countFor(cms, "target") > n })
	if ev := cms.find("target", nil); ev[len(ev)-1].Type != sdk.EventUpdate {
		t.Errorf("enqueued handling has type %q, want update", ev[len(ev)-1].Type)
	}
	if err := <-enqueueErr; err == nil || !strings.Contains(err.Error(), `no watch named "nope"`) {
		t.Errorf("Enqueue on an unknown watch = %v, want an error naming it", err)
	}
	if err := run.stop(); err != nil {
		t.Fatal(err)
	}
	if err := f.op.Enqueue("cms", f.ns+"/target"); err == nil {
		t.Error("Enqueue after Run returned: no error")
	}
}

func TestSecondaryWatchesNeedATarget(t *testing.T) {
	f := newFixture(t)
	if err := f.op.Watch("v1", "Secret", f.ns, 0, sdk.WithMapTo("missing", func(context.Context, runtime.Object) []string { return nil })); err != nil {
		t.Fatal(err)
	}
	if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, sdk.WithName("cms")); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(&recorder{})
	err := f.op.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), `WithMapTo("missing")`) {
		t.Fatalf("Run with a mapped watch whose target does not exist = %v, want an error naming it", err)
	}
}
