package sdk

import (
	"maps"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Predicate decides whether an informer notification enqueues its key. e is
// the event as the handler would see it; old is the previous state for
// EventUpdate and EventResync, and nil otherwise. Both are copies the
// predicate owns.
type Predicate func(old runtime.Object, e Event) bool

// metadataCode holds the code pointers of the ready-made predicates that
// read only the event's type and the objects' metadata (see
// metadataPredicate). A watch whose predicates are all of them gives them
// the cache's own entries, whose metadata is decoded even when the rest is
// compact, instead of decoding two copies per notification; they must not
// modify them. A function literal has one code pointer for every closure
// made from it (one per inlined copy), so the set stays as small as the
// number of such literals, and no function of a user's can be in it.
var metadataCode sync.Map // uintptr → struct{}

// metadataPredicate marks p, a closure of a literal in this file that reads
// metadata only, as such and returns it. Only literals that are never
// returned for a predicate reading more may be marked.
func metadataPredicate(p Predicate) Predicate {
	metadataCode.Store(reflect.ValueOf(p).Pointer(), struct{}{})
	return p
}

// metadataOnly reports whether every predicate of ps reads only metadata.
func metadataOnly(ps []Predicate) bool {
	for _, p := range ps {
		if p == nil {
			return false
		}
		if _, ok := metadataCode.Load(reflect.ValueOf(p).Pointer()); !ok {
			return false
		}
	}
	return true
}

// all reports whether every predicate of ps accepts the notification.
func all(ps []Predicate, old runtime.Object, e Event) bool {
	for _, p := range ps {
		if !p(old, e) {
			return false
		}
	}
	return true
}

// any reports whether at least one predicate of ps accepts the notification.
func anyOf(ps []Predicate, old runtime.Object, e Event) bool {
	for _, p := range ps {
		if p(old, e) {
			return true
		}
	}
	return false
}

// And accepts a notification when every predicate accepts it.
func And(ps ...Predicate) Predicate {
	if metadataOnly(ps) {
		return metadataPredicate(func(old runtime.Object, e Event) bool { return all(ps, old, e) })
	}
	return func(old runtime.Object, e Event) bool { return all(ps, old, e) }
}

// Or accepts a notification when at least one predicate accepts it.
func Or(ps ...Predicate) Predicate {
	if metadataOnly(ps) {
		return metadataPredicate(func(old runtime.Object, e Event) bool { return anyOf(ps, old, e) })
	}
	return func(old runtime.Object, e Event) bool { return anyOf(ps, old, e) }
}

// Not inverts p.
func Not(p Predicate) Predicate {
	if metadataOnly([]Predicate{p}) {
		return metadataPredicate(func(old runtime.Object, e Event) bool { return !p(old, e) })
	}
	return func(old runtime.Object, e Event) bool { return !p(old, e) }
}

// IgnoreResync drops periodic resync notifications.
func IgnoreResync() Predicate {
	return metadataPredicate(func(_ runtime.Object, e Event) bool { return e.Type != EventResync })
}

// GenerationChanged accepts adds and deletes, and updates only when
// metadata.generation changed, which for most kinds means the spec changed
// (status-only writes do not bump it). Resyncs are dropped. It reads
// metadata only, so the objects are not decoded for it.
func GenerationChanged() Predicate {
	return onUpdate(func(o, n metav1.Object) bool { return o.GetGeneration() != n.GetGeneration() })
}

// LabelsChanged accepts adds and deletes, and updates that change labels.
// It reads metadata only.
func LabelsChanged() Predicate {
	return onUpdate(func(o, n metav1.Object) bool { return !maps.Equal(o.GetLabels(), n.GetLabels()) })
}

// AnnotationsChanged accepts adds and deletes, and updates that change
// annotations. It reads metadata only.
func AnnotationsChanged() Predicate {
	return onUpdate(func(o, n metav1.Object) bool {
		return !maps.Equal(o.GetAnnotations(), n.GetAnnotations())
	})
}

// LabelsOrAnnotationsChanged accepts adds and deletes, and updates that
// change labels or annotations: the natural filter for metadata-only watches.
func LabelsOrAnnotationsChanged() Predicate {
	return Or(LabelsChanged(), AnnotationsChanged())
}

// onUpdate builds a predicate that passes adds and deletes, drops resyncs,
// and asks changed about updates.
func onUpdate(changed func(old, new metav1.Object) bool) Predicate {
	return metadataPredicate(func(old runtime.Object, e Event) bool {
		switch e.Type {
		case EventAdd, EventDelete:
			return true
		case EventResync:
			return false
		}
		o, err1 := meta.Accessor(old)
		n, err2 := meta.Accessor(e.Object)
		if err1 != nil || err2 != nil {
			// Without metadata there is nothing to compare: let it through.
			return true
		}
		return changed(o, n)
	})
}
