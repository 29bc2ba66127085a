// Package intern makes the strings of cached Kubernetes objects share their
// memory: after Strings, equal strings in thousands of objects (namespaces,
// label keys and values, images, owner references, enum values such as
// "TCP" or "Running") point to one backing array instead of one decoded
// copy each.
//
// Its table of canonical strings holds each through a weak pointer to the
// string's bytes: the canonical copy stays canonical for as long as any
// object holds it, across garbage collections, and a string that no object
// uses any more is collected like any other (table.go says why the
// standard library's unique package does not do this for strings).
//
// A canonical string costs its table an entry (a key of its own, a map
// slot, a weak pointer and the runtime's record of it), which only pays
// when other objects share it. So a string is interned only once it has
// been seen in two objects (told apart by their uid); a string seen in one object only,
// however often it is updated (a Pod's IP, a container ID), keeps the
// memory it was decoded into. What was seen where is remembered in a fixed
// table of hashes (sightings), which may forget: a string it forgot is
// merely interned a sighting later.
package intern

import (
	"fmt"
	"hash/maphash"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// maxDepth bounds the walk. API objects are trees, so it never cuts one
// short in practice (a CRD's schema nests a few dozen levels); it only
// guards against a cycle a hand-built object might have.
const maxDepth = 256

// Strings replaces, in place, the strings reachable from obj through
// exported fields, pointers, slices, arrays, maps (string keys included)
// and interfaces by canonical copies of themselves. obj is usually a
// pointer to a typed API object or an *unstructured.Unstructured.
//
// Only a string is ever replaced, and only by an equal one, so obj is
// semantically unchanged at every step. Maps are changed in place (a map
// key is replaced by setting the key again), never rebuilt, so nothing but
// strings, which are immutable, ends up shared between objects: a handler
// may modify its copy of one object freely.
//
// A string is replaced once it has been seen in another object too (see the
// package doc); metadata.name, uid and resourceVersion, which no other
// object has, are not even looked at. An object without a uid or a name
// has all its strings interned. Unexported fields (those of
// resource.Quantity and time.Time) cannot be set and are skipped.
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
		if o != nil {
			w := walker{owner: ownerOf(o)}
			w.object(o.Object)
		}
	case *unstructured.UnstructuredList:
		if o == nil {
			return nil
		}
		w := walker{}
		w.object(o.Object)
		for i := range o.Items {
			w := walker{owner: ownerOf(&o.Items[i])}
			w.object(o.Items[i].Object)
		}
	default:
		v := reflect.ValueOf(obj)
		if v.Kind() == reflect.Pointer && v.IsNil() {
			return nil
		}
		w := walker{owner: ownerOf(obj)}
		w.walk(planOf(v.Type()), v, 0)
	}
	return nil
}

// walker interns the strings of one object.
type walker struct {
	// owner tags the object in sightings; 0 interns every string.
	owner uint32
}

// ownerOf returns the tag of obj: a hash of its uid, or of its namespace
// and name, never 0; 0 when obj has neither.
func ownerOf(obj any) uint32 {
	o, ok := obj.(interface {
		GetUID() types.UID
		GetNamespace() string
		GetName() string
	})
	if !ok {
		return 0
	}
	id := string(o.GetUID())
	if id == "" && o.GetName() != "" {
		id = o.GetNamespace() + "/" + o.GetName()
	}
	if id == "" {
		return 0
	}
	return uint32(maphash.String(seed, id)) | 1
}

// str returns the canonical copy of s once s has been seen in two objects,
// else s.
func (w walker) str(s string) string {
	if s == "" {
		return s
	}
	h := maphash.String(seed, s)
	if !w.shared(h) {
		return s
	}
	return canonical(s, h)
}

// sightings remembers, for a hash of a string, which object it was last
// seen in: the high 32 bits are the string's tag (the hash's high half),
// the low 32 the owner's, or 0 once two objects were seen to hold it.
// 2^15 slots (256 KiB) keep a cache of tens of thousands of objects
// interned: a string that many objects hold is seen again long before
// another string takes its slot.
//
// Each string has two candidate slots, from independent bits of its hash.
// With one, two strings of the same objects that happened to share a slot
// (a Pod has a hundred strings, so some pair often does) would evict each
// other in every object and never be interned; with two, both candidates
// of a string must be taken, which is rare.
var sightings [1 << 15]atomic.Uint64

var seed = maphash.MakeSeed()

// tagMask selects a sighting's tag.
const tagMask = ^uint64(1<<32 - 1)

// shared records a sighting of the string whose hash is h in w's object
// and reports whether another object holds the string too.
func (w walker) shared(h uint64) bool {
	if w.owner == 0 {
		return true
	}
	n := uint64(len(sightings))
	slots := [2]*atomic.Uint64{&sightings[h%n], &sightings[(h>>15)%n]}
	tag := h & tagMask
	for _, slot := range slots {
		old := slot.Load()
		if old&tagMask != tag {
			continue
		}
		switch uint32(old) {
		case 0: // known to be shared
			return true
		case w.owner: // this object again
			return false
		}
		slot.Store(tag) // a second object: shared from now on
		return true
	}
	// A first sighting (or a forgotten one). It takes the candidate that
	// holds the least: an empty slot, else a string seen once, else a
	// string known to be shared.
	victim := slots[0]
	if rank(slots[1].Load()) < rank(slots[0].Load()) {
		victim = slots[1]
	}
	victim.Store(tag | uint64(w.owner))
	return false
}

// rank orders sightings by what forgetting them costs: an empty slot 0, a
// string seen in one object 1, a string known to be shared 2.
func rank(sighting uint64) int {
	switch {
	case sighting == 0:
		return 0
	case uint32(sighting) != 0:
		return 1
	}
	return 2
}

