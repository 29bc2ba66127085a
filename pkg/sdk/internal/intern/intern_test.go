package intern_test

import (
	"fmt"
	"os"
	"reflect"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk/internal/intern"
)

// serial numbers the Pods podJSON makes, so that each has a uid, an IP and
// a container ID no other Pod of the test binary has.
var serial atomic.Int64

// podJSON returns the i-th Pod of a Deployment's kind in namespace ns, as
// the API server sent it (testdata/pod.json, managedFields and all):
// replica i%100 of the same hundred ReplicaSets, with its own name, uid,
// resourceVersion, IP and container ID. Decoding the same bytes twice
// gives an object and its next version, so to say.
func podJSON(t testing.TB, ns string, i int) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/pod.json")
	if err != nil {
		t.Fatal(err)
	}
	n := serial.Add(1)
	return []byte(strings.NewReplacer(
		`"namespace":"payments"`, fmt.Sprintf(`"namespace":%q`, ns),
		"pod-00001", fmt.Sprintf("pod-%05d", i),
		"cf7458e4-102a-4965-968d-6d54e91adf21", fmt.Sprintf("cf7458e4-102a-4965-968d-%012d", n),
		`"resourceVersion":"205"`, fmt.Sprintf(`"resourceVersion":"%d"`, 1000+i),
		"app-001", fmt.Sprintf("app-%03d", i%100),
		"10.88.0.3", fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255),
		"0000000000000000000000000000000000000000000000000000000000000001", fmt.Sprintf("%064d", n),
	).Replace(string(b)))
}

// freshNamespace returns a namespace name no object interned so far has,
// so that a test knows the whole history of its namespace string.
func freshNamespace() string { return fmt.Sprintf("team-%d", serial.Add(1)) }

// decode decodes data as client-go's typed clients do, each call into
// strings of its own.
func decode(t testing.TB, data []byte) runtime.Object {
	t.Helper()
	obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

func pod(t testing.TB, ns string, i int) *corev1.Pod {
	return decode(t, podJSON(t, ns, i)).(*corev1.Pod)
}

func unstructuredPod(t testing.TB, ns string, i int) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(podJSON(t, ns, i)); err != nil {
		t.Fatal(err)
	}
	return u
}

func deployment(t testing.TB) *appsv1.Deployment {
	t.Helper()
	b, err := os.ReadFile("testdata/deployment.json")
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, b).(*appsv1.Deployment)
}

// exporter is a PrometheusJmxExporter with every field set, its status too.
func exporter() *jmxv1alpha1.PrometheusJmxExporter {
	now := metav1.Now()
	return &jmxv1alpha1.PrometheusJmxExporter{
		TypeMeta: metav1.TypeMeta{APIVersion: jmxv1alpha1.SchemeGroupVersion.String(), Kind: "PrometheusJmxExporter"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "payments", Name: "pje-00001", UID: "5d1c0e6a-0f2b-4c3d-9e8f-7a6b5c4d3e2f", ResourceVersion: "4711",
			Generation: 2, CreationTimestamp: now,
			Labels:      map[string]string{"app.kubernetes.io/name": "app-001", "team": "payments"},
			Annotations: map[string]string{"handlerkit.dev/owner": "benchmark"},
			Finalizers:  []string{"jmx.handlerkit.dev/cleanup"},
		},
		Spec: jmxv1alpha1.PrometheusJmxExporterSpec{
			Selector: &metav1.LabelSelector{
				MatchLabels:      map[string]string{"app.kubernetes.io/name": "app-001"},
				MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"backend", "batch"}}},
			},
			Containers: []string{"app"},
			JVMs:       []string{"org.example.Main"},
			Config:     &jmxv1alpha1.ExporterConfig{ConfigMapName: "bench-config", ConfigMapKey: "config.yaml"},
			Port:       9404,
			Injection:  jmxv1alpha1.Injection{Strategy: jmxv1alpha1.InjectionEphemeralContainer},
			Agent:      &jmxv1alpha1.Agent{Image: "example.com/jmx-agent:1.0", Path: "/opt/agent.jar", AttachHelperPath: "/opt/attach"},
		},
		Status: jmxv1alpha1.PrometheusJmxExporterStatus{
			ObservedGeneration: 2,
			Conditions: []metav1.Condition{{
				Type: "ConfigValid", Status: metav1.ConditionTrue, ObservedGeneration: 2, LastTransitionTime: now,
				Reason: "ConfigMapFound", Message: "config.yaml parses",
			}},
			MetricsEndpoints: []jmxv1alpha1.MetricsEndpoint{{Pod: "pod-00001", Container: "app", JVM: "org.example.Main", PID: 1, JVMStartedAt: &now, PodIP: "10.88.0.3", Port: 9404}},
			PortPendingPods:  []string{"pod-00002"},
			MatchedPods:      2,
		},
	}
}

