package action

import (
	"context"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"

	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// UpdateStatusWithRetry writes the status that mutate computes from the
// latest state of the object named by obj, through the status
// subresource, and says what it did: Updated, or Unchanged when mutate
// left the status as it was (nothing is written). Nil r and w read and
// write through the Operator of ctx's handling, else the Default Operator;
// opts go to UpdateStatus.
//
// The first attempt reads obj through r, from the cache when the
// Operator watches the kind. When the write fails with a Conflict (the
// read was stale, or someone wrote in between), it reads the object again
// from the API server (query.Live), runs mutate again on that state and
// retries, as client-go's retry.RetryOnConflict with retry.DefaultRetry
// does: up to 5 attempts 10ms apart. mutate must therefore compute the
// status from obj each time rather than apply a delta once. It must not
// change the name or namespace. The kind must have a status subresource.
func UpdateStatusWithRetry(ctx context.Context, r query.Interface, w Interface, obj runtime.Object, mutate func() error, opts ...Option) (OperationResult, error) {
	r, w, err := readWriteTarget(ctx, "update status", r, w, obj)
	if err != nil {
		return "", err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", fmt.Errorf("action: update status: %w", err)
	}
	if m.GetName() == "" {
		return "", fmt.Errorf("action: update status %T: metadata.name is empty", obj)
	}
	name := key(m)
	result := Unchanged
	var read []query.Option
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := r.Get(ctx, obj, read...); err != nil {
			return err
		}
		// Every retry reads past the cache, which may not have the write
		// that conflicted yet.
		read = []query.Option{query.Live()}
		before := obj.DeepCopyObject()
		if err := callMutate(mutate, obj, name); err != nil {
			return fmt.Errorf("action: update status of %s: %w", name, err)
		}
		if sameStatus(before, obj) {
			result = Unchanged
			return nil
		}
		if err := w.UpdateStatus(ctx, obj, opts...); err != nil {
			return err
		}
		result = Updated
		return nil
	})
	if err != nil {
		return "", err
	}
	return result, nil
}

// sameStatus compares the status of a and b: their status field, or
// the whole objects for a type without one.
func sameStatus(a, b runtime.Object) bool {
	ua, okA := a.(runtime.Unstructured)
	ub, okB := b.(runtime.Unstructured)
	if okA && okB {
		return equality.Semantic.DeepEqual(ua.UnstructuredContent()["status"], ub.UnstructuredContent()["status"])
	}
	sa, sb := statusField(a), statusField(b)
	if sa.IsValid() && sb.IsValid() {
		return equality.Semantic.DeepEqual(sa.Interface(), sb.Interface())
	}
	return equality.Semantic.DeepEqual(a, b)
}

// statusField returns the Status field of a pointer to a struct, or an
// invalid Value.
func statusField(obj runtime.Object) reflect.Value {
	v := reflect.ValueOf(obj)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return reflect.Value{}
	}
	return v.Elem().FieldByName("Status")
}
