package sdk_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// Gizmo's Go type says spec.size is an integer, while its CRD accepts
// anything: a Gizmo whose size is a string cannot be decoded into the Go
// type. One such object exists before Run and one is created after; both
// must reach the handler, unstructured, and neither may hide the other
// objects of the watch.
func TestUndecodableObjectIsDeliveredUnstructuredAndCounted(t *testing.T) {
	env := sdk.SharedEnv(t)
	gv, scheme := installGizmos(t, env, "decode")
	logger, hook := logtest.NewNullLogger()
	f := newFixture(t, sdk.WithScheme(scheme), sdk.WithLogger(logger), sdk.WithCacheSyncTimeout(20*time.Second))
	rec := &recorder{}
	if err := f.op.Watch(gv.String(), "Gizmo", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	watchName := "gizmo." + gv.Group + "/" + f.ns
	if got, ok := metricValue(t, f.reg, "handlerkit_decode_errors_total", map[string]string{"watch": watchName}); !ok || got != 0 {
		t.Errorf("decode errors before Run = %v (exists: %v), want the series at 0", got, ok)
	}
	createGizmo(t, env, gv, f.ns, "bad-before", "big")
	createGizmo(t, env, gv, f.ns, "good-before", int64(1))
	f.start(t)
	createGizmo(t, env, gv, f.ns, "bad-after", "huge")
	createGizmo(t, env, gv, f.ns, "good-after", int64(2))

	for _, name := range []string{"bad-before", "good-before", "bad-after", "good-after"} {
		eventually(t, 10*time.Second, name+" handled", func() bool { return len(rec.find(name, nil)) > 0 })
	}
	for name, size := range map[string]string{"bad-before": "big", "bad-after": "huge"} {
		u, ok := rec.find(name, nil)[0].Object.(*unstructured.Unstructured)
		if !ok {
			t.Fatalf("%s arrived as %T, want *unstructured.Unstructured", name, rec.find(name, nil)[0].Object)
		}
		if got, _, _ := unstructured.NestedString(u.Object, "spec", "size"); got != size || u.GetKind() != "Gizmo" || u.GetAPIVersion() != gv.String() {
			t.Errorf("%s = %s %s size %q, want Gizmo %s size %q", name, u.GetAPIVersion(), u.GetKind(), got, gv, size)
		}
	}
	for _, name := range []string{"good-before", "good-after"} {
		if _, ok := rec.find(name, nil)[0].Object.(*Gizmo); !ok {
			t.Errorf("%s arrived as %T, want *Gizmo", name, rec.find(name, nil)[0].Object)
		}
	}
	if got, _ := metricValue(t, f.reg, "handlerkit_decode_errors_total", map[string]string{"watch": watchName}); got < 2 {
		t.Errorf("handlerkit_decode_errors_total = %v, want at least 2", got)
	}
	warned := false
	for _, e := range hook.AllEntries() {
		if e.Level == logrus.WarnLevel && e.Data["watch"] == watchName && e.Data["key"] == f.ns+"/bad-after" && e.Data[logrus.ErrorKey] != nil {
			warned = true
		}
	}
	if !warned {
		t.Error("no warning naming the watch, the object's key and the error")
	}

	// A typed read of the object says why it fails; it does not pretend
	// the object is missing. An unstructured read works.
	err := query.For(f.op).Get(context.Background(), &Gizmo{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "bad-after"}})
	if err == nil || apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "decode") {
		t.Errorf("typed Get of an undecodable object = %v, want a decode error", err)
	}
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(gv.String())
	u.SetKind("Gizmo")
	u.SetNamespace(f.ns)
	u.SetName("bad-after")
	if err := query.For(f.op).Get(context.Background(), u); err != nil {
		t.Errorf("unstructured Get of an undecodable object = %v", err)
	}
	var list GizmoList
	if err := query.For(f.op).List(context.Background(), f.ns, &list); err == nil || !strings.Contains(err.Error(), "decode") {
		t.Errorf("typed List with an undecodable object = %v, want a decode error", err)
	}
}

// gizmoInformer is the GenericInformer of gizmoFactory.
type gizmoInformer struct {
	inf cache.SharedIndexInformer
	gr  schema.GroupResource
}

