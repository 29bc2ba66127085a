package sdktest

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

// errStale is the API server's message for a write with a stale
// resourceVersion.
var errStale = errors.New("the object has been modified; please apply your changes to the latest version and try again")

// Create stores a copy of obj and writes the stored object back into it:
// name generated from generateName when empty, uid, creationTimestamp,
// resourceVersion, generation. An existing name is an error for which
// apierrors.IsAlreadyExists is true. Status is dropped, as the status
// subresource's kinds do on create.
func (c *Client) Create(ctx context.Context, obj runtime.Object, opts ...action.Option) error {
	if err := live(ctx); err != nil {
		return err
	}
	s := action.SettingsOf(opts...)
	t, err := c.resolve("create", obj, false)
	if err != nil {
		return err
	}
	if s.Subresource != "" {
		return fmt.Errorf("sdktest: %s %s: WithSubresource(%q) applies only to Patch", "create", t.gvk.Kind, s.Subresource)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u, err := c.toStored(obj, t)
	if err != nil {
		return fmt.Errorf("sdktest: create %s: %w", t.gvk.Kind, err)
	}
	if u.GetResourceVersion() != "" {
		// The API server's storage refuses it with a bare 500.
		return &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: http.StatusInternalServerError,
			Message: "resourceVersion should not be set on objects to be created",
		}}
	}
	if t.name == "" {
		for t.name == "" || c.lookup(t) != nil {
			t.name = u.GetGenerateName() + utilrand.String(5)
		}
		u.SetName(t.name)
	}
	if c.lookup(t) != nil {
		return apierrors.NewAlreadyExists(t.gvr.GroupResource(), t.name)
	}
	created := c.created(t, u)
	if !s.DryRun {
		created.SetResourceVersion(c.nextRevision())
		c.store(t, created)
	}
	return copyOut(obj, created)
}

// created returns u as a new object: system fields set, status dropped.
func (c *Client) created(t *target, u *unstructured.Unstructured) *unstructured.Unstructured {
	unstructured.RemoveNestedField(u.Object, "status")
	u.SetUID(newUID())
	u.SetCreationTimestamp(now())
	u.SetDeletionTimestamp(nil)
	u.SetDeletionGracePeriodSeconds(nil)
	u.SetGeneration(0)
	if _, hasSpec := u.Object["spec"]; hasSpec || !t.builtin() {
		u.SetGeneration(1)
	}
	return u
}

// Update replaces the stored object with a copy of obj and writes the
// result back into obj. A stale resourceVersion, or a uid of another
// object, is an error for which apierrors.IsConflict is true; a missing
// object is IsNotFound. An empty resourceVersion updates unconditionally
// for built-in kinds and is IsInvalid for others, as for custom
// resources. The stored status is kept.
func (c *Client) Update(ctx context.Context, obj runtime.Object, opts ...action.Option) error {
	return c.update(ctx, "update", obj, opts, false)
}

// UpdateStatus replaces only the stored object's status with obj's and
// writes the result back into obj, with Update's checks.
func (c *Client) UpdateStatus(ctx context.Context, obj runtime.Object, opts ...action.Option) error {
	return c.update(ctx, "update status", obj, opts, true)
}

