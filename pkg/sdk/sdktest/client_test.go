package sdktest_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
	"github.com/handlerkit/handlerkit/pkg/sdk/sdktest"
)

func newClient(t *testing.T, opts ...sdktest.Option) *sdktest.Client {
	t.Helper()
	c, err := sdktest.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Seeded objects keep what a test gives them, status and a deletion in
// progress included, and get the system fields they lack.
func TestWithObjectsStoresObjectsAsTheyAre(t *testing.T) {
	d := deployment("ns", "seeded", 1)
	d.Status.Replicas = 3
	d.ResourceVersion = "42"
	deleting := configMap("ns", "deleting", nil, nil)
	deleting.Finalizers = []string{"example.dev/hold"}
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	c := newClient(t, sdktest.WithObjects(d, deleting))

	got := deployment("ns", "seeded", 0)
	if err := c.Get(ctx, got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Replicas != 3 || got.ResourceVersion != "42" || got.UID == "" || got.CreationTimestamp.IsZero() {
		t.Errorf("seeded deployment = status %d, rv %q, uid %q, created %v", got.Status.Replicas, got.ResourceVersion, got.UID, got.CreationTimestamp)
	}
	if d.UID != "" {
		t.Error("WithObjects changed the object it was given")
	}
	cm := configMap("ns", "new", nil, nil)
	if err := c.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	if rv, _ := strconv.Atoi(cm.ResourceVersion); rv <= 42 {
		t.Errorf("resourceVersion after a seeded 42 = %q, want more", cm.ResourceVersion)
	}
	held := configMap("ns", "deleting", nil, nil)
	if err := c.Get(ctx, held); err != nil || held.DeletionTimestamp == nil {
		t.Fatalf("seeded deleting object = %v, %v", held.DeletionTimestamp, err)
	}
	held.Finalizers = nil
	if err := c.Update(ctx, held); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, configMap("ns", "deleting", nil, nil)); !apierrors.IsNotFound(err) {
		t.Errorf("a seeded object being deleted survived its last finalizer: %v", err)
	}
}

func TestNewClientRefusesBadInput(t *testing.T) {
	badRV := configMap("ns", "a", nil, nil)
	badRV.ResourceVersion = "abc"
	cases := []struct {
		name string
		opts []sdktest.Option
		want string
	}{
		{"nil scheme", []sdktest.Option{sdktest.WithScheme(nil)}, "nil scheme"},
		{"nil object", []sdktest.Option{sdktest.WithObjects(nil)}, "object is nil"},
		{"unknown typed kind", []sdktest.Option{sdktest.WithObjects(&widget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w"}})}, "cannot tell the kind"},
		{"no name", []sdktest.Option{sdktest.WithObjects(configMap("ns", "", nil, nil))}, "metadata.name is empty"},
		{"no namespace", []sdktest.Option{sdktest.WithObjects(configMap("", "a", nil, nil))}, "metadata.namespace is empty"},
		{"bad resourceVersion", []sdktest.Option{sdktest.WithObjects(badRV)}, "not a positive integer"},
		{"twice", []sdktest.Option{sdktest.WithObjects(configMap("ns", "a", nil, nil), configMap("ns", "a", nil, nil))}, "given twice"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := sdktest.NewClient(c.opts...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("NewClient = %v, want an error containing %q", err, c.want)
			}
		})
	}
}

// Writers that retry on Conflict, as handlers do, lose no update however
// they interleave: the resourceVersion check is what serializes them.
func TestConcurrentWritersLoseNoUpdate(t *testing.T) {
	c := newClient(t, sdktest.WithObjects(configMap("ns", "counter", nil, map[string]string{"n": "0"})))
	const writers, increments = 8, 25
	var wg sync.WaitGroup
	conflicts := make(chan int, writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seen := 0
			for range increments {
				for {
					cm := configMap("ns", "counter", nil, nil)
					if err := c.Get(ctx, cm); err != nil {
						t.Error(err)
						return
					}
					n, _ := strconv.Atoi(cm.Data["n"])
					cm.Data["n"] = strconv.Itoa(n + 1)
					err := c.Update(ctx, cm)
					if apierrors.IsConflict(err) {
						seen++
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					break
				}
			}
			conflicts <- seen
		}()
	}
	wg.Wait()
	close(conflicts)
	total := 0
	for n := range conflicts {
		total += n
	}
	got := configMap("ns", "counter", nil, nil)
	if err := c.Get(ctx, got); err != nil {
		t.Fatal(err)
	}
	if got.Data["n"] != strconv.Itoa(writers*increments) {
		t.Fatalf("counter = %s, want %d", got.Data["n"], writers*increments)
	}
	t.Logf("%d conflicts retried", total)
}

// widget is a typed custom resource of the tests' own.
type widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              widgetSpec   `json:"spec"`
	Status            widgetStatus `json:"status,omitempty"`
}

type widgetSpec struct {
	Size int `json:"size"`
}

type widgetStatus struct {
	Ready bool `json:"ready,omitempty"`
}

func (w *widget) DeepCopyObject() runtime.Object {
	c := *w
	c.ObjectMeta = *w.ObjectMeta.DeepCopy()
	return &c
}

type widgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []widget `json:"items"`
}

func (l *widgetList) DeepCopyObject() runtime.Object {
	c := *l
	c.Items = make([]widget, len(l.Items))
	for i := range l.Items {
		c.Items[i] = *l.Items[i].DeepCopyObject().(*widget)
	}
	return &c
}

var widgetGV = schema.GroupVersion{Group: "example.dev", Version: "v1"}

func widgetScheme(t *testing.T) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	s.AddKnownTypes(widgetGV, &widget{}, &widgetList{})
	metav1.AddToGroupVersion(s, widgetGV)
	return s
}

