package sdk_test

import (
	"context"
	"testing"
	"time"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/handlerkit/handlerkit/pkg/sdk"
)

// sameMemory reports whether a and b share their backing array.
func sameMemory(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// handledPair runs a watch until objects "first", "one" and "two" are
// handled and returns what the handler got for "one" and "two": deep
// copies of the cached objects, which hold the cached strings. "first" is
// the first holder of the namespace's name, which keeps its own copy of
// the strings no object held before it.
func handledPair(t *testing.T, f *fixture, apiVersion, kind string, create func(name string), opts ...sdk.WatchOption) (one, two runtime.Object) {
	t.Helper()
	rec := &recorder{}
	if err := f.op.Watch(apiVersion, kind, f.ns, 0, opts...); err != nil {
		t.Fatal(err)
	}
	f.op.Handle(rec)
	create("first") // listed at start
	f.start(t)
	create("one") // watched
	create("two")
	for _, name := range []string{"first", "one", "two"} {
		eventually(t, 10*time.Second, name+" handled", func() bool { return len(rec.find(name, nil)) > 0 })
	}
	return rec.find("one", nil)[0].Object, rec.find("two", nil)[0].Object
}

func createLabelledCM(t *testing.T, f *fixture) func(name string) {
	return func(name string) {
		t.Helper()
		cm := configMap(f.ns, name, map[string]string{"config.yaml": "rules: []"})
		cm.Labels = map[string]string{"app.kubernetes.io/name": "web"}
		if _, err := f.env.Clientset().CoreV1().ConfigMaps(f.ns).Create(context.Background(), cm, metaCreate); err != nil {
			t.Fatal(err)
		}
	}
}

// cmStrings are strings two ConfigMaps of createLabelledCM have in common.
func cmStrings(o runtime.Object) map[string]string {
	cm := o.(*corev1.ConfigMap)
	key := ""
	for k := range cm.Labels {
		key = k
	}
	return map[string]string{
		"namespace": cm.Namespace, "label key": key, "label value": cm.Labels["app.kubernetes.io/name"],
		"data value": cm.Data["config.yaml"],
	}
}

func TestCachedObjectsShareEqualStrings(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []sdk.WatchOption
		// shared names the strings the two objects must share: a compact
		// cache keeps the metadata decoded and interned, and decodes the
		// rest (the data) anew for each read.
		shared []string
	}{
		{"compact (default)", nil, []string{"namespace", "label key", "label value"}},
		{"WithoutCompaction", []sdk.WatchOption{sdk.WithoutCompaction()}, []string{"namespace", "label key", "label value", "data value"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			one, two := handledPair(t, f, "v1", "ConfigMap", createLabelledCM(t, f), tc.opts...)
			a, b := cmStrings(one), cmStrings(two)
			for what, s := range a {
				if s != b[what] {
					t.Fatalf("%s: %q and %q, want equal", what, s, b[what])
				}
			}
			for _, what := range tc.shared {
				if !sameMemory(a[what], b[what]) {
					t.Errorf("%s %q: each cached ConfigMap holds its own copy, want one shared", what, a[what])
				}
			}
			if one.(metav1.Object).GetName() == two.(metav1.Object).GetName() {
				t.Errorf("both events carry the same object")
			}
		})
	}
}

func TestWithoutStringInterningKeepsDecodedStrings(t *testing.T) {
	f := newFixture(t)
	one, two := handledPair(t, f, "v1", "ConfigMap", createLabelledCM(t, f), sdk.WithoutStringInterning())
	a, b := cmStrings(one), cmStrings(two)
	for what, s := range a {
		if sameMemory(s, b[what]) {
			t.Errorf("%s %q: shared between the cached ConfigMaps, want each its own copy as decoded", what, s)
		}
	}
}

func TestObjectsOfDynamicInformersShareEqualStrings(t *testing.T) {
	env := sdk.SharedEnv(t)
	gv, scheme := installGizmos(t, env, "intern")
	for _, tc := range []struct {
		name   string
		scheme *runtime.Scheme // nil: the default, which does not know Gizmo
		want   func(runtime.Object) bool
	}{
		{"unstructured", nil, func(o runtime.Object) bool { _, ok := o.(*unstructured.Unstructured); return ok }},
		{"converted to the Go type", scheme, func(o runtime.Object) bool { _, ok := o.(*Gizmo); return ok }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []sdk.Option
			if tc.scheme != nil {
				opts = append(opts, sdk.WithScheme(tc.scheme))
			}
			f := newFixture(t, opts...)
			one, two := handledPair(t, f, gv.String(), "Gizmo", func(name string) {
				createGizmo(t, env, gv, f.ns, name, int64(1))
			})
			if !tc.want(one) || !tc.want(two) {
				t.Fatalf("objects are %T and %T", one, two)
			}
			a, b := one.(metav1.Object), two.(metav1.Object)
			if !sameMemory(a.GetNamespace(), b.GetNamespace()) {
				t.Errorf("namespace %q: each cached Gizmo holds its own copy, want one shared", a.GetNamespace())
			}
			// The apiVersion is stamped on each object as it is cached.
			av, bv := apiVersionOf(one), apiVersionOf(two)
			if av != gv.String() || bv != gv.String() {
				t.Fatalf("apiVersions %q and %q, want %q", av, bv, gv)
			}
			if !sameMemory(av, bv) {
				t.Errorf("apiVersion %q: each cached Gizmo holds its own copy, want one shared", av)
			}
		})
	}
}

// apiVersionOf returns the apiVersion string o holds.
func apiVersionOf(o runtime.Object) string {
	switch o := o.(type) {
	case *unstructured.Unstructured:
		return o.GetAPIVersion()
	case *Gizmo:
		return o.APIVersion
	}
	return ""
}
