package sdk_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// scribble marks obj as changed by reader, as a careless reader would:
// a label, on whatever type the reader was given.
func scribble(t *testing.T, reader string, obj any) {
	t.Helper()
	a, err := meta.Accessor(obj)
	if err != nil {
		t.Errorf("%s got %T, which has no metadata: %v", reader, obj, err)
		return
	}
	l := a.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l["scribbled-by-"+reader] = "yes"
	a.SetLabels(l)
}

func TestEveryReaderGetsItsOwnCopyOfEveryRepresentation(t *testing.T) {
	env := sdk.SharedEnv(t)
	gv, gizmoScheme := installGizmos(t, env, "readcopy")
	for _, tc := range []struct {
		name       string
		opts       []sdk.Option
		apiVersion string
		kind       string
		watchOpts  []sdk.WatchOption
		create     func(t *testing.T, f *fixture, name string)
		newObj     func() runtime.Object // what a query Get reads into
		newList    func() runtime.Object
	}{
		{
			name: "compact built-in kind", apiVersion: "v1", kind: "ConfigMap",
			create: func(t *testing.T, f *fixture, name string) {
				cm := configMap(f.ns, name, map[string]string{"k": "v"})
				if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			newObj:  func() runtime.Object { return &corev1.ConfigMap{} },
			newList: func() runtime.Object { return &corev1.ConfigMapList{} },
		},
		{
			name: "metadata only", apiVersion: "v1", kind: "ConfigMap", watchOpts: []sdk.WatchOption{sdk.WithMetadataOnly()},
			create: func(t *testing.T, f *fixture, name string) {
				cm := configMap(f.ns, name, map[string]string{"k": "v"})
				if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			},
			newObj: func() runtime.Object {
				return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}}
			},
			newList: func() runtime.Object {
				return &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMapList"}}
			},
		},
		{
			name: "typed custom resource", opts: []sdk.Option{sdk.WithScheme(gizmoScheme)}, apiVersion: gv.String(), kind: "Gizmo",
			create:  func(t *testing.T, f *fixture, name string) { createGizmo(t, f.env, gv, f.ns, name, int64(3)) },
			newObj:  func() runtime.Object { return &Gizmo{} },
			newList: func() runtime.Object { return &GizmoList{} },
		},
		{
			name: "unstructured custom resource", apiVersion: gv.String(), kind: "Gizmo",
			create: func(t *testing.T, f *fixture, name string) { createGizmo(t, f.env, gv, f.ns, name, int64(3)) },
			newObj: func() runtime.Object {
				u := &unstructured.Unstructured{}
				u.SetAPIVersion(gv.String())
				u.SetKind("Gizmo")
				return u
			},
			newList: func() runtime.Object {
				u := &unstructured.UnstructuredList{}
				u.SetAPIVersion(gv.String())
				u.SetKind("GizmoList")
				return u
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.opts...)
			ctx := context.Background()
			var (
				mu   sync.Mutex
				seen = map[string]string{} // reader -> type it got
			)
			saw := func(reader string, obj runtime.Object) {
				mu.Lock()
				seen[reader] = fmt.Sprintf("%T", obj)
				mu.Unlock()
				scribble(t, reader, obj)
			}
			opts := append([]sdk.WatchOption{
				sdk.WithName("main"),
				sdk.WithPredicate(func(old runtime.Object, e sdk.Event) bool {
					saw("predicate", e.Object)
					if old != nil {
						saw("predicate-old", old)
					}
					return true
				}),
				sdk.WithIndex("all", func(obj runtime.Object) ([]string, error) {
					saw("index", obj)
					return []string{"all"}, nil
				}),
			}, tc.watchOpts...)
			if err := f.op.Watch(tc.apiVersion, tc.kind, f.ns, 0, opts...); err != nil {
				t.Fatal(err)
			}
			// A secondary watch of the same kind and form shares the informer.
			mapped := append([]sdk.WatchOption{
				sdk.WithName("mapped"),
				sdk.WithMapTo("main", func(_ context.Context, obj runtime.Object) []string {
					saw("map", obj)
					return nil
				}),
			}, tc.watchOpts...)
			if err := f.op.Watch(tc.apiVersion, tc.kind, f.ns, 0, mapped...); err != nil {
				t.Fatal(err)
			}
			// What the handler got, after it scribbled on it: read here,
			// under mu, never from the event afterwards.
			var handled []map[string]string
			f.op.Handle(sdk.HandlerFunc(func(_ context.Context, e sdk.Event) error {
				if e.Deleted {
					return nil
				}
				saw("handler", e.Object)
				mu.Lock()
				handled = append(handled, maps.Clone(mustLabels(t, e.Object)))
				mu.Unlock()
				return nil
			}))
			handledCount := func() int {
				mu.Lock()
				defer mu.Unlock()
				return len(handled)
			}
			f.start(t)
			tc.create(t, f, "x")
			eventually(t, 10*time.Second, "x handled", func() bool { return handledCount() > 0 })

			key := f.ns + "/x"
			r := query.For(f.op)
			get := tc.newObj()
			a, _ := meta.Accessor(get)
			a.SetNamespace(f.ns)
			a.SetName("x")
			if err := r.Get(ctx, get, query.FromWatch("main")); err != nil {
				t.Fatal(err)
			}
			saw("query.Get", get)
			list := tc.newList()
			if err := r.List(ctx, f.ns, list, query.FromWatch("main")); err != nil {
				t.Fatal(err)
			}
			items, err := meta.ExtractList(list)
			if err != nil || len(items) != 1 {
				t.Fatalf("query.List: %d items, %v", len(items), err)
			}
			saw("query.List", items[0])
			byIndex := tc.newList()
			if err := r.List(ctx, f.ns, byIndex, query.FromWatch("main"), query.MatchingIndex("all", "all")); err != nil {
				t.Fatal(err)
			}
			if items, err = meta.ExtractList(byIndex); err != nil || len(items) != 1 {
				t.Fatalf("query.List by index: %d items, %v", len(items), err)
			}
			saw("query.MatchingIndex", items[0])
			idx, _, ok := f.op.CacheOfWatch("main", f.ns)
			if !ok {
				t.Fatal("no cache for the watch")
			}
			obj, exists, err := idx.GetByKey(key)
			if err != nil || !exists {
				t.Fatalf("CacheOfWatch GetByKey: %v, %v", exists, err)
			}
			saw("CacheOfWatch.GetByKey", obj.(runtime.Object))
			for _, o := range idx.List() {
				saw("CacheOfWatch.List", o.(runtime.Object))
			}
			byIdx, err := idx.ByIndex("all", "all")
			if err != nil || len(byIdx) != 1 {
				t.Fatalf("CacheOfWatch ByIndex: %d, %v", len(byIdx), err)
			}
			saw("CacheOfWatch.ByIndex", byIdx[0].(runtime.Object))

			// Wake the key again: the handler and the predicate's old and
			// new objects must not show what the readers above did.
			if err := f.op.Enqueue("main", key); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "x handled again", func() bool { return handledCount() > 1 })
			cached, ok := sdk.CachedForm(f.op, "main", f.ns, key)
			if !ok {
				t.Fatal("x not cached")
			}
			if l := labelsOf(t, cached); countScribbles(l) > 0 {
				t.Errorf("the cache's labels changed: %v", l)
			}
			mu.Lock()
			for _, l := range handled {
				if n := countScribbles(l); n != 1 {
					t.Errorf("the handler got labels %v, want only its own scribble", l)
				}
			}
			mu.Unlock()
			if err := r.Get(ctx, get, query.FromWatch("main")); err != nil {
				t.Fatal(err)
			}
			if l := mustLabels(t, get); countScribbles(l) > 0 {
				t.Errorf("a fresh query.Get returned labels %v, scribbled by an earlier reader", l)
			}
			mu.Lock()
			defer mu.Unlock()
			for _, reader := range []string{"predicate", "index", "map", "handler", "query.Get", "query.List", "query.MatchingIndex",
				"CacheOfWatch.GetByKey", "CacheOfWatch.List", "CacheOfWatch.ByIndex"} {
				if seen[reader] == "" {
					t.Errorf("%s was never called", reader)
				}
			}
			t.Logf("types: %v", seen)
		})
	}
}

func labelsOf(t *testing.T, obj any) map[string]string {
	t.Helper()
	a, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	return a.GetLabels()
}

func mustLabels(t *testing.T, obj runtime.Object) map[string]string { return labelsOf(t, obj) }

func countScribbles(l map[string]string) int {
	n := 0
	for k := range l {
		if strings.HasPrefix(k, "scribbled-by-") {
			n++
		}
	}
	return n
}