// A typed custom resource goes through the scheme it is registered in,
// and reads back unstructured too; declared cluster-scoped, it ignores
// namespaces.
func TestTypedCustomResources(t *testing.T) {
	c := newClient(t, sdktest.WithScheme(widgetScheme(t)), sdktest.WithClusterScoped(schema.GroupKind{Group: "example.dev", Kind: "widget"}))
	w := &widget{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: "ignored"}, Spec: widgetSpec{Size: 2}}
	if err := c.Create(ctx, w); err != nil {
		t.Fatal(err)
	}
	if w.Namespace != "" || w.Generation != 1 || w.APIVersion != "example.dev/v1" || w.Kind != "widget" {
		t.Errorf("created widget = ns %q, generation %d, %s %s", w.Namespace, w.Generation, w.APIVersion, w.Kind)
	}
	w.Status.Ready = true
	if err := c.UpdateStatus(ctx, w); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGV.WithKind("widget"))
	u.SetName("w")
	if err := c.Get(ctx, u); err != nil {
		t.Fatal(err)
	}
	if ready, _, _ := unstructured.NestedBool(u.Object, "status", "ready"); !ready {
		t.Errorf("unstructured read of the widget = %v", u.Object)
	}
	var list widgetList
	if err := c.List(ctx, "", &list); err != nil || len(list.Items) != 1 || !list.Items[0].Status.Ready {
		t.Fatalf("List = %v, %+v", err, list.Items)
	}
	if err := c.List(ctx, "ns", &list); err == nil {
		t.Error("a namespaced List of a cluster-scoped kind succeeded")
	}
}

// An explicit RESTMapper decides resources and scopes, and a kind it does
// not know is an error, as on an Operator.
func TestWithRESTMapper(t *testing.T) {
	mouse := schema.GroupVersionKind{Group: "example.dev", Version: "v1", Kind: "Mouse"}
	m := meta.NewDefaultRESTMapper(nil)
	m.AddSpecific(mouse, mouse.GroupVersion().WithResource("mice"), mouse.GroupVersion().WithResource("mouse"), meta.RESTScopeNamespace)
	c := newClient(t, sdktest.WithRESTMapper(m))
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(mouse)
	u.SetNamespace("ns")
	u.SetName("jerry")
	err := c.Get(ctx, u)
	if !apierrors.IsNotFound(err) || !strings.Contains(err.Error(), "mice.example.dev") {
		t.Errorf("Get of a missing mouse = %v, want NotFound naming mice.example.dev", err)
	}
	if err := c.Get(ctx, configMap("ns", "a", nil, nil)); err == nil || apierrors.IsNotFound(err) {
		t.Errorf("Get of a kind the mapper does not know = %v, want a mapping error", err)
	}
}

// Every call fails with the context's error once it is cancelled, as a
// request to an API server would, and changes nothing.
func TestCancelledContextFailsEveryCall(t *testing.T) {
	c := newClient(t, sdktest.WithObjects(configMap("ns", "a", nil, nil)))
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	cm := configMap("ns", "a", nil, map[string]string{"k": "v"})
	calls := map[string]error{
		"Get":          c.Get(cancelled, cm),
		"List":         c.List(cancelled, "ns", &corev1.ConfigMapList{}),
		"Create":       c.Create(cancelled, configMap("ns", "b", nil, nil)),
		"Update":       c.Update(cancelled, cm),
		"UpdateStatus": c.UpdateStatus(cancelled, cm),
		"Patch":        c.Patch(cancelled, cm, action.MergePatch, []byte(`{"data":{"k":"v"}}`)),
		"Delete":       c.Delete(cancelled, cm),
	}
	for name, err := range calls {
		if !errors.Is(err, context.Canceled) {
			t.Errorf("%s = %v, want context.Canceled", name, err)
		}
	}
	var list corev1.ConfigMapList
	if err := c.List(ctx, "ns", &list); err != nil || len(list.Items) != 1 || list.Items[0].Data != nil {
		t.Errorf("after the cancelled calls: %v, %+v", err, list.Items)
	}
}

