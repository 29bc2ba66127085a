package sdk_test

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/internal/compact"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// typesSeen records the Go types user code was called with.
type typesSeen struct {
	mu    sync.Mutex
	types map[string]map[string]bool // caller -> type
}

func (s *typesSeen) saw(caller string, obj runtime.Object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.types == nil {
		s.types = map[string]map[string]bool{}
	}
	if s.types[caller] == nil {
		s.types[caller] = map[string]bool{}
	}
	s.types[caller][fmt.Sprintf("%T", obj)] = true
}

// only reports whether caller was called, and only with the type want.
func (s *typesSeen) only(caller, want string) (bool, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var got []string
	for typ := range s.types[caller] {
		got = append(got, typ)
	}
	return len(got) == 1 && got[0] == want, got
}

func TestBuiltInKindsAreCachedCompactAndEveryReaderGetsThemDecoded(t *testing.T) {
	for _, tc := range []struct {
		name       string
		opts       []sdk.WatchOption
		cachedType string
	}{
		{"default", nil, fmt.Sprintf("%T", &compact.Object{})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ctx := context.Background()
			seen := &typesSeen{}
			opts := append([]sdk.WatchOption{
				sdk.WithName("cms"),
				sdk.WithPredicate(func(_ runtime.Object, e sdk.Event) bool { seen.saw("predicate", e.Object); return true }),
				sdk.WithIndex("team", func(obj runtime.Object) ([]string, error) {
					seen.saw("index", obj)
					return []string{obj.(metav1.Object).GetLabels()["team"]}, nil
				}),
			}, tc.opts...)
			if err := f.op.Watch("v1", "ConfigMap", f.ns, 0, opts...); err != nil {
				t.Fatal(err)
			}
			// Secrets wake the ConfigMap of the same name.
			err := f.op.Watch("v1", "Secret", f.ns, 0, append([]sdk.WatchOption{
				sdk.WithMapTo("cms", func(_ context.Context, obj runtime.Object) []string {
					seen.saw("map", obj)
					m := obj.(metav1.Object)
					return []string{m.GetNamespace() + "/" + m.GetName()}
				}),
			}, tc.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			rec := &recorder{fn: func(e sdk.Event) error {
				seen.saw("handler", e.Object)
				// The handler owns its object: changing it changes no cache.
				if cm, ok := e.Object.(*corev1.ConfigMap); ok {
					cm.Data["changed-by-handler"] = "yes"
					cm.Labels["team"] = "changed"
				}
				return nil
			}}
			f.op.Handle(rec)
			f.start(t)

			cms := f.env.Clientset().CoreV1().ConfigMaps(f.ns)
			for _, name := range []string{"one", "two"} {
				cm := configMap(f.ns, name, map[string]string{"config.yaml": "rules: [" + name + "]"})
				cm.Labels = map[string]string{"team": "a"}
				if _, err := cms.Create(ctx, cm, metaCreate); err != nil {
					t.Fatal(err)
				}
			}
			eventually(t, 10*time.Second, "both handled", func() bool {
				return len(rec.find("one", nil)) > 0 && len(rec.find("two", nil)) > 0
			})
			secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "one"}, StringData: map[string]string{"k": "v"}}
			if _, err := f.env.Clientset().CoreV1().Secrets(f.ns).Create(ctx, secret, metaCreate); err != nil {
				t.Fatal(err)
			}
			eventually(t, 10*time.Second, "one handled again for its Secret", func() bool { return len(rec.find("one", nil)) > 1 })

			if form, ok := sdk.CachedForm(f.op, "cms", f.ns, f.ns+"/one"); !ok || fmt.Sprintf("%T", form) != tc.cachedType {
				t.Errorf("the cache holds %T (found %v), want %s", form, ok, tc.cachedType)
			}
			for caller, want := range map[string]string{
				"predicate": "*v1.ConfigMap", "index": "*v1.ConfigMap", "handler": "*v1.ConfigMap", "map": "*v1.Secret",
			} {
				if ok, got := seen.only(caller, want); !ok {
					t.Errorf("%s was called with %v, want only %s", caller, got, want)
				}
			}

			r := query.For(f.op)
			got := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: "one"}}
			if err := r.Get(ctx, got); err != nil {
				t.Fatal(err)
			}
			if got.Data["config.yaml"] != "rules: [one]" || got.Labels["team"] != "a" || got.Data["changed-by-handler"] != "" {
				t.Errorf("query.Get from the cache: labels %v, data %v", got.Labels, got.Data)
			}
			var byIndex, bySelector corev1.ConfigMapList
			if err := r.List(ctx, f.ns, &byIndex, query.MatchingIndex("team", "a")); err != nil {
				t.Fatal(err)
			}
			if err := r.List(ctx, f.ns, &bySelector, query.MatchingLabels(map[string]string{"team": "a"})); err != nil {
				t.Fatal(err)
			}
			for what, l := range map[string]*corev1.ConfigMapList{"by index": &byIndex, "by selector": &bySelector} {
				if len(l.Items) != 2 || l.Items[0].Name != "one" || l.Items[1].Data["config.yaml"] != "rules: [two]" {
					t.Errorf("query.List %s: %+v", what, l.Items)
				}
			}

			idx, ok := f.op.CacheFor(corev1.SchemeGroupVersion.WithKind("ConfigMap"), f.ns)
			if !ok {
				t.Fatal("CacheFor: no cache")
			}
			obj, exists, err := idx.GetByKey(f.ns + "/two")
			if err != nil || !exists {
				t.Fatalf("CacheFor's GetByKey: %v, %v", exists, err)
			}
			want := got.DeepCopy()
			want.Name, want.Data["config.yaml"] = "two", "rules: [two]"
			two, ok := obj.(*corev1.ConfigMap)
			if !ok || !reflect.DeepEqual(two.Data, want.Data) || two.Name != "two" {
				t.Errorf("CacheFor's GetByKey = %T %+v, want the ConfigMap two", obj, obj)
			}
			for _, o := range idx.List() {
				if _, ok := o.(*corev1.ConfigMap); !ok {
					t.Errorf("CacheFor's List returned a %T", o)
				}
			}
		})
	}
}
