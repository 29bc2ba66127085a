package action

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/handlerkit/handlerkit/pkg/sdk/internal/convert"
)

// HasFinalizer reports whether obj carries finalizer.
func HasFinalizer(obj metav1.Object, finalizer string) bool {
	return !isNil(obj) && slices.Contains(obj.GetFinalizers(), finalizer)
}

// AddFinalizer adds finalizer to obj on the server, unless obj already has
// it, and reports whether it wrote. A nil w writes through the Operator of
// ctx's handling, else the Default Operator.
//
// It sends a merge patch of the whole finalizer list with obj's
// resourceVersion, so it cannot drop a finalizer that someone else added
// meanwhile: when the object changed since obj was read, the server
// refuses it with a Conflict (apierrors.IsConflict), nothing is written,
// and the caller reads the object again and retries; returning the error
// from a handler does that. On success the server's reply is written back
// into obj.
func AddFinalizer(ctx context.Context, w Interface, obj runtime.Object, finalizer string) (changed bool, err error) {
	m, err := finalizerTarget("add", obj, finalizer)
	if err != nil {
		return false, err
	}
	if slices.Contains(m.GetFinalizers(), finalizer) {
		return false, nil
	}
	if err := patchFinalizers(ctx, w, "add", obj, m, append(slices.Clone(m.GetFinalizers()), finalizer), finalizer); err != nil {
		return false, err
	}
	return true, nil
}

// RemoveFinalizer removes finalizer from obj on the server, if obj has it,
// and reports whether it wrote. It guards the write with obj's
// resourceVersion as AddFinalizer does: a Conflict means obj is stale.
// Once the last finalizer of an object being deleted is removed, the
// server deletes it; the reply written back into obj is then its final
// state.
func RemoveFinalizer(ctx context.Context, w Interface, obj runtime.Object, finalizer string) (changed bool, err error) {
	m, err := finalizerTarget("remove", obj, finalizer)
	if err != nil {
		return false, err
	}
	if !slices.Contains(m.GetFinalizers(), finalizer) {
		return false, nil
	}
	rest := slices.DeleteFunc(slices.Clone(m.GetFinalizers()), func(f string) bool { return f == finalizer })
	if err := patchFinalizers(ctx, w, "remove", obj, m, rest, finalizer); err != nil {
		return false, err
	}
	return true, nil
}

func finalizerTarget(verb string, obj runtime.Object, finalizer string) (metav1.Object, error) {
	if convert.IsNil(obj) {
		return nil, fmt.Errorf("action: %s finalizer: %w", verb, convert.ErrNilObject)
	}
	if finalizer == "" {
		return nil, fmt.Errorf("action: %s finalizer: empty finalizer name", verb)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, fmt.Errorf("action: %s finalizer: %w", verb, err)
	}
	if m.GetResourceVersion() == "" {
		return nil, fmt.Errorf("action: %s finalizer %q on %s: the object has no resourceVersion; read it from the server first", verb, finalizer, key(m))
	}
	return m, nil
}

// patchFinalizers sets obj's finalizers to list if obj's resourceVersion
// is still the server's.
func patchFinalizers(ctx context.Context, w Interface, verb string, obj runtime.Object, m metav1.Object, list []string, finalizer string) error {
	w, err := orWriter(ctx, w)
	if err != nil {
		return err
	}
	if len(list) == 0 {
		list = nil // null removes the field
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers":      list,
		"resourceVersion": m.GetResourceVersion(),
	}})
	if err != nil {
		return fmt.Errorf("action: %s finalizer %q: %w", verb, finalizer, err)
	}
	if err := w.Patch(ctx, obj, MergePatch, patch); err != nil {
		return fmt.Errorf("action: %s finalizer %q on %s: %w", verb, finalizer, key(m), err)
	}
	return nil
}