// Each field manager's last configuration is remembered separately: a
// manager that stops applying a field removes it, and leaves the fields
// of other managers alone.
func TestApplyRemembersEachManager(t *testing.T) {
	c := newClient(t)
	apply := func(manager string, labels map[string]string) *corev1.ConfigMap {
		t.Helper()
		cm := configMap("ns", "shared", labels, nil)
		if err := c.Patch(ctx, cm, action.ApplyPatch, nil, action.WithFieldManager(manager)); err != nil {
			t.Fatal(err)
		}
		return cm
	}
	apply("a", map[string]string{"a1": "x", "a2": "x"})
	apply("b", map[string]string{"b": "x"})
	got := apply("a", map[string]string{"a1": "x"})
	if len(got.Labels) != 2 || got.Labels["a1"] != "x" || got.Labels["b"] != "x" {
		t.Errorf("labels = %v, want a1 and b", got.Labels)
	}
	if err := c.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	// A new object of the same name starts with no memory of the old one.
	if err := c.Create(ctx, configMap("ns", "shared", map[string]string{"a2": "y"}, nil)); err != nil {
		t.Fatal(err)
	}
	got = apply("a", map[string]string{"a1": "x"})
	if got.Labels["a2"] != "y" {
		t.Errorf("labels = %v: apply removed a label the manager applied to a deleted object of the same name", got.Labels)
	}
}

// Live is accepted and reads the same, current store.
func TestLiveReadsTheSameStore(t *testing.T) {
	c := newClient(t, sdktest.WithObjects(configMap("ns", "a", nil, map[string]string{"k": "v"})))
	cm := configMap("ns", "a", nil, nil)
	if err := c.Get(ctx, cm, query.Live()); err != nil || cm.Data["k"] != "v" {
		t.Fatalf("live Get = %v, %v", err, cm.Data)
	}
}

// An index registered with WithIndex answers query.MatchingIndex as a
// watch's cache index does; an unknown index is an error, not an empty list.
func TestMatchingIndexUsesTheRegisteredIndex(t *testing.T) {
	bySecret := func(obj runtime.Object) ([]string, error) {
		cm, ok := obj.(*corev1.ConfigMap)
		if !ok {
			return nil, errors.New("not a typed ConfigMap")
		}
		if s := cm.Data["secret"]; s != "" {
			return []string{s}, nil
		}
		return nil, nil
	}
	c := newClient(t,
		sdktest.WithIndex(schema.GroupKind{Kind: "ConfigMap"}, "secret", bySecret),
		sdktest.WithObjects(
			configMap("ns", "a", map[string]string{"tier": "1"}, map[string]string{"secret": "db"}),
			configMap("ns", "b", nil, map[string]string{"secret": "cache"}),
			configMap("ns", "c", map[string]string{"tier": "2"}, map[string]string{"secret": "db"}),
			configMap("other", "d", nil, map[string]string{"secret": "db"}),
		))
	ctx := context.Background()
	var list corev1.ConfigMapList
	if err := c.List(ctx, "ns", &list, query.MatchingIndex("secret", "db")); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, cm := range list.Items {
		got = append(got, cm.Name)
	}
	if strings.Join(got, ",") != "a,c" {
		t.Fatalf("List by index secret=db in ns = %v, want a,c", got)
	}
	if err := c.List(ctx, "ns", &list, query.MatchingIndex("secret", "db"), query.MatchingLabels(map[string]string{"tier": "2"})); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "c" {
		t.Fatalf("List by index and label = %v, want c", list.Items)
	}
	if err := c.List(ctx, "ns", &list, query.MatchingIndex("missing", "db")); err == nil || !strings.Contains(err.Error(), "WithIndex") {
		t.Errorf("List by an unregistered index = %v, want an error naming WithIndex", err)
	}
	if err := c.Get(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}, query.MatchingIndex("secret", "db")); err == nil {
		t.Error("Get with MatchingIndex: no error")
	}
}
