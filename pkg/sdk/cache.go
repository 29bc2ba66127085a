package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/tools/cache"

	"github.com/handlerkit/handlerkit/pkg/sdk/internal/compact"
)

// informerKey says which objects an informer holds and how it stores them.
// Watches with equal keys share one informer: one list, one watch stream and
// one copy of each object, however many watches (primary, owner or mapped)
// read the kind.
type informerKey struct {
	gvr          schema.GroupVersionResource
	namespace    string // one namespace, or "" for all
	label, field string
	metadataOnly bool
	keepManaged  bool
	resync       time.Duration
	// private is the watch's name when it has transforms of its own: those
	// rewrite what the cache holds, so its informer is not shared.
	private string
}

// sharedInformer is one informer of a term and the watches that use it.
type sharedInformer struct {
	key      informerKey
	gvk      schema.GroupVersionKind
	informer cache.SharedIndexInformer
	factory  startableFactory

	op         *Operator
	transforms []TransformFunc // the private watch's own transforms
	// compactFailed logs the first object that could not be compacted.
	compactFailed sync.Once
	mu            sync.Mutex
	watches       []string // names of the watches that use it, for metrics and logs
	indexes       map[string]bool
}

// informerSet holds the informers of one term. It is created when the term
// starts and stopped, informers and all, when the term ends.
type informerSet struct {
	op   *Operator
	stop chan struct{}

	mu    sync.Mutex
	byKey map[informerKey]*sharedInformer
	order []*sharedInformer
}

func newInformerSet(o *Operator) *informerSet {
	return &informerSet{op: o, stop: make(chan struct{}), byKey: map[informerKey]*sharedInformer{}}
}

// keysFor returns the informer keys a resolved watch needs: one per
// namespace it covers.
func (w *watch) keysFor(gvr schema.GroupVersionResource) []informerKey {
	var keys []informerKey
	for _, ns := range w.namespaces {
		k := informerKey{
			gvr: gvr, namespace: ns, label: w.cfg.labelSelector, field: w.cfg.fieldSelector,
			metadataOnly: w.cfg.metadataOnly, keepManaged: w.cfg.keepManagedFields, resync: w.resync,
		}
		if len(w.cfg.transforms) > 0 {
			k.private = w.name
		}
		keys = append(keys, k)
	}
	return keys
}

// informerFor returns the informer for key, creating it (not started) on
// first use, and records that w uses it. w's indexers are added to it.
func (s *informerSet) informerFor(key informerKey, w *watch) (*sharedInformer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	si, ok := s.byKey[key]
	if !ok {
		var err error
		if si, err = s.newInformer(key, w); err != nil {
			return nil, err
		}
		s.byKey[key] = si
		s.order = append(s.order, si)
	}
	if err := si.use(w); err != nil {
		return nil, err
	}
	return si, nil
}

