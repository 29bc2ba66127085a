package sdk

import (
	"maps"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Predicate decides whether an informer notification enqueues its key. e is
// the event as the handler would see it; old is the previous state for
// EventUpdate and EventResync, and nil otherwise. Both are copies the
// predicate owns. PredicateFunc turns a function into a Predicate.
type Predicate interface {
	Accept(old runtime.Object, e Event) bool
}

// PredicateFunc adapts a function to Predicate.
type PredicateFunc func(old runtime.Object, e Event) bool

// Accept calls f.
func (f PredicateFunc) Accept(old runtime.Object, e Event) bool { return f(old, e) }

// metadataPredicate is a predicate that reads only the event's type and the
// objects' metadata. A watch whose predicates are all metadataPredicates
// gives them the cache's own entries, whose metadata is decoded even when
// the rest is compact, instead of decoding two copies per notification; it
// must not modify them.
type metadataPredicate func(old runtime.Object, e Event) bool

// Accept calls p.
func (p metadataPredicate) Accept(old runtime.Object, e Event) bool { return p(old, e) }

// metadataOnly reports whether every predicate of ps reads only metadata.
func metadataOnly(ps []Predicate) bool {
	for _, p := range ps {
		if _, ok := p.(metadataPredicate); !ok {
			return false
		}
	}
	return true
}

// And accepts a notification when every predicate accepts it.
func And(ps ...Predicate) Predicate {
	and := func(old runtime.Object, e Event) bool {
		for _, p := range ps {
			if !p.Accept(old, e) {
				return false
			}
		}
		return true
	}
	if metadataOnly(ps) {
		return metadataPredicate(and)
	}
	return PredicateFunc(and)
}

// Or accepts a notification when at least one predicate accepts it.
func Or(ps ...Predicate) Predicate {
	or := func(old runtime.Object, e Event) bool {
		for _, p := range ps {
			if p.Accept(old, e) {
				return true
			}
		}
		return false
	}
	if metadataOnly(ps) {
		return metadataPredicate(or)
	}
	return PredicateFunc(or)
}

// Not inverts p.
func Not(p Predicate) Predicate {
	not := func(old runtime.Object, e Event) bool { return !p.Accept(old, e) }
	if metadataOnly([]Predicate{p}) {
		return metadataPredicate(not)
	}
	return PredicateFunc(not)
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
