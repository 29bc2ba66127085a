package action

import (
	"context"
	"encoding/json"
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// OperationResult says what CreateOrUpdate, CreateOrPatch or
// UpdateStatusWithRetry did.
type OperationResult string

// The results of CreateOrUpdate, CreateOrPatch and UpdateStatusWithRetry.
const (
	// Unchanged: the object already was as mutate wants it; nothing was
	// written.
	Unchanged OperationResult = "unchanged"
	// Created: the object did not exist and was created.
	Created OperationResult = "created"
	// Updated: the object was replaced (Update, or UpdateStatus).
	Updated OperationResult = "updated"
	// Patched: the object was merge-patched with what mutate changed.
	Patched OperationResult = "patched"
)

// CreateOrUpdate makes the object named by obj's namespace and name look
// as mutate wants it, and says what it did. It reads the object into obj
// through r (from the cache when the Operator watches the kind), calls
// mutate, which changes obj (a closure over it) to the desired state, and
// then creates the object when it did not exist, replaces it with Update
// when mutate changed it (equality.Semantic.DeepEqual against what was
// read), and writes nothing when it did not. opts go to Create or Update.
// Nil r and w read and write through the Operator of ctx's handling, else
// the Default Operator, as the package-level functions do.
//
// mutate must set every field it manages, since obj holds the current
// state when it runs (or obj as given when the object does not exist),
// and must not change the name or namespace. Update carries the
// resourceVersion that was read, so a stale read fails with a Conflict
// instead of overwriting someone else's change; a read from a cache that
// has not seen the object yet fails the create with AlreadyExists.
// Returning either error from a handler retries it from fresh state.
// Status is not written: see UpdateStatusWithRetry.
func CreateOrUpdate(ctx context.Context, r query.Interface, w Interface, obj runtime.Object, mutate func() error, opts ...Option) (OperationResult, error) {
	return createOr(ctx, "create or update", r, w, obj, mutate, opts, func(w Interface, _ runtime.Object) (OperationResult, error) {
		return Updated, w.Update(ctx, obj, opts...)
	})
}

// CreateOrPatch is CreateOrUpdate that writes a change as a JSON merge
// patch of only the fields mutate changed, without a resourceVersion: it
// does not fail when someone else changed other fields since the read. A
// merge patch replaces lists whole, so a list that mutate changed
// overwrites changes made to that list meanwhile; use CreateOrUpdate where
// that matters. It returns Patched for a change.
func CreateOrPatch(ctx context.Context, r query.Interface, w Interface, obj runtime.Object, mutate func() error, opts ...Option) (OperationResult, error) {
	return createOr(ctx, "create or patch", r, w, obj, mutate, opts, func(w Interface, existing runtime.Object) (OperationResult, error) {
		before, err := json.Marshal(existing)
		if err != nil {
			return "", err
		}
		after, err := json.Marshal(obj)
		if err != nil {
			return "", err
		}
		patch, err := jsonpatch.CreateMergePatch(before, after)
		if err != nil {
			return "", fmt.Errorf("compute the merge patch: %w", err)
		}
		if string(patch) == "{}" {
			return Unchanged, nil
		}
		return Patched, w.Patch(ctx, obj, MergePatch, patch, opts...)
	})
}

// createOr reads obj, runs mutate and creates the object or, when mutate
// changed it, calls write with the state that was read.
func createOr(ctx context.Context, verb string, r query.Interface, w Interface, obj runtime.Object, mutate func() error, opts []Option,
	write func(w Interface, existing runtime.Object) (OperationResult, error)) (OperationResult, error) {
	r, w, err := readWriteTarget(ctx, verb, r, w, obj)
	if err != nil {
		return "", err
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", fmt.Errorf("action: %s: %w", verb, err)
	}
	if m.GetName() == "" {
		return "", fmt.Errorf("action: %s %T: metadata.name is empty", verb, obj)
	}
	name := key(m)
	err = r.Get(ctx, obj)
	switch {
	case apierrors.IsNotFound(err):
		if err := callMutate(mutate, obj, name); err != nil {
			return "", fmt.Errorf("action: %s %s: %w", verb, name, err)
		}
		if err := w.Create(ctx, obj, opts...); err != nil {
			return "", err
		}
		return Created, nil
	case err != nil:
		return "", err
	}
	existing := obj.DeepCopyObject()
	if err := callMutate(mutate, obj, name); err != nil {
		return "", fmt.Errorf("action: %s %s: %w", verb, name, err)
	}
	if equality.Semantic.DeepEqual(existing, obj) {
		return Unchanged, nil
	}
	result, err := write(w, existing)
	if err != nil {
		return "", err
	}
	return result, nil
}

// callMutate runs mutate on obj and checks that it left obj's name and
// namespace alone.
func callMutate(mutate func() error, obj runtime.Object, name string) error {
	if mutate == nil {
		return nil
	}
	if err := mutate(); err != nil {
		return fmt.Errorf("mutate: %w", err)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return err
	}
	if got := key(m); got != name {
		return fmt.Errorf("mutate changed the object's namespace/name to %q; it must not", got)
	}
	return nil
}
