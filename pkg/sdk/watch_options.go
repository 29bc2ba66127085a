package sdk

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// WatchOption configures one watch.
type WatchOption func(*watchConfig)

type watchConfig struct {
	name              string
	workers           int
	labelSelector     string
	fieldSelector     string
	predicates        []Predicate
	transforms        []TransformFunc
	keepManagedFields bool
	metadataOnly      bool
	ownerOf           *schema.GroupVersionKind
	anyOwner          bool
	mapTo             string
	mapFn             MapFunc
	indexes           map[string]IndexFunc
	handler           Handler
	err               error
}

// secondary reports whether the watch feeds other watches' queues instead
// of running a handler of its own.
func (c *watchConfig) secondary() bool { return c.ownerOf != nil || c.mapFn != nil }

// WithName names the watch. The name labels its metrics and logs and is
// Event.Watch. The default is the lower-case kind, then ".group" for
// non-core groups, then "/namespace" when the watch is namespaced, for
// example "deployment.apps/default". Names must be unique per Operator.
func WithName(name string) WatchOption { return func(c *watchConfig) { c.name = name } }

// WithNumWorkers sets how many keys of this watch are handled at once. The
// default is 1. One key is never handled by two workers at once.
func WithNumWorkers(n int) WatchOption { return func(c *watchConfig) { c.workers = n } }

// WithLabelSelector restricts the watch (and its cache) to objects matching
// selector, in the usual "app=web,tier!=db" syntax. An object that stops
// matching reaches the handler with Deleted true and Type
// EventLeftSelection.
func WithLabelSelector(selector string) WatchOption {
	return func(c *watchConfig) { c.labelSelector = selector }
}

// WithFieldSelector restricts the watch (and its cache) to objects matching
// selector, for example "spec.nodeName=node-1". An object that stops
// matching reaches the handler with Deleted true and Type
// EventLeftSelection.
func WithFieldSelector(selector string) WatchOption {
	return func(c *watchConfig) { c.fieldSelector = selector }
}

// WithPredicate adds filters that run on every informer notification before
// the key is enqueued; all of them must accept it. The objects they see are
// copies of their own, as every reader of the cache gets.
func WithPredicate(p ...Predicate) WatchOption {
	return func(c *watchConfig) { c.predicates = append(c.predicates, p...) }
}

// WithTransform is for a watch whose handler reads only part of large
// objects: it adds functions that rewrite each object before it is cached
// (drop a ConfigMap's data, a Pod's status), so that the cache holds only
// what the handler reads. They run after the built-in managedFields
// stripping and before the built-in compaction, and may modify the object
// in place. They run once on each object the watch receives, always with
// the object as decoded in the watched kind's Go type (or
// *unstructured.Unstructured, or *metav1.PartialObjectMetadata with
// WithMetadataOnly), never with the cache's own form: client-go passes the
// objects of its streamed initial list through the cache's transform twice,
// and the second pass skips them. Objects that their Go type cannot decode
// skip them and are cached unstructured. A watch with transforms has an
// informer of its own, since what it caches is not the whole kind.
func WithTransform(t ...TransformFunc) WatchOption {
	return func(c *watchConfig) { c.transforms = append(c.transforms, t...) }
}

// WithManagedFields is for handlers that read metadata.managedFields, to
// see which field manager owns which field (before taking fields over with
// server-side apply, say). By default they are stripped from cached
// objects, as most handlers never read them and they are often half an
// object's size.
func WithManagedFields() WatchOption { return func(c *watchConfig) { c.keepManagedFields = true } }

// WithMetadataOnly is for kinds of which labels, annotations and owner
// references are all the handler needs, and of which a cluster holds many
// or large objects (Secrets, ConfigMaps, Pods in large clusters; a
// secondary watch that only wakes owners): the cache holds only their
// metadata. Event.Object is then a *metav1.PartialObjectMetadata and query
// reads of the kind go to the API server.
func WithMetadataOnly() WatchOption { return func(c *watchConfig) { c.metadataOnly = true } }

// WithOwnerOf turns this watch into a secondary watch: instead of being
// handled here, each event enqueues the object's controller owner, when it
// has the given apiVersion and kind, on every watch of that kind. Only the
// owner's group and kind are compared, so any served version matches. When
// an update moves the controller reference to another owner or removes it,
// the previous owner is enqueued too.
func WithOwnerOf(apiVersion, kind string) WatchOption {
	return ownerOption(apiVersion, kind, false)
}

// WithAnyOwnerOf is WithOwnerOf for every owner reference of the given kind,
// controller or not: each event enqueues all the object's owners of that
// kind.
func WithAnyOwnerOf(apiVersion, kind string) WatchOption {
	return ownerOption(apiVersion, kind, true)
}

func ownerOption(apiVersion, kind string, any bool) WatchOption {
	return func(c *watchConfig) {
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil || kind == "" {
			c.err = errInvalidOwner(apiVersion, kind, err)
			return
		}
		gvk := gv.WithKind(kind)
		c.ownerOf, c.anyOwner = &gvk, any
	}
}

// MapFunc maps an object of a secondary watch to keys ("namespace/name", or
// "name" for cluster-scoped kinds) of its target watch. It runs in the
// informer's notification goroutine for every event, with the term's context
// (sdk.OperatorFrom works on it), so it must be quick and must not write:
// read caches through query, never list the API server. It is called with
// both the new and the old state of an update, and the union of the keys is
// enqueued, so a target that no longer matches still hears of the change.
// obj is a copy of its own, as every reader of the cache gets.
type MapFunc func(ctx context.Context, obj runtime.Object) []string

// WithMapTo turns this watch into a secondary watch whose events enqueue,
// on the watch named target, the keys fn returns: for example, a Pod event
// waking every custom resource whose selector matches the pod. The target
// must be a watch with a handler; Run says so otherwise.
func WithMapTo(target string, fn MapFunc) WatchOption {
	return func(c *watchConfig) {
		if target == "" || fn == nil {
			c.err = fmt.Errorf("WithMapTo(%q): needs a target watch name and a map function", target)
			return
		}
		c.mapTo, c.mapFn = target, fn
	}
}

// IndexFunc returns the index values of an object, for WithIndex. Objects
// that should not be indexed return none. obj is a copy of its own, as
// every reader of the cache gets.
type IndexFunc func(obj runtime.Object) ([]string, error)

// WithIndex adds an index named name to the cache of this watch's kind: fn
// computes the values each object is filed under, and query.List with
// query.MatchingIndex(name, value) reads the objects with that value from
// memory. Indexes belong to the informer, so every watch that shares it
// sees them; two watches must not add different functions under one name.
func WithIndex(name string, fn IndexFunc) WatchOption {
	return func(c *watchConfig) {
		if name == "" || fn == nil {
			c.err = fmt.Errorf("WithIndex(%q): needs a name and a function", name)
			return
		}
		if c.indexes == nil {
			c.indexes = map[string]IndexFunc{}
		}
		c.indexes[name] = fn
	}
}

// WithHandler sets a handler for this watch only, overriding the one given
// to Handle.
func WithHandler(h Handler) WatchOption { return func(c *watchConfig) { c.handler = h } }

// TransformFunc rewrites an object before it is stored in a watch's cache.
type TransformFunc func(obj runtime.Object) (runtime.Object, error)

func errInvalidOwner(apiVersion, kind string, err error) error {
	if err != nil {
		return fmt.Errorf("WithOwnerOf(%q, %q): invalid apiVersion: %w", apiVersion, kind, err)
	}
	return fmt.Errorf("WithOwnerOf(%q, %q): empty kind", apiVersion, kind)
}
