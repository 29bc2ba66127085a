package sdktest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/uuid"

	"github.com/handlerkit/handlerkit/pkg/sdk/internal/convert"
)

// The store holds every object in its JSON form, as an API server does:
// typed and unstructured callers share it, and whatever goes in or out is
// a copy. Callers hold c.mu.

func (c *Client) nextRevision() string {
	c.revision++
	return strconv.FormatInt(c.revision, 10)
}

// lookup returns the stored object, which must not leave the store.
func (c *Client) lookup(t *target) *unstructured.Unstructured {
	return c.objects[t.gvr][t.nn()]
}

func (c *Client) store(t *target, u *unstructured.Unstructured) {
	coll := c.objects[t.gvr]
	if coll == nil {
		coll = map[types.NamespacedName]*unstructured.Unstructured{}
		c.objects[t.gvr] = coll
	}
	coll[t.nn()] = u
}

func (c *Client) remove(t *target) {
	delete(c.objects[t.gvr], t.nn())
	delete(c.applied[t.gvr], t.nn())
}

// toStored returns a copy of obj in its stored form: JSON-shaped, with the
// target's kind, namespace and name, without managedFields.
func (c *Client) toStored(obj runtime.Object, t *target) (*unstructured.Unstructured, error) {
	u, err := convert.ToUnstructured(obj, t.gvk)
	if err != nil {
		return nil, err
	}
	return normalize(u.Object, t)
}

// normalize turns content into the stored form of t's object.
func normalize(content map[string]any, t *target) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(content)
	if err != nil {
		return nil, fmt.Errorf("encode %s %s: %w", t.gvk.Kind, t.key(), err)
	}
	u := &unstructured.Unstructured{}
	// util/json decodes whole numbers as int64, as the API machinery does,
	// so that stored objects compare equal whatever path they came by.
	if err := utiljson.Unmarshal(data, &u.Object); err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", t.gvk.Kind, t.key(), err)
	}
	if u.Object == nil {
		u.Object = map[string]any{}
	}
	u.SetGroupVersionKind(t.gvk)
	u.SetNamespace(t.namespace)
	if t.name != "" {
		u.SetName(t.name)
	}
	u.SetManagedFields(nil)
	return u, nil
}

// copyOut writes a copy of the stored u into the caller's obj.
func copyOut(obj runtime.Object, u *unstructured.Unstructured) error {
	if err := convert.Into(obj, u); err != nil {
		return fmt.Errorf("sdktest: write the result into %T: %w", obj, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(u.GroupVersionKind())
	return nil
}

// withoutMetadataAndStatus is the part of an object whose change moves its
// generation.
func withoutMetadataAndStatus(u *unstructured.Unstructured) map[string]any {
	rest := make(map[string]any, len(u.Object))
	for k, v := range u.Object {
		switch k {
		case "metadata", "status", "apiVersion", "kind":
		default:
			rest[k] = v
		}
	}
	return rest
}

func sameContent(a, b map[string]any) bool { return reflect.DeepEqual(a, b) }

func newUID() types.UID { return uuid.NewUUID() }

// now is the time in the second precision that metadata timestamps keep.
func now() metav1.Time { return metav1.NewTime(time.Now().Truncate(time.Second)) }
