// Package intern makes the strings of cached Kubernetes objects share their
// memory: after Strings, equal strings in thousands of objects (namespaces,
// label keys and values, images, owner references, enum values such as
// "TCP" or "Running") point to one backing array instead of one decoded
// copy each.
//
// It uses the standard library's unique package, which holds its canonical
// strings through weak pointers: a string that no object uses any more is
// collected like any other.
package intern

import (
	"fmt"
	"reflect"
	"sync"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// maxDepth bounds the walk. API objects are trees, so it never cuts one
// short in practice (a CRD's schema nests a few dozen levels); it only
// guards against a cycle a hand-built object might have.
const maxDepth = 256

// Strings replaces, in place, the strings reachable from obj through
// exported fields, pointers, slices, arrays, maps (string keys included)
// and interfaces by canonical copies of themselves. obj is usually a pointer to
// a typed API object or an *unstructured.Unstructured.
//
// Only a string is ever replaced, and only by an equal one, so obj is
// semantically unchanged at every step. Maps with string keys are rebuilt
// (a key cannot be replaced in place), each as a new map of obj's own:
// nothing but strings, which are immutable, ends up shared between
// objects, so a handler may modify its copy of one object freely.
//
// Strings that are unique to one object by definition (metadata.name, uid
// and resourceVersion) are left alone: interning a string that is never
// repeated would cost the canonical table's entry and save nothing.
// Unexported fields (those of resource.Quantity and time.Time) cannot be
// set and are skipped.
//
// Strings never panics: a panic in the walk is recovered and returned as
// an error, and obj is left as it was at that point, which is equal to what
// it was before.
func Strings(obj any) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("intern: recovered from a panic while walking %T: %v", obj, p)
		}
	}()
	switch o := obj.(type) {
	case nil:
	case *unstructured.Unstructured:
		if o != nil && o.Object != nil {
			o.Object = object(o.Object)
		}
	case *unstructured.UnstructuredList:
		if o == nil {
			return nil
		}
		if o.Object != nil {
			o.Object = object(o.Object)
		}
		for i := range o.Items {
			if o.Items[i].Object != nil {
				o.Items[i].Object = object(o.Items[i].Object)
			}
		}
	default:
		v := reflect.ValueOf(obj)
		planOf(v.Type()).walk(v, 0)
	}
	return nil
}

// str returns the canonical copy of s.
func str(s string) string {
	if s == "" {
		return s
	}
	return canonical(s)
}

// canonical is unique's canonical copy of s; a variable so that a test can
// make it fail.
var canonical = func(s string) string { return unique.Make(s).Value() }

// object interns an unstructured object: its keys and values, except the
// values of metadata's unique fields.
func object(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if md, ok := v.(map[string]any); ok && k == "metadata" {
			out[str(k)] = metadata(md)
			continue
		}
		out[str(k)] = jsonValue(v, 1)
	}
	return out
}

// metadata interns an unstructured object's metadata but for the values
// of uniqueMeta.
func metadata(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if _, skip := uniqueMeta[k]; skip {
			out[str(k)] = v
			continue
		}
		out[str(k)] = jsonValue(v, 2)
	}
	return out
}

// uniqueMeta names the metadata fields that differ in every object, by
// their JSON name and by their Go name in metav1.ObjectMeta.
var uniqueMeta = map[string]string{"name": "Name", "uid": "UID", "resourceVersion": "ResourceVersion"}

// jsonValue interns a value of an unstructured object and returns it:
// strings are replaced, maps rebuilt, slices changed in place.
func jsonValue(v any, depth int) any {
	if depth > maxDepth {
		return v
	}
	switch t := v.(type) {
	case string:
		return str(t)
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[str(k)] = jsonValue(e, depth+1)
		}
		return out
	case []any:
		for i := range t {
			t[i] = jsonValue(t[i], depth+1)
		}
		return t
	}
	return v
}

// plan says how to walk a value of one type: only the parts that can hold
// strings are visited. Plans are built once per type and shared.
type plan struct {
	kind reflect.Kind
	typ  reflect.Type
	// elem is the plan of what a pointer points to, of a slice's or
	// array's elements or of a map's values; nil when they hold no
	// strings (or, in a recursive type, before it is known).
	elem *plan
	// fields are the struct fields to walk: exported, able to hold a
	// string and, in ObjectMeta, not unique to the object.
	fields []field
	// stringKeys is set for maps with string keys, which are rebuilt.
	stringKeys bool
}

type field struct {
	index int
	plan  *plan
}

// plans caches the plan of every type walked from the top (the object's
// type, or the dynamic type of an interface).
var plans sync.Map // reflect.Type → *plan (nil when no strings)

// planOf returns t's plan, nil when t holds no strings.
func planOf(t reflect.Type) *plan {
	if p, ok := plans.Load(t); ok {
		return p.(*plan)
	}
	p := build(t, map[reflect.Type]*plan{})
	actual, _ := plans.LoadOrStore(t, p)
	return actual.(*plan)
}

