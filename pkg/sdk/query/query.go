// Package query reads Kubernetes objects for handlers. A kind the Operator
// watches (fully, without selectors) is read from the watch's informer cache,
// so a read per event costs no request; any other kind, or any read with
// Live, goes to the API server. FromWatch reads one named watch's cache, also
// one its transforms or selectors narrowed. Every object returned is the caller's own
// copy, safe to mutate.
//
// The package-level functions use the Operator running the calling handler
// (found through its context), else sdk.Default(); For gives a Reader on an
// explicit Operator. Every call takes a context first. Reader implements
// Interface, which pkg/sdk/sdktest implements in memory for unit tests.
package query

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/internal/compact"
	"github.com/handlerkit/handlerkit/pkg/sdk/internal/convert"
)

// Option tunes one read.
type Option func(*options)

type options struct {
	live       bool
	selector   labels.Selector
	index      string
	indexValue string
	watch      string
	where      func(metav1.Object) bool
	err        error
}

// Live forces a read from the API server even for a watched kind, for the
// rare read that must not be stale (for example right after a write).
func Live() Option { return func(o *options) { o.live = true } }

// WithLabelSelector restricts List to objects matching selector, in the
// usual "app=web,tier!=db" syntax. It is an error with Get.
func WithLabelSelector(selector string) Option {
	return func(o *options) {
		s, err := labels.Parse(selector)
		if err != nil {
			o.err = fmt.Errorf("query: invalid label selector %q: %w", selector, err)
			return
		}
		o.selector = s
	}
}

// MatchingLabels restricts List to objects carrying every given label. It
// is an error with Get.
func MatchingLabels(set map[string]string) Option {
	return func(o *options) { o.selector = labels.SelectorFromSet(set) }
}

// MatchingIndex restricts List to the objects filed under value in the
// cache index named name, which a watch of the kind adds with sdk.WithIndex
// (for example "exporters that reference ConfigMap X"). Such a List is
// answered from memory only: it fails when no running watch's cache of the
// kind covers the namespace and carries the index, and with Live. It is an
// error with Get.
func MatchingIndex(name, value string) Option {
	return func(o *options) {
		if name == "" {
			o.err = errors.New("query: MatchingIndex needs an index name")
			return
		}
		o.index, o.indexValue = name, value
	}
}

// WhereMeta restricts List to the objects whose metadata keep accepts
// (labels, annotations, owners, deletion). From a cache it runs on the
// cached entries, whose metadata is decoded even when the rest is kept
// compact, before anything else is decoded: a List that keeps few of many
// objects decodes only those (the label selector is applied the same way).
// From the API server it filters the listed objects. keep must not change
// the object. It is an error with Get.
func WhereMeta(keep func(metav1.Object) bool) Option {
	return func(o *options) {
		if keep == nil {
			o.err = errors.New("query: WhereMeta needs a function")
			return
		}
		o.where = keep
	}
}

// FromWatch reads from the cache of the watch named name, and only from it:
// the objects that watch selected (its label and field selectors), in the
// form its transforms (sdk.WithTransform) left them. Plain reads never use
// such a cache, since it holds part of the kind or a rewritten form; a
// handler that knows what its own watch keeps opts in with FromWatch and
// reads it with no request. The read fails when no running watch has that
// name, its kind is not the one read, or its cache is not synced or does
// not cover the namespace. It is an error with Live.
func FromWatch(name string) Option {
	return func(o *options) {
		if name == "" {
			o.err = errors.New("query: FromWatch needs a watch name")
			return
		}
		o.watch = name
	}
}

func collect(opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	return o, o.err
}

var errNilReader = errors.New("query: Reader has no Operator")

// Reader reads through one Operator.
type Reader struct{ op *sdk.Operator }

// For returns a Reader on op.
func For(op *sdk.Operator) *Reader { return &Reader{op: op} }

// Get fills into with the object named by into's namespace and name. into
// is a typed object (kind from the scheme) or an *unstructured.Unstructured
// with apiVersion and kind set. A missing object gives an error for which
// apierrors.IsNotFound is true. ctx bounds the read when it goes to the API
// server.
//
// Get reads through the Operator running the handler that ctx belongs to
// (sdk.OperatorFrom), else through sdk.Default(). Code that should be unit
// tested without an API server takes an Interface instead.
func Get(ctx context.Context, into runtime.Object, opts ...Option) error {
	op, err := operatorFor(ctx)
	if err != nil {
		return err
	}
	return For(op).Get(ctx, into, opts...)
}

