package sdktest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/internal/convert"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// Get fills into with a copy of the stored object named by into's
// namespace and name, or returns an error for which apierrors.IsNotFound
// is true. query.Live() is accepted; the store is always current.
func (c *Client) Get(ctx context.Context, into runtime.Object, opts ...query.Option) error {
	if err := live(ctx); err != nil {
		return err
	}
	s, err := query.SettingsOf(opts...)
	if err != nil {
		return err
	}
	if s.Selector != nil || s.Index != "" {
		return errSelectorOnGet
	}
	t, err := c.resolve("get", into, true)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	stored := c.lookup(t)
	if stored == nil {
		return apierrors.NewNotFound(t.gvr.GroupResource(), t.name)
	}
	return copyOut(into, stored)
}

// List fills into, a typed list or an *unstructured.UnstructuredList with
// apiVersion and kind set, with copies of the stored objects in namespace
// ("" for all) that match the options' label selector, sorted by
// namespace and name. The list's resourceVersion is the store's latest.
func (c *Client) List(ctx context.Context, namespace string, into runtime.Object, opts ...query.Option) error {
	if err := live(ctx); err != nil {
		return err
	}
	s, err := query.SettingsOf(opts...)
	if err != nil {
		return err
	}
	selector := s.Selector
	if selector == nil {
		selector = labels.Everything()
	}
	listGVK, t, err := c.resolveList(into, namespace)
	if err != nil {
		return err
	}
	var index sdk.IndexFunc
	if s.Index != "" {
		if index = c.indexes[t.gvk.GroupKind()][s.Index]; index == nil {
			return fmt.Errorf("sdktest: list %s by index %q: no such index (register it with sdktest.WithIndex)", t.gvk.Kind, s.Index)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var items []*unstructured.Unstructured
	for nn, u := range c.objects[t.gvr] {
		if namespace != "" && nn.Namespace != namespace {
			continue
		}
		if !selector.Matches(labels.Set(u.GetLabels())) {
			continue
		}
		if index != nil {
			ok, err := c.filedUnder(index, t.gvk, u, s.IndexValue)
			if err != nil {
				return fmt.Errorf("sdktest: list %s by index %q: %w", t.gvk.Kind, s.Index, err)
			}
			if !ok {
				continue
			}
		}
		items = append(items, u)
	}
	sort.Slice(items, func(i, j int) bool {
		if items[i].GetNamespace() != items[j].GetNamespace() {
			return items[i].GetNamespace() < items[j].GetNamespace()
		}
		return items[i].GetName() < items[j].GetName()
	})
	ul := &unstructured.UnstructuredList{Object: map[string]any{}}
	ul.SetGroupVersionKind(listGVK)
	ul.SetResourceVersion(strconv.FormatInt(c.revision, 10))
	for _, u := range items {
		ul.Items = append(ul.Items, *u.DeepCopy())
	}
	if err := convert.Into(into, ul); err != nil {
		return fmt.Errorf("sdktest: list %s: %w", t.gvk.Kind, err)
	}
	into.GetObjectKind().SetGroupVersionKind(listGVK)
	return nil
}

// live returns ctx's error, so that a cancelled handler's calls fail as
// they would against an API server.
func live(ctx context.Context) error {
	if ctx == nil {
		return fmt.Errorf("sdktest: nil context")
	}
	return ctx.Err()
}

// filedUnder reports whether index files u, as its typed form when the
// scheme knows gvk, under value.
func (c *Client) filedUnder(index sdk.IndexFunc, gvk schema.GroupVersionKind, u *unstructured.Unstructured, value string) (bool, error) {
	var obj runtime.Object = u.DeepCopy()
	if c.scheme.Recognizes(gvk) {
		typed, err := c.scheme.New(gvk)
		if err != nil {
			return false, err
		}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
			return false, err
		}
		obj = typed
	}
	values, err := index(obj)
	if err != nil {
		return false, err
	}
	return slices.Contains(values, value), nil
}