func TestStringsLeavesObjectsEqual(t *testing.T) {
	ns := freshNamespace()
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": "v1", "kind": "PodList"}}
	list.Items = []unstructured.Unstructured{*unstructuredPod(t, ns, 1), *unstructuredPod(t, ns, 2)}
	partial := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}, ObjectMeta: pod(t, ns, 3).ObjectMeta}
	tests := []struct {
		name string
		obj  runtime.Object
		// some returns one of the object's strings, to show that it
		// was interned.
		some func(runtime.Object) string
	}{
		{"pod with managedFields", pod(t, ns, 1), func(o runtime.Object) string { return o.(*corev1.Pod).Namespace }},
		{"deployment", deployment(t), func(o runtime.Object) string {
			return o.(*appsv1.Deployment).Spec.Template.Spec.Containers[0].Image
		}},
		{"custom resource", exporter(), func(o runtime.Object) string {
			return o.(*jmxv1alpha1.PrometheusJmxExporter).Spec.Selector.MatchExpressions[0].Values[1]
		}},
		{"unstructured pod", unstructuredPod(t, ns, 1), func(o runtime.Object) string {
			return o.(*unstructured.Unstructured).GetLabels()["app.kubernetes.io/name"]
		}},
		{"unstructured list", list, func(o runtime.Object) string {
			return o.(*unstructured.UnstructuredList).Items[1].GetNamespace()
		}},
		{"metadata only", partial, func(o runtime.Object) string {
			return string(o.(*metav1.PartialObjectMetadata).OwnerReferences[0].UID)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A twin, an object equal but for its uid, holds the same
			// strings: interned after it, the object shares them.
			twin := tt.obj.DeepCopyObject()
			if m, err := meta.Accessor(twin); err == nil {
				m.SetUID("twin-of-" + m.GetUID())
			}
			if err := intern.Strings(twin); err != nil {
				t.Fatal(err)
			}
			want := tt.obj.DeepCopyObject()
			if err := intern.Strings(tt.obj); err != nil {
				t.Fatal(err)
			}
			if s := tt.some(tt.obj); !canonical(s) {
				t.Errorf("%q was not interned", s)
			}
			if !equality.Semantic.DeepEqual(tt.obj, want) {
				t.Errorf("interned object differs from the original:\n got %#v\nwant %#v", tt.obj, want)
			}
			// Stricter than the semantic comparison: Quantities and
			// Times compare field by field too.
			if !reflect.DeepEqual(tt.obj, want) {
				t.Errorf("interned object is not deeply equal to the original")
			}
		})
	}
}

// same reports whether a and b share their backing array.
func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// canonical reports whether s is the canonical copy of its value.
func canonical(s string) bool {
	c, ok := intern.Canonical(s)
	return ok && same(s, c)
}

// mapKey returns m's key equal to k, the copy the map holds.
func mapKey[V any, K ~string](m map[K]V, k K) K {
	for key := range m {
		if key == k {
			return key
		}
	}
	return ""
}

