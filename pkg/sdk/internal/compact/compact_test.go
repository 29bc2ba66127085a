package compact_test

import (
	"fmt"
	"os"
	"reflect"
	"sort"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/cache"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk/internal/compact"
)

// fromFile decodes a test object shared with the intern package's tests,
// as a typed client would: JSON from the file, then through protobuf, which
// is how the clients of built-in kinds read them.
func fromFile(t testing.TB, name string, into runtime.Object) runtime.Object {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	wire, err := obj.(interface{ Marshal() ([]byte, error) }).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if err := into.(interface{ Unmarshal([]byte) error }).Unmarshal(wire); err != nil {
		t.Fatal(err)
	}
	// Protobuf does not carry apiVersion and kind; the cache stamps them.
	into.GetObjectKind().SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	return into
}

func testPod(t testing.TB) *corev1.Pod {
	p := fromFile(t, "pod.json", &corev1.Pod{}).(*corev1.Pod)
	p.ManagedFields = nil
	return p
}

// compacted returns obj's compact form, failing the test when it has none.
func compacted(t testing.TB, obj runtime.Object) *compact.Object {
	t.Helper()
	out, ok, err := compact.Of(obj)
	if err != nil || !ok {
		t.Fatalf("Of(%T) = %T, %v, %v; want a compact object", obj, out, ok, err)
	}
	return out.(*compact.Object)
}

func TestDecodeGivesBackTheObjectExactly(t *testing.T) {
	for _, obj := range []runtime.Object{
		testPod(t),
		fromFile(t, "deployment.json", &appsv1.Deployment{}),
		&corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: "cfg", Namespace: "ns", Labels: map[string]string{"a": "b"}},
			Data:       map[string]string{"config.yaml": "rules: []"},
			BinaryData: map[string][]byte{"blob": {0, 1, 2}},
		},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}, Data: map[string][]byte{"k": []byte("v")}, Type: corev1.SecretTypeOpaque},
	} {
		t.Run(fmt.Sprintf("%T", obj), func(t *testing.T) {
			want := obj.DeepCopyObject()
			c := compacted(t, obj)
			got, err := c.Decode()
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("decoded object differs from the original:\n got %+v\nwant %+v", got, want)
			}
			if c.GetName() != want.(metav1.Object).GetName() || c.GroupVersionKind() != want.GetObjectKind().GroupVersionKind() {
				t.Errorf("compact object's metadata: %s %s, want %s %s", c.GetName(), c.GroupVersionKind(),
					want.(metav1.Object).GetName(), want.GetObjectKind().GroupVersionKind())
			}
		})
	}
}

func TestDecodeReturnsAFreshCopyEachTime(t *testing.T) {
	c := compacted(t, testPod(t))
	first, err := c.Decode()
	if err != nil {
		t.Fatal(err)
	}
	p := first.(*corev1.Pod)
	p.Labels["changed"] = "yes"
	p.Spec.Containers[0].Image = "changed"
	p.Status.PodIP = "changed"
	again, err := c.Decode()
	if err != nil {
		t.Fatal(err)
	}
	q := again.(*corev1.Pod)
	if _, ok := q.Labels["changed"]; ok || q.Spec.Containers[0].Image == "changed" || q.Status.PodIP == "changed" {
		t.Errorf("a change to one decoded copy shows in the next: %+v", q)
	}
	if _, ok := c.Labels["changed"]; ok {
		t.Errorf("a change to a decoded copy shows in the compact object's metadata")
	}
}

func TestDeepCopyObjectStaysCompactAndOwnsItsMetadata(t *testing.T) {
	c := compacted(t, testPod(t))
	cp, ok := c.DeepCopyObject().(*compact.Object)
	if !ok {
		t.Fatalf("DeepCopyObject of a compact object is %T", c.DeepCopyObject())
	}
	cp.Labels["changed"] = "yes"
	if _, ok := c.Labels["changed"]; ok {
		t.Errorf("the copy's labels are the original's")
	}
	a, _ := c.Decode()
	b, _ := cp.Decode()
	b.(*corev1.Pod).Labels = a.(*corev1.Pod).Labels
	if !reflect.DeepEqual(a, b) {
		t.Errorf("the copy decodes to another object")
	}
}

func TestObjectsWithoutProtobufCodeAreLeftAsTheyAre(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"name": "p"}}}
	exporter := &jmxv1alpha1.PrometheusJmxExporter{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: "ns"}}
	var nilPod *corev1.Pod
	for _, obj := range []runtime.Object{u, exporter, nilPod, nil} {
		var want runtime.Object
		if obj != nil && obj != runtime.Object(nilPod) {
			want = obj.DeepCopyObject()
		}
		out, ok, err := compact.Of(obj)
		if ok || err != nil {
			t.Errorf("Of(%T) = %v, %v; want the object back, false", obj, ok, err)
		}
		if out != obj {
			t.Errorf("Of(%T) returned another object", obj)
		}
		if want != nil && !reflect.DeepEqual(obj, want) {
			t.Errorf("Of(%T) changed it", obj)
		}
	}
}

