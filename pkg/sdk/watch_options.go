package sdk

import (
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
	handler           Handler
	err               error
}

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
// the key is enqueued; all of them must accept it. Predicates must not
// modify the objects they see.
func WithPredicate(p ...Predicate) WatchOption {
	return func(c *watchConfig) { c.predicates = append(c.predicates, p...) }
}

// WithTransform adds functions that rewrite each object before it is cached,
// to save memory. They run after the built-in managedFields stripping, must
// be idempotent, and may modify the object in place. Objects that their Go
// type cannot decode skip them and are cached unstructured.
func WithTransform(t ...TransformFunc) WatchOption {
	return func(c *watchConfig) { c.transforms = append(c.transforms, t...) }
}

// WithManagedFields keeps metadata.managedFields in cached objects. By
// default they are stripped, as they are rarely read and often half the
// object's size.
func WithManagedFields() WatchOption { return func(c *watchConfig) { c.keepManagedFields = true } }

// WithMetadataOnly caches only object metadata, for kinds where labels,
// annotations and owners are all the handler needs (Secrets, ConfigMaps,
// Pods in large clusters). Event.Object is then a
// *metav1.PartialObjectMetadata and query reads of the kind go to the API
// server.
func WithMetadataOnly() WatchOption { return func(c *watchConfig) { c.metadataOnly = true } }

// WithOwnerOf turns this watch into a secondary watch: instead of being
// handled here, each event enqueues the object's controller owner, when it
// has the given apiVersion and kind, on every watch of that kind. Only the
// owner's group and kind are compared, so any served version matches. When
// an update moves the controller reference to another owner or removes it,
// the previous owner is enqueued too.
func WithOwnerOf(apiVersion, kind string) WatchOption {
	return func(c *watchConfig) {
		gv, err := schema.ParseGroupVersion(apiVersion)
		if err != nil || kind == "" {
			c.err = errInvalidOwner(apiVersion, kind, err)
			return
		}
		gvk := gv.WithKind(kind)
		c.ownerOf = &gvk
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