// List fills into, a typed list (for example *corev1.PodList) or an
// *unstructured.UnstructuredList with apiVersion and kind ("PodList") set,
// with the objects in namespace ("" for all). Like Get, it reads through
// the Operator running the handler that ctx belongs to, else through
// sdk.Default().
func List(ctx context.Context, namespace string, into runtime.Object, opts ...Option) error {
	op, err := operatorFor(ctx)
	if err != nil {
		return err
	}
	return For(op).List(ctx, namespace, into, opts...)
}

// GetContext is Get.
//
// Deprecated: Get takes a context now; call Get.
func GetContext(ctx context.Context, into runtime.Object, opts ...Option) error {
	return Get(ctx, into, opts...)
}

// ListContext is List.
//
// Deprecated: List takes a context now; call List.
func ListContext(ctx context.Context, namespace string, into runtime.Object, opts ...Option) error {
	return List(ctx, namespace, into, opts...)
}

// operatorFor returns the Operator of the handling ctx belongs to, else the
// Default Operator.
func operatorFor(ctx context.Context) (*sdk.Operator, error) {
	if ctx == nil {
		return nil, errors.New("query: nil context")
	}
	if op := sdk.OperatorFrom(ctx); op != nil {
		return op, nil
	}
	return sdk.Default()
}