func (c *Client) update(ctx context.Context, verb string, obj runtime.Object, opts []action.Option, status bool) error {
	if err := live(ctx); err != nil {
		return err
	}
	s := action.SettingsOf(opts...)
	t, err := c.resolve(verb, obj, true)
	if err != nil {
		return err
	}
	if s.Subresource != "" {
		return fmt.Errorf("sdktest: %s %s: WithSubresource(%q) applies only to Patch", verb, t.gvk.Kind, s.Subresource)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	u, err := c.toStored(obj, t)
	if err != nil {
		return fmt.Errorf("sdktest: %s %s: %w", verb, t.gvk.Kind, err)
	}
	current := c.lookup(t)
	if current == nil {
		return apierrors.NewNotFound(t.gvr.GroupResource(), t.name)
	}
	if u.GetResourceVersion() == "" && !t.builtin() {
		return apierrors.NewInvalid(t.gvk.GroupKind(), t.name, field.ErrorList{
			field.Invalid(field.NewPath("metadata", "resourceVersion"), int64(0), "must be specified for an update"),
		})
	}
	if uid := u.GetUID(); uid != "" && uid != current.GetUID() {
		return apierrors.NewConflict(t.gvr.GroupResource(), t.name,
			fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", uid, current.GetUID()))
	}
	if status {
		next := current.DeepCopy()
		if st, ok := u.Object["status"]; ok {
			next.Object["status"] = st
		} else {
			delete(next.Object, "status")
		}
		next.SetResourceVersion(u.GetResourceVersion())
		u = next
	}
	result, err := c.replace(t, current, u, !status, s.DryRun)
	if err != nil {
		return err
	}
	return copyOut(obj, result)
}

// replace stores next in place of current with the API server's rules and
// returns the stored result: a resourceVersion that is set must be
// current's; system fields come from current; with keepStatus (every
// write but a status write, whose next carries current's other fields)
// status too; generation moves when anything but metadata and status
// changed; a write that changes nothing keeps the resourceVersion; and an
// object being deleted goes away with its last finalizer. Callers hold
// c.mu.
func (c *Client) replace(t *target, current, next *unstructured.Unstructured, keepStatus, dryRun bool) (*unstructured.Unstructured, error) {
	gr := t.gvr.GroupResource()
	if rv := next.GetResourceVersion(); rv != "" && rv != current.GetResourceVersion() {
		return nil, apierrors.NewConflict(gr, t.name, errStale)
	}
	next = next.DeepCopy()
	next.SetResourceVersion(current.GetResourceVersion())
	next.SetUID(current.GetUID())
	next.SetCreationTimestamp(current.GetCreationTimestamp())
	next.SetDeletionTimestamp(current.GetDeletionTimestamp())
	next.SetDeletionGracePeriodSeconds(current.GetDeletionGracePeriodSeconds())
	next.SetGeneration(current.GetGeneration())
	next.SetGenerateName(current.GetGenerateName())
	if keepStatus {
		if st, ok := current.Object["status"]; ok {
			next.Object["status"] = runtime.DeepCopyJSONValue(st)
		} else {
			delete(next.Object, "status")
		}
	}
	if current.GetDeletionTimestamp() != nil {
		added := sets.New(next.GetFinalizers()...).Difference(sets.New(current.GetFinalizers()...))
		if added.Len() > 0 {
			return nil, apierrors.NewInvalid(t.gvk.GroupKind(), t.name, field.ErrorList{
				field.Forbidden(field.NewPath("metadata", "finalizers"),
					fmt.Sprintf("no new finalizers can be added if the object is being deleted, found new finalizers %q", sets.List(added))),
			})
		}
	}
	if next.GetGeneration() > 0 && !sameContent(withoutMetadataAndStatus(current), withoutMetadataAndStatus(next)) {
		next.SetGeneration(current.GetGeneration() + 1)
	}
	if sameContent(current.Object, next.Object) {
		return current, nil
	}
	if dryRun {
		return next, nil
	}
	next.SetResourceVersion(c.nextRevision())
	if next.GetDeletionTimestamp() != nil && len(next.GetFinalizers()) == 0 {
		c.remove(t)
		return next, nil
	}
	c.store(t, next)
	return next, nil
}

// Delete removes the object named by obj. An object with finalizers stays
// until they are removed: it gets a deletionTimestamp, and that state is
// written back into obj. A missing object is IsNotFound, and
// preconditions that do not hold are IsConflict. Propagation policies and
// grace periods are accepted and have no effect: nothing here collects
// garbage or waits for kubelets.
func (c *Client) Delete(ctx context.Context, obj runtime.Object, opts ...action.Option) error {
	if err := live(ctx); err != nil {
		return err
	}
	s := action.SettingsOf(opts...)
	t, err := c.resolve("delete", obj, true)
	if err != nil {
		return err
	}
	if s.Subresource != "" {
		return fmt.Errorf("sdktest: %s %s: WithSubresource(%q) applies only to Patch", "delete", t.gvk.Kind, s.Subresource)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	current := c.lookup(t)
	gr := t.gvr.GroupResource()
	if current == nil {
		return apierrors.NewNotFound(gr, t.name)
	}
	if p := s.Preconditions; p != nil {
		if p.UID != nil && *p.UID != current.GetUID() {
			return apierrors.NewConflict(gr, t.name,
				fmt.Errorf("Precondition failed: UID in precondition: %v, UID in object meta: %v", *p.UID, current.GetUID()))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != current.GetResourceVersion() {
			return apierrors.NewConflict(gr, t.name,
				fmt.Errorf("Precondition failed: ResourceVersion in precondition: %v, ResourceVersion in object meta: %v", *p.ResourceVersion, current.GetResourceVersion()))
		}
	}
	if len(current.GetFinalizers()) == 0 {
		if !s.DryRun {
			c.remove(t)
		}
		return nil
	}
	if current.GetDeletionTimestamp() != nil {
		return copyOut(obj, current)
	}
	deleting := current.DeepCopy()
	ts := now()
	deleting.SetDeletionTimestamp(&ts)
	zero := int64(0)
	deleting.SetDeletionGracePeriodSeconds(&zero)
	if g := deleting.GetGeneration(); g > 0 {
		deleting.SetGeneration(g + 1)
	}
	if !s.DryRun {
		deleting.SetResourceVersion(c.nextRevision())
		c.store(t, deleting)
	}
	return copyOut(obj, deleting)
}