// canonical is the canonical copy of s, whose hash is h; a variable so that
// a test can make it fail.
var canonical = canonicalCopy

// object interns an unstructured object in place: its keys and values,
// except the values of metadata's unique fields.
func (w walker) object(m map[string]any) {
	for k, v := range m {
		if md, ok := v.(map[string]any); ok && k == "metadata" {
			w.metadata(md)
			setKey(w, m, k, v)
			continue
		}
		w.setJSON(m, k, v, 1)
	}
}

// metadata interns an unstructured object's metadata in place but for the
// values of uniqueMeta.
func (w walker) metadata(m map[string]any) {
	for k, v := range m {
		if _, skip := uniqueMeta[k]; skip {
			setKey(w, m, k, v)
			continue
		}
		w.setJSON(m, k, v, 2)
	}
}

// uniqueMeta names the metadata fields that differ in every object, by
// their JSON name and by their Go name in metav1.ObjectMeta.
var uniqueMeta = map[string]string{"name": "Name", "uid": "UID", "resourceVersion": "ResourceVersion"}

// setKey replaces m's key k, which holds v, by its canonical copy. Setting
// an existing key of a Go map stores the key given (the runtime updates
// string keys, whose memory may differ), so keys are interned in place,
// without a new map; were that ever not so, the key would merely stay as
// it was.
func setKey[K ~string, V any](w walker, m map[K]V, k K, v V) {
	if c := K(w.str(string(k))); !same(string(c), string(k)) {
		m[c] = v
	}
}

// setJSON interns the entry k: v of an unstructured map in place.
func (w walker) setJSON(m map[string]any, k string, v any, depth int) {
	nv, changed := w.jsonValue(v, depth)
	if c := w.str(k); changed || !same(c, k) {
		m[c] = nv
	}
}

// jsonValue interns a value of an unstructured object in place and returns
// it, with whether it is a new value to store: a string is replaced by its
// canonical copy, maps and slices are changed in place.
func (w walker) jsonValue(v any, depth int) (any, bool) {
	if depth > maxDepth {
		return v, false
	}
	switch t := v.(type) {
	case string:
		if c := w.str(t); !same(c, t) {
			return c, true
		}
	case map[string]any:
		for k, e := range t {
			w.setJSON(t, k, e, depth+1)
		}
	case []any:
		for i, e := range t {
			if nv, changed := w.jsonValue(e, depth+1); changed {
				t[i] = nv
			}
		}
	}
	return v, false
}

// same reports whether a and b share their memory.
func same(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

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
	// stringKeys is set for maps with string keys.
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

// walk interns the strings of v along plan p. A string is only replaced
// when v is settable, which everything reached through a pointer, a slice
// or an exported field of an addressable struct is.
func (w walker) walk(p *plan, v reflect.Value, depth int) {
	if p == nil || depth > maxDepth {
		return
	}
	switch p.kind {
	case reflect.String:
		if v.Len() > 0 && v.CanSet() {
			if s, c := v.String(), w.str(v.String()); !same(c, s) {
				v.SetString(c)
			}
		}
	case reflect.Pointer:
		if !v.IsNil() {
			w.walk(p.elem, v.Elem(), depth+1)
		}
	case reflect.Interface:
		w.walkInterface(v, depth)
	case reflect.Struct:
		for _, f := range p.fields {
			w.walk(f.plan, v.Field(f.index), depth+1)
		}
	case reflect.Slice:
		if p.elem != nil {
			for i := range v.Len() {
				w.walk(p.elem, v.Index(i), depth+1)
			}
		}
	case reflect.Array:
		if p.elem != nil && v.CanAddr() {
			for i := range v.Len() {
				w.walk(p.elem, v.Index(i), depth+1)
			}
		}
	case reflect.Map:
		w.walkMap(p, v, depth)
	}
}

// walkInterface interns the value an interface holds. A pointer is
// followed; any other value is copied, interned and stored back.
func (w walker) walkInterface(v reflect.Value, depth int) {
	if v.IsNil() {
		return
	}
	e := v.Elem()
	if e.Kind() == reflect.Pointer {
		w.walk(planOf(e.Type()), e, depth+1)
		return
	}
	if !v.CanSet() {
		return
	}
	switch t := e.Interface().(type) {
	case string, map[string]any, []any:
		if nv, changed := w.jsonValue(t, depth+1); changed {
			v.Set(reflect.ValueOf(nv))
		}
		return
	}
	p := planOf(e.Type())
	if p == nil {
		return
	}
	c := reflect.New(e.Type()).Elem()
	c.Set(e)
	w.walk(p, c, depth+1)
	v.Set(c)
}

// walkMap interns a map's keys and values in place (see setKey).
func (w walker) walkMap(p *plan, v reflect.Value, depth int) {
	if v.IsNil() || v.Len() == 0 {
		return
	}
	switch p.typ {
	case stringMap:
		m := v.Interface().(map[string]string)
		for k, e := range m {
			if ck, ce := w.str(k), w.str(e); !same(ck, k) || !same(ce, e) {
				m[ck] = ce
			}
		}
		return
	case jsonMap:
		w.jsonValue(v.Interface(), depth)
		return
	}
	// One key and one value, reused: SetIterKey, SetIterValue and
	// SetMapIndex copy them, where the iterator's Key and Value would
	// allocate.
	key, val := reflect.New(p.typ.Key()).Elem(), reflect.New(p.typ.Elem()).Elem()
	for it := v.MapRange(); it.Next(); {
		key.SetIterKey(it)
		if p.stringKeys {
			key.SetString(w.str(key.String()))
		}
		val.SetIterValue(it)
		w.walk(p.elem, val, depth+1)
		v.SetMapIndex(key, val)
	}
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