// podStrings names strings of a Pod that every replica of its ReplicaSet
// has (1, 101 and 201 are replicas of the same one).
var podStrings = []struct {
	name string
	get  func(*corev1.Pod) string
}{
	{"namespace", func(p *corev1.Pod) string { return p.Namespace }},
	{"label key", func(p *corev1.Pod) string { return mapKey(p.Labels, "app.kubernetes.io/name") }},
	{"label value", func(p *corev1.Pod) string { return p.Labels["app.kubernetes.io/name"] }},
	{"owner uid", func(p *corev1.Pod) string { return string(p.OwnerReferences[0].UID) }},
	{"owner name", func(p *corev1.Pod) string { return p.OwnerReferences[0].Name }},
	{"image", func(p *corev1.Pod) string { return p.Spec.Containers[0].Image }},
	{"image in status", func(p *corev1.Pod) string { return p.Status.ContainerStatuses[0].Image }},
	{"image id", func(p *corev1.Pod) string { return p.Status.ContainerStatuses[0].ImageID }},
	{"env value", func(p *corev1.Pod) string { return p.Spec.Containers[0].Env[0].Value }},
	{"port protocol", func(p *corev1.Pod) string { return string(p.Spec.Containers[0].Ports[0].Protocol) }},
	{"resource name", func(p *corev1.Pod) string {
		return string(mapKey(p.Spec.Containers[0].Resources.Requests, corev1.ResourceMemory))
	}},
	{"probe port name", func(p *corev1.Pod) string { return p.Spec.Containers[0].ReadinessProbe.HTTPGet.Port.StrVal }},
	{"mount path", func(p *corev1.Pod) string { return p.Spec.Containers[0].VolumeMounts[0].MountPath }},
	{"toleration key", func(p *corev1.Pod) string { return p.Spec.Tolerations[0].Key }},
	{"condition type", func(p *corev1.Pod) string { return string(p.Status.Conditions[1].Type) }},
	{"phase", func(p *corev1.Pod) string { return string(p.Status.Phase) }},
}