func (g gizmoInformer) Informer() cache.SharedIndexInformer { return g.inf }
func (g gizmoInformer) Lister() cache.GenericLister {
	return cache.NewGenericLister(g.inf.GetIndexer(), g.gr)
}

// gizmoFactory is a typed informer factory for Gizmos, like one that
// code-generator makes: its client decodes into the Go type, so an
// undecodable object fails in the reflector, before any transform.
type gizmoFactory struct {
	gvr    schema.GroupVersionResource
	client rest.Interface
	ns     string
	tweak  func(*metav1.ListOptions)
	inf    cache.SharedIndexInformer
}

// gizmoClient is a REST client that decodes Gizmos into their Go type.
func gizmoClient(t *testing.T, cfg *rest.Config, scheme *runtime.Scheme, gv schema.GroupVersion) rest.Interface {
	t.Helper()
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(scheme).WithoutConversion()
	client, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func (f *gizmoFactory) ForResource(gvr schema.GroupVersionResource) (gizmoInformer, error) {
	if gvr != f.gvr {
		return gizmoInformer{}, &meta404{gvr}
	}
	if f.inf == nil {
		lw := &cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				f.tweak(&o)
				l := &GizmoList{}
				err := f.client.Get().Namespace(f.ns).Resource("gizmos").VersionedParams(&o, metav1.ParameterCodec).Do(ctx).Into(l)
				return l, err
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				f.tweak(&o)
				o.Watch = true
				return f.client.Get().Namespace(f.ns).Resource("gizmos").VersionedParams(&o, metav1.ParameterCodec).Watch(ctx)
			},
		}
		f.inf = cache.NewSharedIndexInformer(lw, &Gizmo{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	return gizmoInformer{inf: f.inf, gr: f.gvr.GroupResource()}, nil
}

func (f *gizmoFactory) Start(stop <-chan struct{}) {
	if f.inf != nil {
		go f.inf.Run(stop)
	}
}

func (f *gizmoFactory) Shutdown() {}

type meta404 struct{ gvr schema.GroupVersionResource }

func (e *meta404) Error() string { return "no informer for " + e.gvr.String() }

// A typed informer decodes in its reflector, so an undecodable object makes
// its list or watch fail and client-go retries it. The framework cannot
// deliver the object, but it must not stay silent: every failed list or
// watch is logged with the watch's name and counted.
func TestTypedInformerDecodeFailuresAreLoggedAndCounted(t *testing.T) {
	env := sdk.SharedEnv(t)
	gv, scheme := installGizmos(t, env, "typeddecode")
	logger, hook := logtest.NewNullLogger()
	client := gizmoClient(t, env.Config(), scheme, gv)
	f := newFixture(t, sdk.WithScheme(scheme), sdk.WithLogger(logger),
		sdk.WithInformerFactory(func(ns string, _ time.Duration, tweak func(*metav1.ListOptions)) sdk.InformerFactory[gizmoInformer] {
			return &gizmoFactory{gvr: gv.WithResource("gizmos"), client: client, ns: ns, tweak: tweak}
		}))
	rec := &recorder{}
	if err := f.op.Watch(gv.String(), "Gizmo", f.ns, 0); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	watchName := "gizmo." + gv.Group + "/" + f.ns
	if got, ok := metricValue(t, f.reg, "handlerkit_watch_errors_total", map[string]string{"watch": watchName}); !ok || got != 0 {
		t.Errorf("watch errors before Run = %v (exists: %v), want the series at 0", got, ok)
	}
	f.start(t)
	createGizmo(t, env, gv, f.ns, "good", int64(1))
	eventually(t, 10*time.Second, "good handled", func() bool { return len(rec.find("good", nil)) == 1 })
	createGizmo(t, env, gv, f.ns, "bad", "big")
	eventually(t, 10*time.Second, "a warning naming the watch and the decode error", func() bool {
		for _, e := range hook.AllEntries() {
			err, _ := e.Data[logrus.ErrorKey].(error)
			if e.Level == logrus.WarnLevel && e.Data["watch"] == watchName && err != nil && strings.Contains(err.Error(), "unmarshal") {
				return true
			}
		}
		return false
	})
	if got, _ := metricValue(t, f.reg, "handlerkit_watch_errors_total", map[string]string{"watch": watchName}); got < 1 {
		t.Errorf("handlerkit_watch_errors_total = %v, want at least 1", got)
	}
}