// build makes t's plan. memo holds the plans of the types being built, so
// that a recursive type (a CRD's JSON schema) refers to its own plan.
func build(t reflect.Type, memo map[reflect.Type]*plan) *plan {
	if p, ok := memo[t]; ok {
		return p
	}
	p := &plan{kind: t.Kind(), typ: t}
	memo[t] = p
	keep := true
	switch t.Kind() {
	case reflect.String, reflect.Interface:
	case reflect.Pointer, reflect.Slice, reflect.Array:
		p.elem = build(t.Elem(), memo)
		keep = p.elem != nil
	case reflect.Map:
		p.stringKeys = t.Key().Kind() == reflect.String
		p.elem = build(t.Elem(), memo)
		keep = p.stringKeys || p.elem != nil
	case reflect.Struct:
		for n := range t.NumField() {
			f := t.Field(n)
			if !f.IsExported() || (t == objectMeta && isUniqueMeta(f.Name)) {
				continue
			}
			if fp := build(f.Type, memo); fp != nil {
				p.fields = append(p.fields, field{index: n, plan: fp})
			}
		}
		keep = len(p.fields) > 0
	default:
		keep = false
	}
	if !keep {
		// A recursive reference taken meanwhile keeps the empty plan,
		// which walks nothing.
		memo[t] = nil
		return nil
	}
	return p
}

// walk interns the strings of v along plan p. Strings, and maps that must
// be rebuilt, are only replaced when v is settable, which everything
// reached through a pointer, a slice or an exported field of an
// addressable struct is.
func (p *plan) walk(v reflect.Value, depth int) {
	if p == nil || depth > maxDepth {
		return
	}
	switch p.kind {
	case reflect.String:
		if v.Len() > 0 && v.CanSet() {
			v.SetString(str(v.String()))
		}
	case reflect.Pointer:
		if !v.IsNil() {
			p.elem.walk(v.Elem(), depth+1)
		}
	case reflect.Interface:
		walkInterface(v, depth)
	case reflect.Struct:
		for _, f := range p.fields {
			f.plan.walk(v.Field(f.index), depth+1)
		}
	case reflect.Slice:
		if p.elem != nil {
			for i := range v.Len() {
				p.elem.walk(v.Index(i), depth+1)
			}
		}
	case reflect.Array:
		if p.elem != nil && v.CanAddr() {
			for i := range v.Len() {
				p.elem.walk(v.Index(i), depth+1)
			}
		}
	case reflect.Map:
		p.walkMap(v, depth)
	}
}

// walkInterface interns the value an interface holds. A pointer is
// followed; any other value is copied, interned and stored back.
func walkInterface(v reflect.Value, depth int) {
	if v.IsNil() {
		return
	}
	e := v.Elem()
	if e.Kind() == reflect.Pointer {
		planOf(e.Type()).walk(e, depth+1)
		return
	}
	if !v.CanSet() {
		return
	}
	switch t := e.Interface().(type) {
	case string, map[string]any, []any:
		v.Set(reflect.ValueOf(jsonValue(t, depth+1)))
		return
	}
	p := planOf(e.Type())
	if p == nil {
		return
	}
	c := reflect.New(e.Type()).Elem()
	c.Set(e)
	p.walk(c, depth+1)
	v.Set(c)
}

// walkMap interns a map's keys and values. A map with string keys is
// rebuilt, as Go keeps a key's first copy when it is set again.
func (p *plan) walkMap(v reflect.Value, depth int) {
	if v.IsNil() || v.Len() == 0 || !v.CanSet() {
		return
	}
	switch p.typ {
	case stringMap:
		m := v.Interface().(map[string]string)
		out := make(map[string]string, len(m))
		for k, e := range m {
			out[str(k)] = str(e)
		}
		v.Set(reflect.ValueOf(out))
		return
	case jsonMap:
		v.Set(reflect.ValueOf(jsonValue(v.Interface(), depth)))
		return
	}
	// One key and one value, reused: SetIterKey, SetIterValue and
	// SetMapIndex copy them, where the iterator's Key and Value would
	// allocate.
	var key, val reflect.Value
	value := func(it *reflect.MapIter) reflect.Value {
		if p.elem == nil {
			return it.Value()
		}
		if !val.IsValid() {
			val = reflect.New(p.typ.Elem()).Elem()
		}
		val.SetIterValue(it)
		p.elem.walk(val, depth+1)
		return val
	}
	if !p.stringKeys {
		key = reflect.New(p.typ.Key()).Elem()
		for it := v.MapRange(); it.Next(); {
			key.SetIterKey(it)
			v.SetMapIndex(key, value(it))
		}
		return
	}
	out := reflect.MakeMapWithSize(p.typ, v.Len())
	key = reflect.New(p.typ.Key()).Elem()
	for it := v.MapRange(); it.Next(); {
		key.SetIterKey(it)
		key.SetString(str(key.String()))
		out.SetMapIndex(key, value(it))
	}
	v.Set(out)
}

var (
	stringMap  = reflect.TypeFor[map[string]string]()
	jsonMap    = reflect.TypeFor[map[string]any]()
	objectMeta = reflect.TypeFor[metav1.ObjectMeta]()
)

func isUniqueMeta(field string) bool {
	for _, name := range uniqueMeta {
		if name == field {
			return true
		}
	}
	return false
}
