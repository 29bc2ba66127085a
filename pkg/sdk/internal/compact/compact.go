// Package compact keeps cached objects in their protobuf wire form.
//
// A decoded Pod costs a cache about 6 KB: the Go structs behind its spec and
// status, their slices, pointers and small maps. Its protobuf encoding
// without metadata is about 1.3 KB. An Object keeps the metadata decoded,
// because the cache, its indexes, selectors and owner lookups read it all
// the time, and the rest as the bytes Marshal wrote; Decode turns it back
// into the typed object, a fresh one on every call.
//
// Only types with generated protobuf code compact: the built-in kinds of
// k8s.io/api, whose typed clients already read them as protobuf, so a
// decoded Object is exactly what the client would have decoded from the
// wire. Custom resources (JSON on the wire), unstructured objects and
// metadata-only objects are cached decoded, wrapped in a Decoded.
//
// Object and Decoded are the only forms a cache entry takes, and Expand
// is the only way from an entry to a reader: it returns a copy the reader
// owns, whatever the form.
package compact

import (
	"fmt"
	"reflect"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// protoObject is a type with generated protobuf code.
type protoObject interface {
	Marshal() ([]byte, error)
	Unmarshal(data []byte) error
}

// Object is a cached object in compact form: its type and object metadata
// decoded, the rest in protobuf. It is a runtime.Object and a metav1.Object,
// so the cache keys, indexes and selects it as it would the decoded object.
// It is read-only: Decode returns a decoded copy to read or change.
type Object struct {
	metav1.TypeMeta
	metav1.ObjectMeta
	layout *layout
	// data is the object encoded with Marshal, its TypeMeta and ObjectMeta
	// zeroed. Never modified after Of made it.
	data []byte
}

// layout is how a compactable Go type is built: its struct type and the
// indexes of its embedded TypeMeta and ObjectMeta.
type layout struct {
	typ        reflect.Type // the struct type; objects are pointers to it
	typeMeta   int
	objectMeta int
}

// layouts caches layoutOf's answers by pointer type; nil means the type
// does not compact.
var layouts sync.Map // reflect.Type -> *layout

var (
	typeMetaType   = reflect.TypeFor[metav1.TypeMeta]()
	objectMetaType = reflect.TypeFor[metav1.ObjectMeta]()
)

// layoutOf returns the layout of obj's type, or nil when the type does not
// compact: not a pointer to a struct with protobuf code and embedded
// TypeMeta and ObjectMeta.
func layoutOf(obj runtime.Object) *layout {
	t := reflect.TypeOf(obj)
	if l, ok := layouts.Load(t); ok {
		return l.(*layout)
	}
	var l *layout
	if _, ok := obj.(protoObject); ok && t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		l = &layout{typ: t.Elem(), typeMeta: -1, objectMeta: -1}
		for i := range l.typ.NumField() {
			f := l.typ.Field(i)
			switch {
			case f.Anonymous && f.Type == typeMetaType:
				l.typeMeta = i
			case f.Anonymous && f.Type == objectMetaType:
				l.objectMeta = i
			}
		}
		if l.typeMeta < 0 || l.objectMeta < 0 {
			l = nil
		}
	}
	layouts.Store(t, l)
	return l
}

// Of returns obj in compact form, and true, when its type compacts. It
// takes obj over: obj's TypeMeta and ObjectMeta are zeroed (the Object
// holds them now) unless Of fails, and obj must not be used afterwards
// either way but through the result. A type that does not compact, or an
// encoding failure, returns obj itself and false (with the error).
func Of(obj runtime.Object) (runtime.Object, bool, error) {
	if obj == nil {
		return obj, false, nil
	}
	l := layoutOf(obj)
	if l == nil {
		return obj, false, nil
	}
	v := reflect.ValueOf(obj)
	if v.IsNil() {
		return obj, false, nil
	}
	tmField, omField := v.Elem().Field(l.typeMeta), v.Elem().Field(l.objectMeta)
	tm := tmField.Interface().(metav1.TypeMeta)
	om := omField.Interface().(metav1.ObjectMeta)
	tmField.SetZero()
	omField.SetZero()
	data, err := obj.(protoObject).Marshal()
	if err != nil {
		tmField.Set(reflect.ValueOf(tm))
		omField.Set(reflect.ValueOf(om))
		return obj, false, fmt.Errorf("compact: encode %T: %w", obj, err)
	}
	return &Object{TypeMeta: tm, ObjectMeta: om, layout: l, data: data}, true, nil
}

// Decode returns the decoded object, a new one on every call: the caller
// owns it.
func (o *Object) Decode() (runtime.Object, error) {
	v := reflect.New(o.layout.typ)
	if err := v.Interface().(protoObject).Unmarshal(o.data); err != nil {
		return nil, fmt.Errorf("compact: decode %s %s/%s: %w", o.Kind, o.Namespace, o.Name, err)
	}
	v.Elem().Field(o.layout.typeMeta).Set(reflect.ValueOf(o.TypeMeta))
	v.Elem().Field(o.layout.objectMeta).Set(reflect.ValueOf(*o.ObjectMeta.DeepCopy()))
	return v.Interface().(runtime.Object), nil
}

// DeepCopyObject copies the Object, still compact; the encoded bytes, which
// never change, are shared.
func (o *Object) DeepCopyObject() runtime.Object {
	return &Object{TypeMeta: o.TypeMeta, ObjectMeta: *o.ObjectMeta.DeepCopy(), layout: o.layout, data: o.data}
}

// Expand returns a cache entry as a copy the caller owns, and true: an
// Object decoded, a Decoded's object deep-copied. So every reader of the
// cache gets its own copy, whatever the representation. Any other value is
// returned as it is, with false. A value that is not a runtime.Object
// returns nil.
func Expand(obj any) (runtime.Object, bool, error) {
	switch o := obj.(type) {
	case *Object:
		d, err := o.Decode()
		return d, err == nil, err
	case *Decoded:
		return o.obj.DeepCopyObject(), true, nil
	case runtime.Object:
		return o, false, nil
	}
	return nil, false, nil
}

// Copy returns a copy of obj the caller owns: obj decoded when it is an
// Object, else obj's deep copy.
func Copy(obj runtime.Object) (runtime.Object, error) {
	out, fresh, err := Expand(obj)
	if err != nil || fresh || out == nil {
		return out, err
	}
	return out.DeepCopyObject(), nil
}
