package sdktest

import (
	"fmt"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// Client is an in-memory API server for handlers' reads and writes. It
// implements query.Interface and action.Interface and is safe for
// concurrent use. The zero value is not usable; call NewClient.
type Client struct {
	scheme        *runtime.Scheme
	mapper        meta.RESTMapper
	clusterScoped map[schema.GroupKind]bool

	indexes map[schema.GroupKind]map[string]sdk.IndexFunc

	mu       sync.Mutex
	revision int64
	objects  map[schema.GroupVersionResource]map[types.NamespacedName]*unstructured.Unstructured
	// applied holds each field manager's last apply configuration of an
	// object, to tell which fields it stopped applying.
	applied map[schema.GroupVersionResource]map[types.NamespacedName]map[string]map[string]any
}

var (
	_ query.Interface  = (*Client)(nil)
	_ action.Interface = (*Client)(nil)
)

// Option configures a Client.
type Option func(*config)

type config struct {
	indexes       map[schema.GroupKind]map[string]sdk.IndexFunc
	scheme        *runtime.Scheme
	mapper        meta.RESTMapper
	clusterScoped []schema.GroupKind
	objects       []runtime.Object
}

// WithScheme sets the scheme that tells the kind of typed objects. The
// default is client-go's kubernetes/scheme.Scheme, the Operator's default;
// pass the Operator's scheme when it has your CRD types.
func WithScheme(s *runtime.Scheme) Option { return func(c *config) { c.scheme = s } }

// WithObjects stores objs, typed or unstructured, before the first call,
// as they are: status included, finalizers and deletionTimestamp too. An
// object without uid or creationTimestamp gets one; an object without
// resourceVersion gets the next one, and a numeric one is kept.
func WithObjects(objs ...runtime.Object) Option {
	return func(c *config) { c.objects = append(c.objects, objs...) }
}

// WithClusterScoped declares kinds that are cluster-scoped. Built-in
// cluster-scoped kinds (Namespace, Node, ClusterRole, ...) are known
// already; every other kind is namespaced unless declared here.
func WithClusterScoped(kinds ...schema.GroupKind) Option {
	return func(c *config) { c.clusterScoped = append(c.clusterScoped, kinds...) }
}

// WithRESTMapper replaces the built-in knowledge of scopes and resource
// names with m, for example one that knows a CRD's irregular plural. A
// kind m does not know is then an error, as on an Operator.
func WithRESTMapper(m meta.RESTMapper) Option { return func(c *config) { c.mapper = m } }

// WithIndex registers the index name on objects of kind gk, as
// sdk.WithIndex does on a watch's cache, so that List with
// query.MatchingIndex(name, value) works in memory. fn gets the typed object
// when the scheme knows the kind, else the unstructured one.
func WithIndex(gk schema.GroupKind, name string, fn sdk.IndexFunc) Option {
	return func(c *config) {
		if c.indexes == nil {
			c.indexes = map[schema.GroupKind]map[string]sdk.IndexFunc{}
		}
		if c.indexes[gk] == nil {
			c.indexes[gk] = map[string]sdk.IndexFunc{}
		}
		c.indexes[gk][name] = fn
	}
}

// NewClient returns an empty Client, or one holding WithObjects' objects.
func NewClient(opts ...Option) (*Client, error) {
	cfg := config{scheme: clientgoscheme.Scheme}
	for _, opt := range opts {
		if opt != nil {
			opt(&cfg)
		}
	}
	if cfg.scheme == nil {
		return nil, fmt.Errorf("sdktest: nil scheme")
	}
	c := &Client{
		indexes:       cfg.indexes,
		scheme:        cfg.scheme,
		mapper:        cfg.mapper,
		clusterScoped: map[schema.GroupKind]bool{},
		objects:       map[schema.GroupVersionResource]map[types.NamespacedName]*unstructured.Unstructured{},
		applied:       map[schema.GroupVersionResource]map[types.NamespacedName]map[string]map[string]any{},
	}
	for gk := range builtinClusterScoped {
		c.clusterScoped[gk] = true
	}
	for _, gk := range cfg.clusterScoped {
		c.clusterScoped[gk] = true
	}
	for i, obj := range cfg.objects {
		if err := c.seed(obj); err != nil {
			return nil, fmt.Errorf("sdktest: object %d of WithObjects: %w", i, err)
		}
	}
	return c, nil
}

// seed stores obj as it is, filling in what the server would have set.
func (c *Client) seed(obj runtime.Object) error {
	t, err := c.resolve("add", obj, true)
	if err != nil {
		return err
	}
	u, err := c.toStored(obj, t)
	if err != nil {
		return err
	}
	if u.GetUID() == "" {
		u.SetUID(newUID())
	}
	if ts := u.GetCreationTimestamp(); ts.IsZero() {
		u.SetCreationTimestamp(now())
	}
	if rv := u.GetResourceVersion(); rv != "" {
		n, err := strconv.ParseInt(rv, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("%s %s: resourceVersion %q is not a positive integer", t.gvk.Kind, t.key(), rv)
		}
		c.revision = max(c.revision, n)
	} else {
		u.SetResourceVersion(c.nextRevision())
	}
	if c.lookup(t) != nil {
		return fmt.Errorf("%s %s is given twice", t.gvk.Kind, t.key())
	}
	c.store(t, u)
	return nil
}