func TestStringsSharesEqualStringsBetweenObjects(t *testing.T) {
	ns := freshNamespace()
	first, a, b := pod(t, ns, 1), pod(t, ns, 101), pod(t, ns, 201)
	for _, s := range podStrings {
		if same(s.get(a), s.get(b)) {
			t.Fatalf("%s: shared before interning; the test cannot tell", s.name)
		}
	}
	firstNS := first.Namespace
	for _, p := range []*corev1.Pod{first, a, b} {
		if err := intern.Strings(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range podStrings {
		if got := s.get(a); got != s.get(b) {
			t.Fatalf("%s: %q and %q; the pods should be replicas of one ReplicaSet", s.name, got, s.get(b))
		}
		if !same(s.get(a), s.get(b)) {
			t.Errorf("%s %q: two copies after interning, want one shared", s.name, s.get(a))
		}
	}
	// The first holder of a string keeps its own copy: when it was
	// interned, no other object was known to hold the string.
	if !same(first.Namespace, firstNS) {
		t.Errorf("the first Pod's namespace was replaced; it was the only holder then")
	}
}

func TestStringsLeavesStringsOfOneObjectAlone(t *testing.T) {
	data := podJSON(t, freshNamespace(), 1)
	p := decode(t, data).(*corev1.Pod)
	name, uid, rv, ip, id := p.Name, string(p.UID), p.ResourceVersion, p.Status.PodIP, p.Status.ContainerStatuses[0].ContainerID
	if err := intern.Strings(p); err != nil {
		t.Fatal(err)
	}
	// The same object again, as its next update would bring it.
	next := decode(t, data).(*corev1.Pod)
	nextIP := next.Status.PodIP
	if err := intern.Strings(next); err != nil {
		t.Fatal(err)
	}
	for what, c := range map[string][2]string{
		"name":            {p.Name, name},
		"uid":             {string(p.UID), uid},
		"resourceVersion": {p.ResourceVersion, rv},
		"pod IP":          {p.Status.PodIP, ip},
		"container ID":    {p.Status.ContainerStatuses[0].ContainerID, id},
		"next pod IP":     {next.Status.PodIP, nextIP},
	} {
		if !same(c[0], c[1]) {
			t.Errorf("%s %q was replaced; no other object holds it, so a canonical copy would only cost memory", what, c[0])
		}
	}
}

func TestStringsSharesNothingButStrings(t *testing.T) {
	ns := freshNamespace()
	a, b := pod(t, ns, 1), pod(t, ns, 101)
	for _, p := range []*corev1.Pod{pod(t, ns, 201), a, b} {
		if err := intern.Strings(p); err != nil {
			t.Fatal(err)
		}
	}
	if !same(a.Spec.Containers[0].Image, b.Spec.Containers[0].Image) {
		t.Fatal("the pods share no strings; the test cannot tell")
	}
	wantB := b.DeepCopy()

	// Change everything of a that could alias b: maps, slices, pointers.
	a.Labels["app.kubernetes.io/name"] = "changed"
	a.Labels["added"] = "yes"
	c := &a.Spec.Containers[0]
	c.Env[0].Value = "changed"
	c.Env = append(c.Env, corev1.EnvVar{Name: "ADDED"})
	c.Ports[0].Protocol = corev1.ProtocolUDP
	c.Resources.Requests[corev1.ResourceCPU] = c.Resources.Limits[corev1.ResourceMemory]
	delete(c.Resources.Limits, corev1.ResourceMemory)
	c.ReadinessProbe.HTTPGet.Path = "/changed"
	*a.OwnerReferences[0].Controller = false
	a.Spec.Tolerations[0].Key = "changed"
	a.Status.Conditions[0].Type = "Changed"
	a.Status.ContainerStatuses[0].Image = "changed"

	if !equality.Semantic.DeepEqual(b, wantB) {
		t.Errorf("changing one interned pod changed the other:\n got %#v\nwant %#v", b, wantB)
	}
}

func TestStringsSharesStringsOfUnstructuredObjects(t *testing.T) {
	ns := freshNamespace()
	a, b := unstructuredPod(t, ns, 1), unstructuredPod(t, ns, 101)
	for _, u := range []*unstructured.Unstructured{unstructuredPod(t, ns, 201), a, b} {
		if err := intern.Strings(u); err != nil {
			t.Fatal(err)
		}
	}
	image := func(u *unstructured.Unstructured) string {
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "containers")
		return cs[0].(map[string]any)["image"].(string)
	}
	for name, get := range map[string]func(*unstructured.Unstructured) string{
		"namespace":   (*unstructured.Unstructured).GetNamespace,
		"label value": func(u *unstructured.Unstructured) string { return u.GetLabels()["app.kubernetes.io/name"] },
		"image":       image,
		"map key":     func(u *unstructured.Unstructured) string { return mapKey(u.Object, "spec") },
	} {
		if !same(get(a), get(b)) {
			t.Errorf("%s %q: two copies after interning, want one shared", name, get(a))
		}
	}
	name := a.GetName()
	if err := intern.Strings(a); err != nil {
		t.Fatal(err)
	}
	if !same(a.GetName(), name) {
		t.Errorf("metadata.name was replaced; it is unique to the object")
	}

	// Maps and slices stay the object's own.
	labels := a.Object["metadata"].(map[string]any)["labels"].(map[string]any)
	labels["app.kubernetes.io/name"] = "changed"
	cs := a.Object["spec"].(map[string]any)["containers"].([]any)
	cs[0].(map[string]any)["image"] = "changed"
	if b.GetLabels()["app.kubernetes.io/name"] != "app-001" || image(b) != "registry.example.com/payments/app-001:v1.42.0" {
		t.Errorf("changing one interned object changed the other: labels %v, image %q", b.GetLabels(), image(b))
	}
}

// node is a hand-built object with a cycle, which no decoder makes.
type node struct {
	Name string
	Next *node
}

// odd holds the kinds of values API types rarely or never have.
type odd struct {
	Func      func()
	Chan      chan string
	Any       any
	Array     [2]string
	StructKey map[struct{ K string }]string
	IntKey    map[int]node
	Bytes     []byte
	private   string
}

func TestStringsNeverFailsOnOddValues(t *testing.T) {
	ring := &node{Name: "ring"}
	ring.Next = ring
	selfMap := map[string]any{"name": "self"}
	selfMap["self"] = selfMap
	selfSlice := []any{"self"}
	selfSlice = append(selfSlice, nil)
	selfSlice[1] = selfSlice
	tests := []struct {
		name string
		obj  any
	}{
		{"nil", nil},
		{"typed nil", (*corev1.Pod)(nil)},
		{"nil unstructured", (*unstructured.Unstructured)(nil)},
		{"empty unstructured", &unstructured.Unstructured{}},
		{"struct by value", corev1.Pod{}},
		{"pointer cycle", ring},
		{"map cycle", &unstructured.Unstructured{Object: map[string]any{"spec": selfMap}}},
		{"slice cycle", &unstructured.Unstructured{Object: map[string]any{"spec": selfSlice}}},
		{"odd fields", &odd{
			Func: func() {}, Chan: make(chan string), Any: [1]string{"array in interface"},
			Array:     [2]string{"a", "b"},
			StructKey: map[struct{ K string }]string{{K: "k"}: "v"},
			IntKey:    map[int]node{1: {Name: "one"}},
			Bytes:     []byte("bytes"), private: "private",
		}},
		{"interface holding a struct", &odd{Any: node{Name: "value"}}},
		{"interface holding a pointer", &odd{Any: &node{Name: "pointer"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := intern.Strings(tt.obj); err != nil {
				t.Errorf("Strings: %v", err)
			}
		})
	}
	o := &odd{Any: node{Name: "value"}, IntKey: map[int]node{1: {Name: "one"}}, Array: [2]string{"a", "b"}}
	want := &odd{Any: node{Name: "value"}, IntKey: map[int]node{1: {Name: "one"}}, Array: [2]string{"a", "b"}}
	if err := intern.Strings(o); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o, want) {
		t.Errorf("got %#v, want %#v", o, want)
	}
	for _, s := range []string{o.Any.(node).Name, o.IntKey[1].Name, o.Array[1]} {
		if !canonical(s) {
			t.Errorf("%q was not interned", s)
		}
	}
}

func TestStringsIsSafeForConcurrentUse(t *testing.T) {
	const workers = 8
	ns := freshNamespace()
	pods, want := make([]*corev1.Pod, workers), make([]*corev1.Pod, workers)
	for i := range pods {
		pods[i] = pod(t, ns, 100*i+7)
		want[i] = pods[i].DeepCopy()
	}
	errs := make(chan error, workers)
	for _, p := range pods {
		go func() { errs <- intern.Strings(p) }()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for i := range pods {
		if !reflect.DeepEqual(pods[i], want[i]) {
			t.Errorf("pod %d changed", i)
		}
	}
	// Whichever pods kept their own copies, the ones interned next share.
	a, b := pod(t, ns, 1007), pod(t, ns, 1107)
	for _, p := range []*corev1.Pod{a, b} {
		if err := intern.Strings(p); err != nil {
			t.Fatal(err)
		}
	}
	if !same(a.Spec.Containers[0].Image, b.Spec.Containers[0].Image) {
		t.Errorf("image %q interned twice", a.Spec.Containers[0].Image)
	}
}

// labelled returns an object without uid or name holding s as a label
// value: Strings interns every string of such an object.
func labelled(s string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"value": strings.Clone(s)}}}
}

