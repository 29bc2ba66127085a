package sdktest

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"

	"github.com/handlerkit/handlerkit/pkg/sdk/action"
)

// apply approximates server-side apply of the configuration data (YAML or
// JSON) by s.FieldManager to current, nil when the object does not exist
// yet. It models one manager's view: a missing object is created from the
// configuration; otherwise the fields that the manager applied last time
// and no longer applies are removed, and the configuration is merged in,
// maps key by key, lists and scalars replaced whole. It does not track
// other writers' ownership: no conflicts, Force changes nothing, a list
// that another manager added items to is replaced, and a field the
// manager drops goes even when someone else set it too. Callers hold c.mu.
func (c *Client) apply(t *target, current *unstructured.Unstructured, data []byte, s action.Settings) (*unstructured.Unstructured, error) {
	manager := s.FieldManager
	if manager == "" {
		manager = action.DefaultFieldManager
	}
	cfg, err := applyConfiguration(t, data)
	if err != nil {
		return nil, err
	}
	if current == nil {
		if cfg.GetResourceVersion() != "" {
			return nil, apierrors.NewNotFound(t.gvr.GroupResource(), t.name)
		}
		u, err := normalize(cfg.DeepCopy().Object, t)
		if err != nil {
			return nil, err
		}
		created := c.created(t, u)
		if !s.DryRun {
			created.SetResourceVersion(c.nextRevision())
			c.store(t, created)
			c.rememberApplied(t, manager, cfg.Object)
		}
		return created, nil
	}
	merged := current.DeepCopy().Object
	dropUnappliedObject(merged, c.applied[t.gvr][t.nn()][manager], cfg.Object)
	mergeApplied(merged, cfg.Object)
	next, err := normalize(merged, t)
	if err != nil {
		return nil, err
	}
	// A resourceVersion in the configuration is a precondition, as on the
	// server; without one, apply is unconditional.
	next.SetResourceVersion(cfg.GetResourceVersion())
	result, err := c.replace(t, current, next, true, s.DryRun)
	if err != nil {
		return nil, err
	}
	if !s.DryRun && c.lookup(t) != nil {
		c.rememberApplied(t, manager, cfg.Object)
	}
	return result, nil
}

// applyConfiguration decodes and checks an apply configuration for t.
func applyConfiguration(t *target, data []byte) (*unstructured.Unstructured, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("error decoding YAML: %v", err))
	}
	var content map[string]any
	if err := utiljson.Unmarshal(js, &content); err != nil || content == nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the apply configuration is not an object: %s", js))
	}
	cfg := &unstructured.Unstructured{Object: content}
	if gvk := cfg.GroupVersionKind(); gvk != t.gvk {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the apply configuration's apiVersion and kind (%q, %q) must be the object's (%q, %q)",
			cfg.GetAPIVersion(), cfg.GetKind(), t.gvk.GroupVersion().String(), t.gvk.Kind))
	}
	if n := cfg.GetName(); n != "" && n != t.name {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", n, t.name))
	}
	if ns := cfg.GetNamespace(); ns != "" && ns != t.namespace {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the namespace of the object (%s) does not match the namespace on the URL (%s)", ns, t.namespace))
	}
	return cfg, nil
}

// appliableMetadata are the metadata fields apply manages; the others
// belong to the server.
var appliableMetadata = map[string]bool{"labels": true, "annotations": true, "finalizers": true, "ownerReferences": true}

// dropUnappliedObject removes from obj the fields that prev, the manager's
// last configuration, has and cfg, its new one, has not, leaving alone the
// fields that only the server sets.
func dropUnappliedObject(obj, prev, cfg map[string]any) {
	owned := make(map[string]any, len(prev))
	for k, v := range prev {
		switch k {
		case "apiVersion", "kind", "status":
		case "metadata":
			pm, _ := v.(map[string]any)
			md := map[string]any{}
			for mk, mv := range pm {
				if appliableMetadata[mk] {
					md[mk] = mv
				}
			}
			owned[k] = md
		default:
			owned[k] = v
		}
	}
	dropUnapplied(obj, owned, cfg)
}

// dropUnapplied removes the leaves of prev that cfg lacks from obj, and
// the maps that this leaves empty.
func dropUnapplied(obj, prev, cfg map[string]any) {
	for k, pv := range prev {
		cv, inCfg := cfg[k]
		pm, prevIsMap := pv.(map[string]any)
		om, objIsMap := obj[k].(map[string]any)
		if prevIsMap && objIsMap {
			cm, cfgIsMap := cv.(map[string]any)
			if inCfg && !cfgIsMap {
				continue // the new value replaces the map whole
			}
			dropUnapplied(om, pm, cm)
			if !inCfg && len(om) == 0 {
				delete(obj, k)
			}
			continue
		}
		if !inCfg {
			delete(obj, k)
		}
	}
}

// mergeApplied merges cfg into obj: maps key by key, everything else
// replaced; a null removes the field.
func mergeApplied(obj, cfg map[string]any) {
	for k, cv := range cfg {
		if cv == nil {
			delete(obj, k)
			continue
		}
		cm, ok1 := cv.(map[string]any)
		om, ok2 := obj[k].(map[string]any)
		if ok1 && ok2 {
			mergeApplied(om, cm)
			continue
		}
		obj[k] = runtime.DeepCopyJSONValue(cv)
	}
}

func (c *Client) rememberApplied(t *target, manager string, cfg map[string]any) {
	byName := c.applied[t.gvr]
	if byName == nil {
		byName = map[types.NamespacedName]map[string]map[string]any{}
		c.applied[t.gvr] = byName
	}
	byManager := byName[t.nn()]
	if byManager == nil {
		byManager = map[string]map[string]any{}
		byName[t.nn()] = byManager
	}
	byManager[manager] = runtime.DeepCopyJSON(cfg)
}
