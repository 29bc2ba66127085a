package manifest

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/client-go/kubernetes/scheme"
)

// applyPatchFile applies the strategic-merge patches in file (a kustomization's
// patches entry by path) to objs, as kustomize does: each patch names its
// target by apiVersion, kind and name (and namespace, when it has one) and
// must find exactly one; lists merge by their keys (env by name, containers
// by name), though the order of a merged list may differ from kustomize's
// (which writes the patch's entries first; nothing under deploy/ depends on
// the order of env entries, none refers to another). Only kinds of the built-in scheme are understood, whose merge keys
// are known here; anything else is an error rather than a plain overwrite.
func applyPatchFile(objs []*unstructured.Unstructured, file string) error {
	patches, err := ReadFile(file)
	if err != nil {
		return err
	}
	for _, p := range patches {
		typed, err := scheme.Scheme.New(p.GroupVersionKind())
		if err != nil {
			return fmt.Errorf("%s: patch of %s: only built-in kinds are supported here: %w", file, p.GroupVersionKind(), err)
		}
		var target *unstructured.Unstructured
		for _, o := range objs {
			if o.GroupVersionKind() == p.GroupVersionKind() && o.GetName() == p.GetName() &&
				(p.GetNamespace() == "" || p.GetNamespace() == o.GetNamespace()) {
				if target != nil {
					return fmt.Errorf("%s: patch of %s %s matches more than one object", file, p.GetKind(), p.GetName())
				}
				target = o
			}
		}
		if target == nil {
			return fmt.Errorf("%s: patch of %s %s matches no object", file, p.GetKind(), p.GetName())
		}
		patch := p.DeepCopy().Object
		// The target's identity is not the patch's to change.
		if md, ok := patch["metadata"].(map[string]any); ok {
			delete(md, "namespace")
		}
		meta, err := strategicpatch.NewPatchMetaFromStruct(typed)
		if err != nil {
			return err
		}
		merged, err := strategicpatch.StrategicMergeMapPatchUsingLookupPatchMeta(target.Object, patch, meta)
		if err != nil {
			return fmt.Errorf("%s: patch of %s %s: %w", file, p.GetKind(), p.GetName(), err)
		}
		// A round trip through JSON keeps the object's values the plain
		// types the rest of this package expects.
		data, err := json.Marshal(merged)
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			return err
		}
		target.Object = m
	}
	return nil
}
