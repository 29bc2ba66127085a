package sdktest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/internal/convert"
)

// Patch applies data of type pt to the stored object named by obj and
// writes the result back into obj, with Update's checks: a resourceVersion
// in the patched object must be current (IsConflict), and the stored
// status is kept. A missing object is IsNotFound. A JSON patch whose
// operations fail (a "test" that does not hold) is IsInvalid. Strategic
// merge patch works for built-in kinds only, as on a real server.
//
// ApplyPatch (server-side apply) is approximated for one field manager
// per object; see apply. With nil data, obj itself is applied, as
// action.Writer does, and the field manager defaults to
// action.DefaultFieldManager.
//
// With action.WithSubresource("status"), a merge, JSON or strategic merge
// patch changes only the stored status, as on a server whose kind has a
// status subresource (every kind here has one); other subresources are
// IsNotFound, and server-side apply to a subresource is not modelled.
func (c *Client) Patch(ctx context.Context, obj runtime.Object, pt action.PatchType, data []byte, opts ...action.Option) error {
	if err := live(ctx); err != nil {
		return err
	}
	s := action.SettingsOf(opts...)
	t, err := c.resolve("patch", obj, true)
	if err != nil {
		return err
	}
	switch pt {
	case action.MergePatch, action.JSONPatch, action.StrategicMergePatch:
		if len(data) == 0 {
			return fmt.Errorf("sdktest: patch %s %q: empty %s patch", t.gvk.Kind, t.name, pt)
		}
		if s.Force {
			return errors.New("sdktest: Force applies only to server-side apply")
		}
	case action.ApplyPatch:
		if len(data) == 0 {
			if data, err = applyData(obj, t); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("sdktest: patch %s %q: unsupported patch type %q", t.gvk.Kind, t.name, pt)
	}
	switch {
	case s.Subresource == "":
	case s.Subresource != "status":
		return apierrors.NewNotFound(t.gvr.GroupResource(), t.name+"/"+s.Subresource)
	case pt == action.ApplyPatch:
		return fmt.Errorf("sdktest: apply %s %q: server-side apply to the status subresource is not modelled; use a merge patch", t.gvk.Kind, t.name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	current := c.lookup(t)
	var result *unstructured.Unstructured
	if pt == action.ApplyPatch {
		result, err = c.apply(t, current, data, s)
	} else {
		if current == nil {
			return apierrors.NewNotFound(t.gvr.GroupResource(), t.name)
		}
		var patched *unstructured.Unstructured
		if patched, err = patchStored(t, current, pt, data); err == nil {
			if s.Subresource == "status" {
				patched = statusOf(current, patched)
			}
			result, err = c.replace(t, current, patched, s.Subresource == "", s.DryRun)
		}
	}
	if err != nil {
		return err
	}
	return copyOut(obj, result)
}

// statusOf is current with patched's status and resourceVersion: what a
// patch of the status subresource stores.
func statusOf(current, patched *unstructured.Unstructured) *unstructured.Unstructured {
	next := current.DeepCopy()
	if st, ok := patched.Object["status"]; ok {
		next.Object["status"] = st
	} else {
		delete(next.Object, "status")
	}
	next.SetResourceVersion(patched.GetResourceVersion())
	return next
}

// applyData is obj as an apply configuration, as action.Writer sends it.
func applyData(obj runtime.Object, t *target) ([]byte, error) {
	u, err := convert.ToUnstructured(obj, t.gvk)
	if err != nil {
		return nil, fmt.Errorf("sdktest: apply %s: %w", t.gvk.Kind, err)
	}
	u.SetResourceVersion("")
	u.SetManagedFields(nil)
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return json.Marshal(u.Object)
}

// patchStored returns current with a merge, JSON or strategic merge patch
// applied, with the API server's errors for patches that do not apply.
func patchStored(t *target, current *unstructured.Unstructured, pt action.PatchType, data []byte) (*unstructured.Unstructured, error) {
	doc, err := json.Marshal(current.Object)
	if err != nil {
		return nil, fmt.Errorf("sdktest: patch %s %s: %w", t.gvk.Kind, t.key(), err)
	}
	var patched []byte
	switch pt {
	case action.MergePatch:
		if patched, err = jsonpatch.MergePatch(doc, data); err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
	case action.JSONPatch:
		ops, err := jsonpatch.DecodePatch(data)
		if err != nil {
			return nil, apierrors.NewBadRequest(err.Error())
		}
		if patched, err = ops.Apply(doc); err != nil {
			return nil, apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "", schema.GroupResource{}, "", err.Error(), 0, false)
		}
	case action.StrategicMergePatch:
		if patched, err = strategicMerge(t, doc, data); err != nil {
			return nil, err
		}
	}
	return fromPatched(t, patched)
}

// strategicMerge merges patch into doc by the built-in Go type's patch
// strategy. Custom resources have none, and the API server refuses them.
func strategicMerge(t *target, doc, patch []byte) ([]byte, error) {
	if !t.builtin() {
		return nil, &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure,
			Code:   http.StatusUnsupportedMediaType,
			Reason: metav1.StatusReasonUnsupportedMediaType,
			Message: fmt.Sprintf("sdktest: %s is not a built-in kind: strategic merge patch is unsupported; "+
				"use a JSON merge patch, a JSON patch or server-side apply", t.gvk.Kind),
		}}
	}
	dataStruct, err := clientgoscheme.Scheme.New(t.gvk)
	if err != nil {
		return nil, fmt.Errorf("sdktest: strategic merge patch of %s: %w", t.gvk.Kind, err)
	}
	merged, err := strategicpatch.StrategicMergePatch(doc, patch, dataStruct)
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	return merged, nil
}

// fromPatched decodes a patched document, refusing a patch that renamed
// or moved the object.
func fromPatched(t *target, patched []byte) (*unstructured.Unstructured, error) {
	var content map[string]any
	if err := utiljson.Unmarshal(patched, &content); err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the patched object is not valid JSON: %v", err))
	}
	u := &unstructured.Unstructured{Object: content}
	if n := u.GetName(); n != t.name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", n, t.name))
	}
	if ns := u.GetNamespace(); ns != t.namespace {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the namespace of the object (%s) does not match the namespace on the URL (%s)", ns, t.namespace))
	}
	return normalize(content, t)
}
