package sdk

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
)

// Handler reacts to the current state of one object. It is called with the
// latest cached state, so it must act on that state (level-driven) rather than
// on the notification that woke it. A key is never handled by two workers at
// once.
//
// Returning nil marks the key done. Returning RequeueAfter(d) handles it again
// after d. Returning Terminal(err) records err and does not retry. Any other
// error retries with backoff.
type Handler interface {
	Handle(ctx context.Context, e Event) error
}

// HandlerFunc adapts an ordinary function to a Handler.
type HandlerFunc func(ctx context.Context, e Event) error

// Handle calls f(ctx, e).
func (f HandlerFunc) Handle(ctx context.Context, e Event) error { return f(ctx, e) }

// EventType says what kind of change woke the handler.
type EventType string

const (
	// EventAdd is an object the watch had not seen before.
	EventAdd EventType = "add"
	// EventUpdate is a change to an object, or a wake-up from an owned
	// object (WithOwnerOf).
	EventUpdate EventType = "update"
	// EventDelete is an object that is gone; Event.Deleted is true.
	EventDelete EventType = "delete"
	// EventResync is a periodic replay of an unchanged object; predicates
	// usually drop it.
	EventResync EventType = "resync"
	// EventLeftSelection is an object that still exists but no longer
	// matches the watch's label or field selector. The API server reports
	// it to the watch as a delete, so Event.Deleted is true and Object is
	// the last state the watch saw, with the labels it had then.
	// Predicates and handlerkit_events_total see it as an EventDelete.
	EventLeftSelection EventType = "left_selection"
)

// eventTypes lists the EventTypes the informer reports, for metric
// initialisation.
var eventTypes = []EventType{EventAdd, EventUpdate, EventDelete, EventResync}

// Event is what a Handler receives.
type Event struct {
	// Object is a deep copy of the latest known state, safe to mutate. It is
	// typed (for example *corev1.Pod) when its kind is registered in the
	// Operator's scheme, *metav1.PartialObjectMetadata for metadata-only
	// watches, and *unstructured.Unstructured otherwise. An object that its
	// Go type cannot decode (the CRD's schema and the Go type disagree) is
	// delivered as *unstructured.Unstructured too, so check the type
	// assertion and report such objects rather than lose them.
	Object runtime.Object
	// Deleted is true when the object is gone from the watch; Object is
	// then its final known state. Type says why: EventDelete when it was
	// deleted, EventLeftSelection when it still exists but no longer
	// matches the watch's selectors.
	Deleted bool
	// Watch is the name of the watch the event came from.
	Watch string
	// Type is the strongest change seen since the key was last handled.
	// Events enqueued through WithOwnerOf are reported as EventUpdate.
	Type EventType
}