func TestACompactObjectIsKeyedAndSelectedByItsMetadata(t *testing.T) {
	p := testPod(t)
	ns, name, lbls := p.Namespace, p.Name, labels.Set(p.Labels)
	c := compacted(t, p)
	key, err := cache.MetaNamespaceKeyFunc(c)
	if err != nil || key != ns+"/"+name {
		t.Errorf("key %q, %v; want %s/%s", key, err, ns, name)
	}
	a, err := meta.Accessor(c)
	if err != nil {
		t.Fatal(err)
	}
	if !labels.SelectorFromSet(lbls).Matches(labels.Set(a.GetLabels())) {
		t.Errorf("labels %v do not match %v", a.GetLabels(), lbls)
	}
	if len(a.GetOwnerReferences()) != 1 {
		t.Errorf("owner references %v, want the ReplicaSet", a.GetOwnerReferences())
	}
}

func TestExpandAndCopy(t *testing.T) {
	p := testPod(t)
	want := p.DeepCopy()
	c := compacted(t, p)
	got, fresh, err := compact.Expand(c)
	if err != nil || !fresh || !reflect.DeepEqual(got, want) {
		t.Errorf("Expand(compact) = %T, %v, %v; want the decoded Pod, fresh", got, fresh, err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}
	got, fresh, err = compact.Expand(cm)
	if err != nil || fresh || got != runtime.Object(cm) {
		t.Errorf("Expand(decoded) = %p, %v, %v; want the same object, not fresh", got, fresh, err)
	}
	if got, _, _ := compact.Expand("not an object"); got != nil {
		t.Errorf("Expand(string) = %v, want nil", got)
	}
	cp, err := compact.Copy(cm)
	if err != nil || cp == runtime.Object(cm) || !reflect.DeepEqual(cp, cm) {
		t.Errorf("Copy(decoded) = %p, %v; want an equal copy", cp, err)
	}
	cp, err = compact.Copy(c)
	if err != nil || !reflect.DeepEqual(cp, want) {
		t.Errorf("Copy(compact) = %v; want the decoded Pod", err)
	}
}

func TestViewDecodesWhatItReturns(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	var want []*corev1.Pod
	for i := range 3 {
		p := testPod(t)
		p.Name = fmt.Sprintf("pod-%d", i)
		want = append(want, p.DeepCopy())
		if err := idx.Add(compacted(t, p)); err != nil {
			t.Fatal(err)
		}
	}
	plain := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: want[0].Namespace}}
	if err := idx.Add(plain); err != nil {
		t.Fatal(err)
	}
	v := compact.NewView(idx)
	if compact.Unwrap(v) != idx || compact.Unwrap(idx) != idx || compact.NewView(nil) != nil {
		t.Errorf("Unwrap and NewView(nil) misbehave")
	}

	got, ok, err := v.GetByKey(want[1].Namespace + "/pod-1")
	if err != nil || !ok || !reflect.DeepEqual(got, want[1]) {
		t.Errorf("GetByKey = %T, %v, %v; want pod-1 decoded", got, ok, err)
	}
	got, ok, err = v.Get(want[2])
	if err != nil || !ok || !reflect.DeepEqual(got, want[2]) {
		t.Errorf("Get = %T, %v, %v; want pod-2 decoded", got, ok, err)
	}
	if got, ok, err = v.GetByKey("absent/none"); ok || err != nil || got != nil {
		t.Errorf("GetByKey(absent) = %v, %v, %v", got, ok, err)
	}
	names := func(objs []any) []string {
		var out []string
		for _, o := range objs {
			if _, ok := o.(*compact.Object); ok {
				t.Errorf("a compact object escaped the view")
			}
			out = append(out, o.(metav1.Object).GetName())
		}
		sort.Strings(out)
		return out
	}
	all := []string{"plain", "pod-0", "pod-1", "pod-2"}
	if got := names(v.List()); !reflect.DeepEqual(got, all) {
		t.Errorf("List = %v, want %v", got, all)
	}
	byIndex, err := v.ByIndex(cache.NamespaceIndex, want[0].Namespace)
	if err != nil || !reflect.DeepEqual(names(byIndex), all) {
		t.Errorf("ByIndex = %v, %v; want %v", names(byIndex), err, all)
	}
	index, err := v.Index(cache.NamespaceIndex, plain)
	if err != nil || !reflect.DeepEqual(names(index), all) {
		t.Errorf("Index = %v, %v; want %v", names(index), err, all)
	}
	if got, _, _ := v.GetByKey(plain.Namespace + "/plain"); got != any(plain) {
		t.Errorf("a decoded object is not the cache's own through the view")
	}
	if keys := v.ListKeys(); len(keys) != 4 {
		t.Errorf("ListKeys = %v", keys)
	}
}
