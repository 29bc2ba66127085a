package sdk

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kwatch "k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	"github.com/handlerkit/handlerkit/pkg/sdk/internal/compact"
)

// widget is a typed custom resource, for the representation of CRDs that
// have a Go type in the Operator's scheme.
type widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              widgetSpec `json:"spec"`
}

type widgetSpec struct {
	Size int `json:"size"`
}

func (w *widget) DeepCopyObject() runtime.Object {
	c := *w
	w.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return &c
}

var widgetGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}

// watchListSource serves client-go's reflector an initial list the way an
// API server does when the reflector asks for a watch-list
// (SendInitialEvents): every object as an Added event, then a bookmark
// annotated with the end of the initial events. The reflector then stores
// the objects in a temporary store with the informer's transform, and
// passes that store's objects to the informer's queue, whose Replace runs
// the transform again.
type watchListSource struct {
	objs     []runtime.Object
	bookmark runtime.Object
	mu       sync.Mutex
	lists    int // plain LISTs: the fallback a failed watch-list takes
}

func (s *watchListSource) listWatch() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			s.mu.Lock()
			s.lists++
			s.mu.Unlock()
			return nil, fmt.Errorf("the test serves watch-lists only")
		},
		WatchFuncWithContext: func(_ context.Context, o metav1.ListOptions) (kwatch.Interface, error) {
			if o.SendInitialEvents == nil || !*o.SendInitialEvents {
				return kwatch.NewFake(), nil // a later watch: nothing happens
			}
			w := kwatch.NewFakeWithChanSize(len(s.objs)+1, false)
			for _, obj := range s.objs {
				w.Add(obj.DeepCopyObject())
			}
			w.Action(kwatch.Bookmark, s.bookmark.DeepCopyObject())
			return w, nil
		},
	}
}

func (s *watchListSource) fellBackToList() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lists > 0
}

// bookmarkOf returns the bookmark that ends the initial events, as an
// object of example's type.
func bookmarkOf(example runtime.Object) runtime.Object {
	b := example.DeepCopyObject()
	a, _ := meta.Accessor(b)
	a.SetName("")
	a.SetNamespace("")
	a.SetResourceVersion("100")
	a.SetAnnotations(map[string]string{metav1.InitialEventsAnnotationKey: "true"})
	return b
}

func TestTransformRunsOncePerObjectUnderTheWatchListDoublePass(t *testing.T) {
	pod := func(name string) runtime.Object {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "7", Labels: map[string]string{"app": "web"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img"}}},
		}
	}
	unstr := func(gvk schema.GroupVersionKind, name string) runtime.Object {
		u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"size": int64(3)}}}
		u.SetGroupVersionKind(gvk)
		u.SetNamespace("ns")
		u.SetName(name)
		u.SetResourceVersion("7")
		u.SetLabels(map[string]string{"app": "web"})
		return u
	}
	partial := func(name string) runtime.Object {
		return &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"},
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: "7", Labels: map[string]string{"app": "web"}},
		}
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	scheme.AddKnownTypeWithName(widgetGVK, &widget{})
	gizmo := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gizmo"} // no Go type

	for _, tc := range []struct {
		name         string
		gvk          schema.GroupVersionKind
		metadataOnly bool
		example      runtime.Object
		newObj       func(name string) runtime.Object
		userType     string // the type the user's transform must see
		cachedType   string // what the cache holds
	}{
		{"compact built-in kind", corev1.SchemeGroupVersion.WithKind("Pod"), false, &corev1.Pod{}, pod, "*v1.Pod", "*compact.Object"},
		{"typed custom resource", widgetGVK, false, &unstructured.Unstructured{},
			func(n string) runtime.Object { return unstr(widgetGVK, n) }, "*sdk.widget", "*compact.Decoded"},
		{"unstructured custom resource", gizmo, false, &unstructured.Unstructured{},
			func(n string) runtime.Object { return unstr(gizmo, n) }, "*unstructured.Unstructured", "*compact.Decoded"},
		{"metadata only", corev1.SchemeGroupVersion.WithKind("Secret"), true, &metav1.PartialObjectMetadata{}, partial,
			"*v1.PartialObjectMetadata", "*compact.Decoded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := logrus.New()
			log.SetOutput(io.Discard)
			op := &Operator{cfg: config{scheme: scheme, log: log}}
			var (
				mu    sync.Mutex
				calls = map[string]int{}
				types = map[string]bool{}
			)
			// A transform written as the docs say: it type-asserts the
			// watched kind's Go type and fails on anything else.
			user := func(obj runtime.Object) (runtime.Object, error) {
				mu.Lock()
				defer mu.Unlock()
				types[fmt.Sprintf("%T", obj)] = true
				a, err := meta.Accessor(obj)
				if err != nil {
					return nil, err
				}
				if fmt.Sprintf("%T", obj) != tc.userType {
					return nil, fmt.Errorf("transform got %T, want %s", obj, tc.userType)
				}
				calls[a.GetName()]++
				a.SetAnnotations(map[string]string{"seen": fmt.Sprint(calls[a.GetName()])})
				return obj, nil
			}
			si := &sharedInformer{
				key: informerKey{metadataOnly: tc.metadataOnly, private: "w"}, gvk: tc.gvk, op: op,
				transforms: []TransformFunc{user}, indexes: map[string]bool{},
			}
			src := &watchListSource{bookmark: bookmarkOf(tc.newObj(""))}
			for _, n := range []string{"a", "b", "c"} {
				src.objs = append(src.objs, tc.newObj(n))
			}
			inf := cache.NewSharedIndexInformer(src.listWatch(), tc.example, 0, cache.Indexers{})
			if err := inf.SetTransform(si.transform); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); inf.RunWithContext(ctx) }()
			defer func() { cancel(); <-done }()
			syncCtx, syncCancel := context.WithTimeout(ctx, 10*time.Second)
			defer syncCancel()
			if !cache.WaitForCacheSync(syncCtx.Done(), inf.HasSynced) || src.fellBackToList() {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("the watch-list did not sync the cache (fell back to a LIST: %v); the transform saw %v", src.fellBackToList(), types)
			}

			mu.Lock()
			defer mu.Unlock()
			if len(types) != 1 || !types[tc.userType] {
				t.Errorf("the user's transform saw %v, want only %s", types, tc.userType)
			}
			for _, n := range []string{"a", "b", "c"} {
				if calls[n] != 1 {
					t.Errorf("the user's transform ran %d times on %q, want once", calls[n], n)
				}
				obj, ok, err := inf.GetIndexer().GetByKey("ns/" + n)
				if err != nil || !ok {
					t.Fatalf("%q not cached: %v", n, err)
				}
				if got := fmt.Sprintf("%T", obj); got != tc.cachedType {
					t.Errorf("the cache holds %s for %q, want %s", got, n, tc.cachedType)
				}
				read, err := compact.Copy(obj.(runtime.Object))
				if err != nil {
					t.Fatal(err)
				}
				a, _ := meta.Accessor(read)
				if got := fmt.Sprintf("%T", read); got != tc.userType {
					t.Errorf("a read of %q is %s, want %s", n, got, tc.userType)
				}
				if a.GetAnnotations()["seen"] != "1" || a.GetManagedFields() != nil {
					t.Errorf("%q cached with annotations %v and managedFields %v, want seen=1 and none", n, a.GetAnnotations(), a.GetManagedFields())
				}
				if gvk := read.GetObjectKind().GroupVersionKind(); gvk != tc.gvk {
					t.Errorf("%q read as %v, want %v", n, gvk, tc.gvk)
				}
			}
		})
	}
}
