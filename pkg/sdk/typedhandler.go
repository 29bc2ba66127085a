package sdk

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// TypedHandler adapts a function that handles one kind, as its Go type T
// (for example *corev1.ConfigMap, or a CRD type registered with
// WithScheme), to a Handler: f gets e.Object as a T, with the event for
// Deleted, Type and Watch. Give it to the watch of that kind with
// WithHandler; Handle(ctx, Event) remains the way to handle several kinds
// in one handler.
//
// An object that is not a T never reaches f and never panics: the event
// fails with a Terminal error that names both types, which the framework
// logs and counts, and the key is not retried until the object changes.
// That happens when the kind is not in the Operator's scheme, when the
// object's Go type cannot decode it (it arrives unstructured; see
// handlerkit_decode_errors_total), on a metadata-only watch (use
// *metav1.PartialObjectMetadata), or when the handler is on the wrong
// watch.
func TypedHandler[T runtime.Object](f func(ctx context.Context, obj T, e Event) error) Handler {
	return HandlerFunc(func(ctx context.Context, e Event) error {
		obj, ok := e.Object.(T)
		if !ok {
			return Terminal(notA[T](e))
		}
		return f(ctx, obj, e)
	})
}

// notA explains why e's object is not a T.
func notA[T runtime.Object](e Event) error {
	gvk := "no kind"
	if e.Object != nil {
		gvk = e.Object.GetObjectKind().GroupVersionKind().String()
	}
	err := fmt.Errorf("typed handler for %s got %T (%s) from watch %q", reflect.TypeFor[T](), e.Object, gvk, e.Watch)
	if _, ok := e.Object.(*unstructured.Unstructured); ok {
		err = fmt.Errorf("%w: the kind is not in the Operator's scheme (WithScheme), or its Go type cannot decode this object", err)
	}
	return err
}
