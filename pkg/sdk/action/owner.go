package action

import (
	"fmt"
	"reflect"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/handlerkit/handlerkit/pkg/sdk/internal/convert"
)

// AlreadyOwnedError is returned by SetControllerReference when another
// object already controls the object.
type AlreadyOwnedError struct {
	// Object is the namespace/name of the controlled object.
	Object string
	// Owner is the reference to its current controller.
	Owner metav1.OwnerReference
}

// Error names the object and its current controller.
func (e *AlreadyOwnedError) Error() string {
	return fmt.Sprintf("action: %s is already controlled by %s %s %q (uid %s)",
		e.Object, e.Owner.APIVersion, e.Owner.Kind, e.Owner.Name, e.Owner.UID)
}

// SetControllerReference makes owner the controller of object: an owner
// reference with controller and blockOwnerDeletion set, so that the
// garbage collector deletes object with its owner and WithOwnerOf watches
// wake the owner. It only changes object in memory; write it with Create,
// Update or CreateOrUpdate.
//
// owner's kind comes from scheme, or from owner's own apiVersion and kind
// when scheme is nil or does not know the type (objects delivered by the
// framework always carry them). owner must exist (have a UID) and, when
// namespaced, be in object's namespace: Kubernetes ignores owners in
// other namespaces. A reference to the same owner is refreshed in place.
// When another object already controls object, SetControllerReference
// changes nothing and returns an *AlreadyOwnedError naming it.
//
// blockOwnerDeletion needs permission to update owner's finalizers
// subresource where the OwnerReferencesPermissionEnforcement admission
// plugin is on.
func SetControllerReference(owner, object metav1.Object, scheme *runtime.Scheme) error {
	ref, err := ownerRef(owner, object, scheme)
	if err != nil {
		return err
	}
	yes := true
	ref.Controller, ref.BlockOwnerDeletion = &yes, &yes
	refs := object.GetOwnerReferences()
	for _, r := range refs {
		if r.Controller != nil && *r.Controller && !sameOwner(r, ref) {
			return &AlreadyOwnedError{Object: key(object), Owner: r}
		}
	}
	object.SetOwnerReferences(upsertRef(refs, ref))
	return nil
}

// SetOwnerReference adds owner to object's owner references without
// making it the controller, as SetControllerReference does otherwise.
// Calling it again changes nothing; a reference to the same owner keeps
// its controller and blockOwnerDeletion flags.
func SetOwnerReference(owner, object metav1.Object, scheme *runtime.Scheme) error {
	ref, err := ownerRef(owner, object, scheme)
	if err != nil {
		return err
	}
	for _, r := range object.GetOwnerReferences() {
		if sameOwner(r, ref) {
			ref.Controller, ref.BlockOwnerDeletion = r.Controller, r.BlockOwnerDeletion
		}
	}
	object.SetOwnerReferences(upsertRef(object.GetOwnerReferences(), ref))
	return nil
}

// ownerRef builds the reference to owner and checks that object may
// have it.
func ownerRef(owner, object metav1.Object, scheme *runtime.Scheme) (metav1.OwnerReference, error) {
	if isNil(owner) || isNil(object) {
		return metav1.OwnerReference{}, fmt.Errorf("action: set owner reference: %w", convert.ErrNilObject)
	}
	ro, ok := owner.(runtime.Object)
	if !ok {
		return metav1.OwnerReference{}, fmt.Errorf("action: set owner reference: owner %T is not a runtime.Object", owner)
	}
	gvk, err := convert.KindOf(scheme, ro)
	if err != nil {
		return metav1.OwnerReference{}, fmt.Errorf("action: set owner reference: owner: %w", err)
	}
	switch {
	case owner.GetName() == "" || owner.GetUID() == "":
		return metav1.OwnerReference{}, fmt.Errorf("action: set owner reference: owner %s %q has no name or uid; create it (or read it) first", gvk.Kind, owner.GetName())
	case owner.GetNamespace() != "" && owner.GetNamespace() != object.GetNamespace():
		return metav1.OwnerReference{}, fmt.Errorf("action: set owner reference: owner %s %s/%s is in another namespace than %s; owners must be cluster-scoped or in the same namespace",
			gvk.Kind, owner.GetNamespace(), owner.GetName(), key(object))
	}
	return metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: owner.GetName(), UID: owner.GetUID()}, nil
}

// sameOwner reports whether a and b refer to the same object: the same
// group, kind and name, as the garbage collector compares them (the
// version may differ, and a re-created owner has a new UID).
func sameOwner(a, b metav1.OwnerReference) bool {
	ga, errA := schema.ParseGroupVersion(a.APIVersion)
	gb, errB := schema.ParseGroupVersion(b.APIVersion)
	return errA == nil && errB == nil && ga.Group == gb.Group && a.Kind == b.Kind && a.Name == b.Name
}

// upsertRef replaces the reference to ref's owner, or appends ref.
func upsertRef(refs []metav1.OwnerReference, ref metav1.OwnerReference) []metav1.OwnerReference {
	out := make([]metav1.OwnerReference, 0, len(refs)+1)
	replaced := false
	for _, r := range refs {
		if sameOwner(r, ref) && !replaced {
			out = append(out, ref)
			replaced = true
			continue
		}
		out = append(out, r)
	}
	if !replaced {
		out = append(out, ref)
	}
	return out
}

// isNil reports whether o is nil or a typed nil pointer.
func isNil(o metav1.Object) bool {
	if o == nil {
		return true
	}
	v := reflect.ValueOf(o)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

func key(o metav1.Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}
