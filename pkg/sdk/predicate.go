package sdk

import (
	"maps"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Predicate decides whether an informer notification enqueues its key. e is
// the event as the handler would see it; old is the previous state for
// EventUpdate and EventResync, and nil otherwise.
type Predicate func(old runtime.Object, e Event) bool

// And accepts a notification when every predicate accepts it.
func And(ps ...Predicate) Predicate {
	return func(old runtime.Object, e Event) bool {
		for _, p := range ps {
			if !p(old, e) {
				return false
			}
		}
		return true
	}
}

// Or accepts a notification when at least one predicate accepts it.
func Or(ps ...Predicate) Predicate {
	return func(old runtime.Object, e Event) bool {
		for _, p := range ps {
			if p(old, e) {
				return true
			}
		}
		return false
	}
}

// Not inverts p.
func Not(p Predicate) Predicate {
	return func(old runtime.Object, e Event) bool { return !p(old, e) }
}

// IgnoreResync drops periodic resync notifications.
func IgnoreResync() Predicate {
	return func(_ runtime.Object, e Event) bool { return e.Type != EventResync }
}

// GenerationChanged accepts adds and deletes, and updates only when
// metadata.generation changed, which for most kinds means the spec changed
// (status-only writes do not bump it). Resyncs are dropped.
func GenerationChanged() Predicate {
	return onUpdate(func(o, n metav1.Object) bool { return o.GetGeneration() != n.GetGeneration() })
}

// LabelsChanged accepts adds and deletes, and updates that change labels.
func LabelsChanged() Predicate {
	return onUpdate(func(o, n metav1.Object) bool { return !maps.Equal(o.GetLabels(), n.GetLabels()) })
}

// AnnotationsChanged accepts adds and deletes, and updates that change
// annotations.
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
	return func(old runtime.Object, e Event) bool {
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
	}
}
