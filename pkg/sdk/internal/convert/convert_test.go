package convert

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// unknownType is a runtime.Object no scheme knows.
type unknownType struct {
	metav1.TypeMeta
	metav1.ObjectMeta
}

func (u *unknownType) DeepCopyObject() runtime.Object { c := *u; return &c }

func TestKindOf(t *testing.T) {
	withKind := &unstructured.Unstructured{}
	withKind.SetAPIVersion("example.dev/v1")
	withKind.SetKind("Widget")
	var typedNil *corev1.Pod
	cases := []struct {
		name    string
		obj     runtime.Object
		want    schema.GroupVersionKind
		wantErr string
	}{
		{"typed from the scheme", &corev1.Pod{}, corev1.SchemeGroupVersion.WithKind("Pod"), ""},
		{"typed list", &corev1.PodList{}, corev1.SchemeGroupVersion.WithKind("PodList"), ""},
		{"unstructured", withKind, schema.GroupVersionKind{Group: "example.dev", Version: "v1", Kind: "Widget"}, ""},
		{"unknown type with TypeMeta", &unknownType{TypeMeta: metav1.TypeMeta{APIVersion: "x.dev/v2", Kind: "Thing"}}, schema.GroupVersionKind{Group: "x.dev", Version: "v2", Kind: "Thing"}, ""},
		{"unknown type without TypeMeta", &unknownType{}, schema.GroupVersionKind{}, "cannot tell the kind"},
		{"unstructured without kind", &unstructured.Unstructured{Object: map[string]any{}}, schema.GroupVersionKind{}, "cannot tell the kind"},
		{"kind without version", &unknownType{TypeMeta: metav1.TypeMeta{Kind: "Thing"}}, schema.GroupVersionKind{}, "no apiVersion"},
		{"nil", nil, schema.GroupVersionKind{}, "object is nil"},
		{"typed nil", typedNil, schema.GroupVersionKind{}, "object is nil"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := KindOf(clientgoscheme.Scheme, c.obj)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want %q", err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("KindOf = %v, %v; want %v", got, err, c.want)
			}
		})
	}
}

func TestIntoCopiesAndConverts(t *testing.T) {
	src := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Labels: map[string]string{"k": "v"}}, Data: map[string]string{"x": "1"}}

	same := &corev1.ConfigMap{}
	if err := Into(same, src); err != nil {
		t.Fatal(err)
	}
	same.Labels["k"] = "changed"
	if src.Labels["k"] != "v" {
		t.Error("Into shared a map with the source")
	}

	u := &unstructured.Unstructured{}
	if err := Into(u, src); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := unstructured.NestedString(u.Object, "data", "x"); v != "1" {
		t.Errorf("unstructured data.x = %q, want 1", v)
	}

	// Fields absent from the source end up zero, not left over.
	back := &corev1.ConfigMap{BinaryData: map[string][]byte{"stale": nil}}
	if err := Into(back, u); err != nil {
		t.Fatal(err)
	}
	if back.Data["x"] != "1" || back.BinaryData != nil {
		t.Errorf("converted back = %+v, want data.x=1 and no stale binaryData", back)
	}
}

func TestIntoRejectsBadArguments(t *testing.T) {
	var typedNil *corev1.ConfigMap
	cases := []struct {
		name     string
		dst, src runtime.Object
	}{
		{"nil destination", nil, &corev1.ConfigMap{}},
		{"typed nil destination", typedNil, &corev1.ConfigMap{}},
		{"nil source", &corev1.ConfigMap{}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := Into(c.dst, c.src); !errors.Is(err, ErrNilObject) {
				t.Fatalf("Into = %v, want ErrNilObject", err)
			}
		})
	}
	if _, err := ToUnstructured(nil, schema.GroupVersionKind{}); !errors.Is(err, ErrNilObject) {
		t.Fatalf("ToUnstructured(nil) = %v, want ErrNilObject", err)
	}
}
