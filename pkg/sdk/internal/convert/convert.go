// Package convert moves Kubernetes objects between their typed and
// unstructured forms for the sdk, query and action packages.
package convert

import (
	"errors"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// ErrNilObject is returned for a nil object or a nil pointer in an interface.
var ErrNilObject = errors.New("object is nil")

// IsNil reports whether obj is nil or a typed nil pointer.
func IsNil(obj runtime.Object) bool {
	if obj == nil {
		return true
	}
	v := reflect.ValueOf(obj)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// KindOf returns obj's group, version and kind: from the scheme for typed
// objects (whose TypeMeta is usually empty), from the object itself for
// unstructured ones and for typed ones the scheme does not know.
func KindOf(scheme *runtime.Scheme, obj runtime.Object) (schema.GroupVersionKind, error) {
	if IsNil(obj) {
		return schema.GroupVersionKind{}, ErrNilObject
	}
	if _, ok := obj.(runtime.Unstructured); !ok && scheme != nil {
		if gvks, _, err := scheme.ObjectKinds(obj); err == nil && len(gvks) > 0 {
			set := obj.GetObjectKind().GroupVersionKind()
			for _, gvk := range gvks {
				if gvk == set {
					return gvk, nil
				}
			}
			return gvks[0], nil
		}
	}
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" {
		return gvk, fmt.Errorf("cannot tell the kind of %T: set apiVersion and kind, or register the type in the scheme", obj)
	}
	if gvk.Version == "" {
		return gvk, fmt.Errorf("%T of kind %q has no apiVersion", obj, gvk.Kind)
	}
	return gvk, nil
}

// ToUnstructured returns obj as an Unstructured with apiVersion and kind
// set to gvk. An Unstructured input is deep-copied.
func ToUnstructured(obj runtime.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	if IsNil(obj) {
		return nil, ErrNilObject
	}
	u := &unstructured.Unstructured{}
	if in, ok := obj.(*unstructured.Unstructured); ok {
		u = in.DeepCopy()
	} else {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			return nil, fmt.Errorf("convert %T to unstructured: %w", obj, err)
		}
		u.Object = m
	}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// Into replaces the content of dst, which must be a non-nil pointer, with a
// deep copy of src, converting between typed and unstructured forms as
// needed. Fields absent from src end up zero in dst.
func Into(dst, src runtime.Object) error {
	if IsNil(dst) {
		return fmt.Errorf("destination: %w", ErrNilObject)
	}
	if IsNil(src) {
		return fmt.Errorf("source: %w", ErrNilObject)
	}
	dv := reflect.ValueOf(dst)
	if dv.Kind() != reflect.Pointer {
		return fmt.Errorf("destination %T is not a pointer", dst)
	}
	if reflect.TypeOf(dst) == reflect.TypeOf(src) {
		dv.Elem().Set(reflect.ValueOf(src.DeepCopyObject()).Elem())
		return nil
	}
	var content map[string]any
	if u, ok := src.(runtime.Unstructured); ok {
		content = runtime.DeepCopyJSON(u.UnstructuredContent())
	} else {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(src)
		if err != nil {
			return fmt.Errorf("convert %T to unstructured: %w", src, err)
		}
		content = m
	}
	if u, ok := dst.(runtime.Unstructured); ok {
		u.SetUnstructuredContent(content)
		return nil
	}
	dv.Elem().Set(reflect.Zero(dv.Elem().Type()))
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(content, dst); err != nil {
		return fmt.Errorf("cannot decode into %T (do the Go type and the object's schema agree?): %w", dst, err)
	}
	return nil
}