// Get is the package-level Get on r's Operator.
func (r *Reader) Get(ctx context.Context, into runtime.Object, opts ...Option) error {
	if r == nil || r.op == nil {
		return errNilReader
	}
	o, err := collect(opts)
	if err != nil {
		return err
	}
	if o.selector != nil || o.index != "" || o.where != nil {
		return errors.New("query: label selectors, indexes and WhereMeta apply to List, not Get")
	}
	gvk, err := r.op.KindOf(into)
	if err != nil {
		return fmt.Errorf("query: get: %w", err)
	}
	if strings.HasSuffix(gvk.Kind, "List") {
		return fmt.Errorf("query: get: %s is a list; use List", gvk.Kind)
	}
	m, err := meta.Accessor(into)
	if err != nil {
		return fmt.Errorf("query: get %s: %w", gvk.Kind, err)
	}
	name, ns := m.GetName(), m.GetNamespace()
	if name == "" {
		return fmt.Errorf("query: get %s: metadata.name is empty", gvk.Kind)
	}
	mapping, err := r.op.RESTMapping(gvk)
	if err != nil {
		return fmt.Errorf("query: get: %w", err)
	}
	namespaced := mapping.Scope.Name() == meta.RESTScopeNameNamespace
	if namespaced && ns == "" {
		return fmt.Errorf("query: get %s %q: metadata.namespace is empty", gvk.Kind, name)
	}
	if !namespaced {
		ns = ""
	}
	idx, cached := cache.Indexer(nil), false
	switch {
	case o.watch != "":
		if idx, err = r.watchCache(gvk, ns, o); err != nil {
			return err
		}
		cached = true
	case !o.live:
		idx, cached = r.op.CacheFor(gvk, ns)
	}
	if cached {
		key := name
		if ns != "" {
			key = ns + "/" + name
		}
		obj, exists, err := compact.Unwrap(idx).GetByKey(key)
		if err != nil {
			return fmt.Errorf("query: get %s %s from cache: %w", gvk.Kind, key, err)
		}
		if !exists {
			return apierrors.NewNotFound(mapping.Resource.GroupResource(), name)
		}
		if err := copyInto(into, obj.(runtime.Object)); err != nil {
			return fmt.Errorf("query: get %s %s: %w", gvk.Kind, key, err)
		}
		into.GetObjectKind().SetGroupVersionKind(gvk)
		return nil
	}
	u, err := r.op.DynamicClient().Resource(mapping.Resource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := convert.Into(into, u); err != nil {
		return fmt.Errorf("query: get %s %s: %w", gvk.Kind, name, err)
	}
	return nil
}

// List is the package-level List on r's Operator.
func (r *Reader) List(ctx context.Context, namespace string, into runtime.Object, opts ...Option) error {
	if r == nil || r.op == nil {
		return errNilReader
	}
	o, err := collect(opts)
	if err != nil {
		return err
	}
	listGVK, err := r.op.KindOf(into)
	if err != nil {
		return fmt.Errorf("query: list: %w", err)
	}
	if !meta.IsListType(into) || !strings.HasSuffix(listGVK.Kind, "List") {
		return fmt.Errorf("query: list: %T (%s) is not a list type", into, listGVK.Kind)
	}
	gvk := listGVK.GroupVersion().WithKind(strings.TrimSuffix(listGVK.Kind, "List"))
	mapping, err := r.op.RESTMapping(gvk)
	if err != nil {
		return fmt.Errorf("query: list: %w", err)
	}
	if mapping.Scope.Name() == meta.RESTScopeNameRoot {
		if namespace != "" {
			return fmt.Errorf("query: list %s: kind is cluster-scoped; namespace must be empty, not %q", gvk.Kind, namespace)
		}
	}
	selector := o.selector
	if selector == nil {
		selector = labels.Everything()
	}
	if o.index != "" {
		return r.listByIndex(gvk, namespace, selector, o, into)
	}
	if o.watch != "" {
		idx, err := r.watchCache(gvk, namespace, o)
		if err != nil {
			return err
		}
		return fillFromCache(idx, namespace, selector, o.where, into, gvk)
	}
	if !o.live {
		if idx, ok := r.op.CacheFor(gvk, namespace); ok {
			return fillFromCache(idx, namespace, selector, o.where, into, gvk)
		}
	}
	ul, err := r.op.DynamicClient().Resource(mapping.Resource).Namespace(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return err
	}
	if o.where != nil {
		items := ul.Items[:0]
		for i := range ul.Items {
			if o.where(&ul.Items[i]) {
				items = append(items, ul.Items[i])
			}
		}
		ul.Items = items
	}
	if err := convert.Into(into, ul); err != nil {
		return fmt.Errorf("query: list %s: %w", gvk.Kind, err)
	}
	into.GetObjectKind().SetGroupVersionKind(listGVK)
	return nil
}

// kept says whether where (nil: everything) keeps the object, by its
// metadata.
func kept(obj runtime.Object, where func(metav1.Object) bool) bool {
	if where == nil {
		return true
	}
	a, err := meta.Accessor(obj)
	return err == nil && where(a)
}

// watchCache is the cache of the watch o.watch names, for gvk in namespace.
func (r *Reader) watchCache(gvk schema.GroupVersionKind, namespace string, o options) (cache.Indexer, error) {
	if o.live {
		return nil, fmt.Errorf("query: %s from watch %q: FromWatch reads the cache and cannot be Live", gvk.Kind, o.watch)
	}
	idx, wgvk, ok := r.op.CacheOfWatch(o.watch, namespace)
	if !ok {
		return nil, fmt.Errorf("query: %s from watch %q: no running watch of that name has a synced cache covering namespace %q (read while Run leads)",
			gvk.Kind, o.watch, namespace)
	}
	if wgvk != gvk {
		return nil, fmt.Errorf("query: %s from watch %q: the watch holds %s", gvk.Kind, o.watch, wgvk.Kind)
	}
	return idx, nil
}

// listByIndex answers a List with MatchingIndex from the cache's index.
func (r *Reader) listByIndex(gvk schema.GroupVersionKind, namespace string, selector labels.Selector, o options, into runtime.Object) error {
	if o.live {
		return fmt.Errorf("query: list %s: MatchingIndex reads the cache and cannot be Live", gvk.Kind)
	}
	idx, ok := r.op.CacheFor(gvk, namespace)
	if o.watch != "" {
		var err error
		if idx, err = r.watchCache(gvk, namespace, o); err != nil {
			return err
		}
		ok = true
	}
	if ok {
		_, ok = idx.GetIndexers()[o.index]
	}
	if !ok {
		return fmt.Errorf("query: list %s by index %q: no running watch of the kind covers namespace %q with that index (add sdk.WithIndex to a watch, and read while Run leads)",
			gvk.Kind, o.index, namespace)
	}
	objs, err := compact.Unwrap(idx).ByIndex(o.index, o.indexValue)
	if err != nil {
		return fmt.Errorf("query: list %s by index %q: %w", gvk.Kind, o.index, err)
	}
	var cached []runtime.Object
	for _, obj := range objs {
		ro, ok := obj.(runtime.Object)
		if !ok {
			continue
		}
		a, err := meta.Accessor(ro)
		if err != nil || (namespace != "" && a.GetNamespace() != namespace) || !selector.Matches(labels.Set(a.GetLabels())) || !kept(ro, o.where) {
			continue
		}
		cached = append(cached, ro)
	}
	return fillItems(cached, into, gvk)
}

// fillFromCache copies the matching cached objects, sorted by key for
// stable output, into the list's own item type.
func fillFromCache(idx cache.Indexer, namespace string, selector labels.Selector, where func(metav1.Object) bool, into runtime.Object, gvk schema.GroupVersionKind) error {
	var cached []runtime.Object
	collectFn := func(obj any) {
		if ro, ok := obj.(runtime.Object); ok && kept(ro, where) {
			cached = append(cached, ro)
		}
	}
	// Selected on the cache's own entries, whose metadata is decoded even
	// when the rest is compact: only the objects returned are decoded.
	idx = compact.Unwrap(idx)
	var err error
	if namespace == "" {
		err = cache.ListAll(idx, selector, collectFn)
	} else {
		err = cache.ListAllByNamespace(idx, namespace, selector, collectFn)
	}
	if err != nil {
		return fmt.Errorf("query: list %s from cache: %w", gvk.Kind, err)
	}
	return fillItems(cached, into, gvk)
}

// fillItems copies cached objects, sorted by key, into the list's own item
// type.
func fillItems(cached []runtime.Object, into runtime.Object, gvk schema.GroupVersionKind) error {
	// Each key once, not once per comparison: a List of 10,000 objects
	// would build some 280,000 key strings in the sort.
	keyed := make([]keyedObject, len(cached))
	for i, c := range cached {
		keyed[i] = keyedObject{key: keyOf(c), obj: c}
	}
	slices.SortFunc(keyed, func(a, b keyedObject) int { return strings.Compare(a.key, b.key) })
	items := make([]runtime.Object, 0, len(cached))
	for _, k := range keyed {
		c := k.obj
		item, err := newItem(into)
		if err != nil {
			return fmt.Errorf("query: list %s: %w", gvk.Kind, err)
		}
		if err := copyInto(item, c); err != nil {
			return fmt.Errorf("query: list %s: %w", gvk.Kind, err)
		}
		item.GetObjectKind().SetGroupVersionKind(gvk)
		items = append(items, item)
	}
	if err := meta.SetList(into, items); err != nil {
		return fmt.Errorf("query: list %s: %w", gvk.Kind, err)
	}
	into.GetObjectKind().SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return nil
}

// keyedObject is a cached object and its namespace/name key.
type keyedObject struct {
	key string
	obj runtime.Object
}

func keyOf(obj runtime.Object) string {
	k, _ := cache.MetaNamespaceKeyFunc(obj)
	return k
}

// newItem returns a fresh value of the list's item type.
func newItem(list runtime.Object) (runtime.Object, error) {
	if _, ok := list.(*unstructured.UnstructuredList); ok {
		return &unstructured.Unstructured{}, nil
	}
	v := reflect.ValueOf(list)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("list %T is not a pointer to a struct", list)
	}
	items := v.Elem().FieldByName("Items")
	if !items.IsValid() || items.Kind() != reflect.Slice {
		return nil, fmt.Errorf("list %T has no Items slice", list)
	}
	elem := items.Type().Elem()
	if elem.Kind() == reflect.Pointer {
		elem = elem.Elem()
	}
	item, ok := reflect.New(elem).Interface().(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("items of %T are not objects", list)
	}
	return item, nil
}

// copyInto replaces dst's content with a copy of the cached object src
// (compact.Expand's copy, which is not copied again when dst has its
// type).
func copyInto(dst, src runtime.Object) error {
	obj, fresh, err := compact.Expand(src)
	if err != nil {
		return err
	}
	if dv := reflect.ValueOf(dst); fresh && dv.Kind() == reflect.Pointer && !dv.IsNil() && dv.Type() == reflect.TypeOf(obj) {
		dv.Elem().Set(reflect.ValueOf(obj).Elem())
		return nil
	}
	return convert.Into(dst, obj)
}