// collect runs the garbage collector until weak pointers to unreachable
// objects are cleared (two cycles: one to find them, one for good measure).
func collect() {
	goruntime.GC()
	goruntime.GC()
}

func TestACanonicalStringOutlivesGarbageCollectionWhileAnObjectHoldsIt(t *testing.T) {
	// Longer than the tiny allocator's 16 bytes, so that the string has an
	// allocation of its own.
	s := fmt.Sprintf("outlives-gc-%d-%s", serial.Add(1), strings.Repeat("x", 24))
	a, b := labelled(s), labelled(s)
	if err := intern.Strings(a); err != nil {
		t.Fatal(err)
	}
	collect() // a holds the canonical string; nothing else refers to it
	if err := intern.Strings(b); err != nil {
		t.Fatal(err)
	}
	if !same(a.Labels["value"], b.Labels["value"]) {
		t.Errorf("%q: a second copy after a garbage collection, want the one a holds", s)
	}
	goruntime.KeepAlive(a)
}

func TestCanonicalStringsNoObjectHoldsAreCollectedAndSwept(t *testing.T) {
	const perRound, rounds = 2000, 10
	before := intern.TableLen()
	var last []string
	for r := range rounds {
		objs := make([]*corev1.Pod, perRound)
		last = last[:0]
		for i := range objs {
			s := fmt.Sprintf("swept-%d-%d-%d-%s", serial.Add(1), r, i, strings.Repeat("y", 24))
			objs[i] = labelled(s)
			if err := intern.Strings(objs[i]); err != nil {
				t.Fatal(err)
			}
			last = append(last, s)
		}
		for i, s := range last[:10] {
			if !canonical(objs[i].Labels["value"]) {
				t.Fatalf("%q is not canonical while an object holds it", s)
			}
		}
		goruntime.KeepAlive(objs)
		objs = nil
		collect()
	}
	for _, s := range last {
		if _, ok := intern.Canonical(s); ok {
			t.Fatalf("%q still has a canonical copy after every object holding it was collected", s)
		}
	}
	// Without sweeping, the table would hold every string of every round.
	if n, most := intern.TableLen()-before, 2*perRound+32*64; n > most {
		t.Errorf("the table grew by %d entries over %d rounds of %d strings that were dropped; want at most %d", n, rounds, perRound, most)
	}
}
