package compact

import (
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Decoded is a cached object that does not compact (a custom resource,
// typed or unstructured, or a metadata-only object), held as it was
// decoded. It wraps the object for two reasons. The cache's transform
// recognises its own output by type, as it does an Object: client-go's
// reflector passes the objects of a watch-list through the transform twice
// (once into its temporary store, again in the queue's Replace), and the
// user's transforms must neither run twice nor see the cache's form. And a
// reader cannot take the cache's own pointer by accident: Expand and Copy
// return a deep copy, as they return an Object decoded.
//
// The cache keys, indexes and selects a Decoded through its metadata
// (GetObjectMeta), as it would the object itself.
type Decoded struct {
	obj runtime.Object
}

// Seal wraps obj, which must be a runtime.Object with object metadata, for
// the cache. Objects and Decoded values are returned as they are.
func Seal(obj runtime.Object) runtime.Object {
	switch obj.(type) {
	case *Object, *Decoded, nil:
		return obj
	}
	return &Decoded{obj: obj}
}

// GetObjectKind returns the object's type metadata.
func (d *Decoded) GetObjectKind() schema.ObjectKind { return d.obj.GetObjectKind() }

// DeepCopyObject copies the Decoded and the object in it.
func (d *Decoded) DeepCopyObject() runtime.Object { return &Decoded{obj: d.obj.DeepCopyObject()} }

// GetObjectMeta returns the object's metadata, for meta.Accessor and
// through it the cache's key, namespace index and label selection. It must
// not be modified.
func (d *Decoded) GetObjectMeta() metav1.Object {
	m, err := meta.Accessor(d.obj)
	if err != nil {
		return nil
	}
	return m
}