// newInformer builds the informer from the first factory that knows the
// resource: registered typed factories, client-go's for built-in kinds, then
// a dynamic (or metadata) informer.
func (s *informerSet) newInformer(key informerKey, w *watch) (*sharedInformer, error) {
	o := s.op
	tweak := func(lo *metav1.ListOptions) {
		lo.LabelSelector = key.label
		lo.FieldSelector = key.field
	}
	var (
		f   startableFactory
		inf cache.SharedIndexInformer
	)
	if key.metadataOnly {
		f = untypedFactory{metadatainformer.NewFilteredSharedInformerFactory(o.metadata, key.resync, key.namespace, tweak)}
		var err error
		if inf, err = f.informerFor(key.gvr); err != nil {
			return nil, fmt.Errorf("sdk: watch %q: metadata informer: %w", w.name, err)
		}
	} else {
		builtin := func(ns string, resync time.Duration, tweak func(*metav1.ListOptions)) startableFactory {
			return typedFactory[informers.GenericInformer]{informers.NewFilteredSharedInformerFactory(o.clientset, resync, ns, tweak)}
		}
		for _, newFactory := range append(slices.Clone(o.cfg.factories), builtin) {
			cand := newFactory(key.namespace, key.resync, tweak)
			if i, err := cand.informerFor(key.gvr); err == nil {
				f, inf = cand, i
				break
			}
		}
		if f == nil {
			f = untypedFactory{dynamicinformer.NewFilteredDynamicSharedInformerFactory(o.dynamic, key.resync, key.namespace, tweak)}
			var err error
			if inf, err = f.informerFor(key.gvr); err != nil {
				return nil, fmt.Errorf("sdk: watch %q: dynamic informer: %w", w.name, err)
			}
		}
	}
	si := &sharedInformer{key: key, gvk: w.gvk, informer: inf, factory: f, op: o, indexes: map[string]bool{}}
	if key.private != "" {
		si.transforms = w.cfg.transforms
	}
	if err := inf.SetTransform(si.transform); err != nil {
		return nil, fmt.Errorf("sdk: watch %q: set transform: %w", w.name, err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(si.listOrWatchFailed); err != nil {
		return nil, fmt.Errorf("sdk: watch %q: set watch error handler: %w", w.name, err)
	}
	return si, nil
}

// use records that w reads this informer and adds w's indexers.
func (si *sharedInformer) use(w *watch) error {
	si.mu.Lock()
	defer si.mu.Unlock()
	if !slices.Contains(si.watches, w.name) {
		si.watches = append(si.watches, w.name)
	}
	add := cache.Indexers{}
	for name, fn := range w.cfg.indexes {
		if si.indexes[name] {
			continue
		}
		add[name] = indexFunc(fn)
	}
	if len(add) == 0 {
		return nil
	}
	if err := si.informer.AddIndexers(add); err != nil {
		return fmt.Errorf("sdk: watch %q: add indexes: %w", w.name, err)
	}
	for name := range add {
		si.indexes[name] = true
	}
	return nil
}

// watchNames returns the names of the watches that use the informer.
func (si *sharedInformer) watchNames() []string {
	si.mu.Lock()
	defer si.mu.Unlock()
	return slices.Clone(si.watches)
}

// start starts every informer not started yet; informers already running
// are left alone.
func (s *informerSet) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, si := range s.order {
		si.factory.Start(s.stop)
	}
}

// shutdown stops every informer and waits for them.
func (s *informerSet) shutdown() {
	close(s.stop)
	s.mu.Lock()
	order := slices.Clone(s.order)
	s.mu.Unlock()
	for _, si := range order {
		si.factory.Shutdown()
	}
}

// cacheFor returns the indexer of a synced informer that holds every
// object of gvk in namespace ("" for every namespace), unless one exists.
func (s *informerSet) cacheFor(gvk schema.GroupVersionKind, namespace string) (cache.Indexer, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, si := range s.order {
		k := si.key
		if si.gvk != gvk || k.metadataOnly || k.label != "" || k.field != "" || k.private != "" {
			continue
		}
		if k.namespace != "" && k.namespace != namespace {
			continue
		}
		if si.informer.HasSynced() {
			return si.informer.GetIndexer(), true
		}
	}
	return nil, false
}

// cacheOfWatch returns the indexer and kind of a synced informer that the
// watch named name reads and that holds its objects of namespace ("" asks
// for every namespace the informer may hold).
func (s *informerSet) cacheOfWatch(name, namespace string) (cache.Indexer, schema.GroupVersionKind, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, si := range s.order {
		if !slices.Contains(si.watchNames(), name) {
			continue
		}
		if si.key.namespace != "" && si.key.namespace != namespace {
			continue
		}
		if si.informer.HasSynced() {
			return si.informer.GetIndexer(), si.gvk, true
		}
	}
	return nil, schema.GroupVersionKind{}, false
}

// transform prepares an object for the cache: it strips managedFields,
// converts unstructured objects of kinds the scheme knows to their typed
// form once (instead of on every handling), runs the private watch's
// transforms, stamps apiVersion and kind, which typed informers leave
// empty, and compacts objects of built-in kinds. An object the Go type
// cannot decode is kept unstructured, logged and counted, and skips the user's
// transforms, which expect the Go type: an error here would make the
// informer drop it.
//
// The transform recognises its own output, which is always an Object or a
// Decoded, and returns it as it is: client-go's reflector passes the
// objects of a watch-list (the initial list, streamed) through the
// transform twice, once into its temporary store and again when it
// replaces the queue's contents, and the user's transforms must run once
// on the object as decoded, never on the cache's form.
func (si *sharedInformer) transform(obj any) (any, error) {
	switch obj.(type) {
	case *compact.Object, *compact.Decoded:
		return obj, nil
	}
	ro, ok := obj.(runtime.Object)
	if !ok {
		return obj, nil
	}
	if !si.key.keepManaged {
		if a, err := meta.Accessor(ro); err == nil && a.GetManagedFields() != nil {
			a.SetManagedFields(nil)
		}
	}
	if u, ok := ro.(*unstructured.Unstructured); ok && !si.key.metadataOnly && si.op.cfg.scheme.Recognizes(si.gvk) {
		typed, err := si.decode(u)
		if err != nil {
			si.decodeFailed(u, err)
			u.SetGroupVersionKind(si.gvk)
			return compact.Seal(u), nil
		}
		ro = typed
	}
	for _, t := range si.transforms {
		out, err := t(ro)
		if err != nil {
			return nil, fmt.Errorf("sdk: watch %q: transform: %w", si.key.private, err)
		}
		if out != nil {
			ro = out
		}
	}
	ro.GetObjectKind().SetGroupVersionKind(si.gvk)
	ro = si.compact(ro)
	return compact.Seal(ro), nil
}

// compact returns obj in compact form, unless the informer holds metadata
// only or obj's type does not compact. A failure
// to encode, which a generated Marshal never reports for an object it can
// hold, caches obj decoded and is logged once.
func (si *sharedInformer) compact(obj runtime.Object) runtime.Object {
	if si.key.metadataOnly {
		return obj
	}
	out, _, err := compact.Of(obj)
	if err != nil {
		si.compactFailed.Do(func() {
			si.op.cfg.log.WithField("watch", strings.Join(si.watchNames(), ",")).WithError(err).
				Warn("cannot compact a cached object; caching it decoded (logged once per informer)")
		})
	}
	return out
}

// decode converts u to the Go type the scheme has for the informer's kind.
func (si *sharedInformer) decode(u *unstructured.Unstructured) (runtime.Object, error) {
	typed, err := si.op.cfg.scheme.New(si.gvk)
	if err != nil {
		return nil, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
		return nil, err
	}
	return typed, nil
}

// decodeFailed reports an object that its Go type cannot decode, typically
// because the CRD's schema and the Go type disagree, once for each watch
// that reads it.
func (si *sharedInformer) decodeFailed(u *unstructured.Unstructured, err error) {
	key, _ := cache.MetaNamespaceKeyFunc(u)
	for _, name := range si.watchNames() {
		si.op.hmetrics.decodeErrs.WithLabelValues(name).Inc()
	}
	si.op.cfg.log.WithFields(logrus.Fields{"watch": strings.Join(si.watchNames(), ","), "key": key}).WithError(err).
		Warnf("cannot decode the object into the Go type of %s (do the Go type and the CRD's schema agree?); delivering it as *unstructured.Unstructured", si.gvk)
}

// listOrWatchFailed replaces client-go's default handler, which only
// logs through klog, for the failures of the informer's lists and
// watches. Typed informers decode in their reflector, so an object that
// their Go type cannot decode fails the whole list or watch here; client-go
// retries it with backoff, and meanwhile the cache does not change.
func (si *sharedInformer) listOrWatchFailed(_ context.Context, _ *cache.Reflector, err error) {
	names := si.watchNames()
	log := si.op.cfg.log.WithField("watch", strings.Join(names, ",")).WithError(err)
	switch {
	case errors.Is(err, io.EOF):
		// The watch closed normally.
		return
	case errors.Is(err, io.ErrUnexpectedEOF), apierrors.IsResourceExpired(err), apierrors.IsGone(err), errors.Is(err, context.Canceled):
		// Routine: client-go lists again.
		log.Debug("watch closed; listing again")
		return
	}
	for _, name := range names {
		si.op.hmetrics.watchErrs.WithLabelValues(name).Inc()
	}
	log.Warn("list or watch failed; the cache is not updated until a retry succeeds (client-go retries with backoff)")
}

// indexFunc adapts an IndexFunc to client-go's, skipping tombstones and
// objects of other types and decoding compact objects.
func indexFunc(fn IndexFunc) cache.IndexFunc {
	return func(obj any) ([]string, error) {
		ro, _, err := compact.Expand(obj)
		if err != nil {
			return nil, err
		}
		if ro == nil {
			return nil, nil
		}
		return fn(ro)
	}
}
