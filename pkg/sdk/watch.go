package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"
	"sync"
	"sync/atomic"
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
	"k8s.io/client-go/util/workqueue"
)

// watch is one registered Watch call. Its per-run state lives in a
// watchRun so that a second Run starts from a clean slate.
type watch struct {
	op        *Operator
	name      string
	gvk       schema.GroupVersionKind
	namespace string
	resync    time.Duration
	cfg       watchConfig

	mu  sync.Mutex
	cur *watchRun
}

// watchRun is the state of a watch during one leadership term.
type watchRun struct {
	w       *watch
	handler Handler
	owners  []*watch
	queue   workqueue.TypedRateLimitingInterface[string]
	tracker *tracker

	// mapping, informer and factory are written once by start, before
	// synced is set; readers check synced first.
	mapping  *meta.RESTMapping
	informer cache.SharedIndexInformer
	factory  startableFactory
	synced   atomic.Bool
}

// newRun resets the watch for a new leadership term.
func (w *watch) newRun(handler Handler, owners []*watch) *watchRun {
	limiter := w.op.cfg.retry.limiter()
	if w.op.cfg.limiter != nil {
		limiter = w.op.cfg.limiter()
	}
	r := &watchRun{
		w:       w,
		handler: handler,
		owners:  owners,
		tracker: newTracker(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{
			Name:            w.name,
			MetricsProvider: w.op.qmetrics,
		}),
	}
	w.mu.Lock()
	w.cur = r
	w.mu.Unlock()
	return r
}

// endRun detaches r once its term is over, so that its cache, about to
// stop, is no longer served to query.
func (w *watch) endRun(r *watchRun) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cur == r {
		w.cur = nil
	}
}

func (w *watch) run() *watchRun {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur
}

func (w *watch) isSynced() bool {
	r := w.run()
	return r != nil && r.synced.Load()
}

func (w *watch) syncedIndexer() (cache.Indexer, bool) {
	r := w.run()
	if r == nil || !r.synced.Load() {
		return nil, false
	}
	return r.informer.GetIndexer(), true
}

// permanentError marks a resolve error that no retry can fix: the watch
// itself is wrong.
type permanentError struct{ error }

func (e permanentError) Unwrap() error { return e.error }

// isPermanent reports whether err is a permanentError.
func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// resolve maps the watched kind to its resource. A kind missing from a
// served built-in API is a permanentError. Other errors (a kind not served
// yet, an API server that cannot be reached, a discovery failure) may go
// away, so Run retries them.
func (r *watchRun) resolve() error {
	m, err := r.w.op.RESTMapping(r.w.gvk)
	if err != nil {
		if meta.IsNoMatchError(err) && r.w.op.neverServed(r.w.gvk) {
			gv := r.w.gvk.GroupVersion()
			return permanentError{fmt.Errorf("sdk: watch %q: kind %q is not served in %q, and never will be: the API server serves %s, a built-in API, without that kind (is it misspelt?)",
				r.w.name, r.w.gvk.Kind, gv, gv)}
		}
		return err
	}
	if m.Scope.Name() == meta.RESTScopeNameRoot && r.w.namespace != "" {
		return permanentError{fmt.Errorf("sdk: watch %q: %s is cluster-scoped; its namespace must be empty, not %q", r.w.name, r.w.gvk.Kind, r.w.namespace)}
	}
	r.mapping = m
	return nil
}

// startInformer builds the informer from the first factory that knows the
// resource and starts it.
func (r *watchRun) startInformer(stop <-chan struct{}) error {
	w, o := r.w, r.w.op
	gvr := r.mapping.Resource
	tweak := func(lo *metav1.ListOptions) {
		lo.LabelSelector = w.cfg.labelSelector
		lo.FieldSelector = w.cfg.fieldSelector
	}
	var (
		f   startableFactory
		inf cache.SharedIndexInformer
	)
	if w.cfg.metadataOnly {
		f = untypedFactory{metadatainformer.NewFilteredSharedInformerFactory(o.metadata, w.resync, w.namespace, tweak)}
		var err error
		if inf, err = f.informerFor(gvr); err != nil {
			return fmt.Errorf("sdk: watch %q: metadata informer: %w", w.name, err)
		}
	} else {
		builtin := func(ns string, resync time.Duration, tweak func(*metav1.ListOptions)) startableFactory {
			return typedFactory[informers.GenericInformer]{informers.NewFilteredSharedInformerFactory(o.clientset, resync, ns, tweak)}
		}
		for _, newFactory := range append(append([]factoryConstructor{}, o.cfg.factories...), builtin) {
			cand := newFactory(w.namespace, w.resync, tweak)
			if i, err := cand.informerFor(gvr); err == nil {
				f, inf = cand, i
				break
			}
		}
		if f == nil {
			f = untypedFactory{dynamicinformer.NewFilteredDynamicSharedInformerFactory(o.dynamic, w.resync, w.namespace, tweak)}
			var err error
			if inf, err = f.informerFor(gvr); err != nil {
				return fmt.Errorf("sdk: watch %q: dynamic informer: %w", w.name, err)
			}
		}
	}
	if err := inf.SetTransform(w.transform); err != nil {
		return fmt.Errorf("sdk: watch %q: set transform: %w", w.name, err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(r.listOrWatchFailed); err != nil {
		return fmt.Errorf("sdk: watch %q: set watch error handler: %w", w.name, err)
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { r.notify(EventAdd, nil, obj) },
		UpdateFunc: func(old, obj any) {
			typ := EventUpdate
			if sameResourceVersion(old, obj) {
				typ = EventResync
			}
			r.notify(typ, old, obj)
		},
		DeleteFunc: func(obj any) { r.notify(EventDelete, nil, obj) },
	}); err != nil {
		return fmt.Errorf("sdk: watch %q: add event handler: %w", w.name, err)
	}
	r.informer, r.factory = inf, f
	f.Start(stop)
	return nil
}

func sameResourceVersion(a, b any) bool {
	am, err1 := meta.Accessor(a)
	bm, err2 := meta.Accessor(b)
	return err1 == nil && err2 == nil && am.GetResourceVersion() == bm.GetResourceVersion()
}

// transform prepares an object for the cache: it strips managedFields,
// converts unstructured objects of kinds the scheme knows to their typed
// form once (instead of on every handling), runs the user's transforms and
// stamps apiVersion and kind, which typed informers leave empty. An object
// the Go type cannot decode is kept unstructured, logged and counted, and
// skips the user's transforms, which expect the Go type: an error here
// would make the informer drop it.
func (w *watch) transform(obj any) (any, error) {
	ro, ok := obj.(runtime.Object)
	if !ok {
		return obj, nil
	}
	if !w.cfg.keepManagedFields {
		if a, err := meta.Accessor(ro); err == nil && a.GetManagedFields() != nil {
			a.SetManagedFields(nil)
		}
	}
	if u, ok := ro.(*unstructured.Unstructured); ok && !w.cfg.metadataOnly && w.op.cfg.scheme.Recognizes(w.gvk) {
		typed, err := w.decode(u)
		if err != nil {
			w.decodeFailed(u, err)
			u.SetGroupVersionKind(w.gvk)
			return u, nil
		}
		ro = typed
	}
	for _, t := range w.cfg.transforms {
		out, err := t(ro)
		if err != nil {
			return nil, fmt.Errorf("sdk: watch %q: transform: %w", w.name, err)
		}
		if out != nil {
			ro = out
		}
	}
	ro.GetObjectKind().SetGroupVersionKind(w.gvk)
	return ro, nil
}

// decode converts u to the Go type the scheme has for the watched kind.
func (w *watch) decode(u *unstructured.Unstructured) (runtime.Object, error) {
	typed, err := w.op.cfg.scheme.New(w.gvk)
	if err != nil {
		return nil, err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, typed); err != nil {
		return nil, err
	}
	return typed, nil
}

// decodeFailed reports an object that its Go type cannot decode, typically
// because the CRD's schema and the Go type disagree.
func (w *watch) decodeFailed(u *unstructured.Unstructured, err error) {
	w.op.hmetrics.decodeErrs.WithLabelValues(w.name).Inc()
	key, _ := cache.MetaNamespaceKeyFunc(u)
	w.op.cfg.log.WithFields(logrus.Fields{"watch": w.name, "key": key}).WithError(err).
		Warnf("cannot decode the object into the Go type of %s (do the Go type and the CRD's schema agree?); delivering it as *unstructured.Unstructured", w.gvk)
}

// listOrWatchFailed replaces client-go's default handler, which only
// logs through klog, for the failures of the informer's lists and
// watches. Typed informers decode in their reflector, so an object that
// their Go type cannot decode fails the whole list or watch here; client-go
// retries it with backoff, and meanwhile the cache does not change.
func (r *watchRun) listOrWatchFailed(_ context.Context, _ *cache.Reflector, err error) {
	log := r.w.op.cfg.log.WithField("watch", r.w.name).WithError(err)
	switch {
	case errors.Is(err, io.EOF):
		// The watch closed normally.
		return
	case errors.Is(err, io.ErrUnexpectedEOF), apierrors.IsResourceExpired(err), apierrors.IsGone(err), errors.Is(err, context.Canceled):
		// Routine: client-go lists again.
		log.Debug("watch closed; listing again")
		return
	}
	r.w.op.hmetrics.watchErrs.WithLabelValues(r.w.name).Inc()
	log.Warn("list or watch failed; the cache is not updated until a retry succeeds (client-go retries with backoff)")
}

// notify is the informer's only way into the watch: filter, remember, enqueue.
func (r *watchRun) notify(typ EventType, old, obj any) {
	w := r.w
	// A delete missed during a relist arrives as a tombstone holding the
	// last state the cache knew.
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	ro, ok := obj.(runtime.Object)
	if !ok {
		w.op.cfg.log.WithField("watch", w.name).Warnf("ignoring %T from informer", obj)
		return
	}
	w.op.hmetrics.events.WithLabelValues(w.name, string(typ)).Inc()
	if len(w.cfg.predicates) > 0 {
		oldObj, _ := old.(runtime.Object)
		e := Event{Object: ro, Deleted: typ == EventDelete, Watch: w.name, Type: typ}
		for _, p := range w.cfg.predicates {
			if !p(oldObj, e) {
				return
			}
		}
	}
	if w.cfg.ownerOf != nil {
		oldObj, _ := old.(runtime.Object)
		r.enqueueOwners(oldObj, ro)
		return
	}
	key, err := cache.MetaNamespaceKeyFunc(ro)
	if err != nil {
		w.op.cfg.log.WithField("watch", w.name).WithError(err).Warn("cannot key object")
		return
	}
	r.tracker.observe(key, typ, ro)
	r.queue.Add(key)
}

// enqueueOwners puts the controller owner of obj on the owner watches, and
// also the one of old, the state before an update, when it differs: an
// owner that lost a controlled object must hear of it too.
func (r *watchRun) enqueueOwners(old, obj runtime.Object) {
	ns, ref := r.controllerOf(obj)
	if ref != nil {
		r.enqueueOwner(ns, ref)
	}
	if old == nil {
		return
	}
	if oldNS, oldRef := r.controllerOf(old); oldRef != nil && (ref == nil || oldRef.UID != ref.UID || oldRef.Name != ref.Name) {
		r.enqueueOwner(oldNS, oldRef)
	}
}

// controllerOf returns obj's namespace and its controller reference, if
// that is of the owner kind the watch serves.
func (r *watchRun) controllerOf(obj runtime.Object) (string, *metav1.OwnerReference) {
	a, err := meta.Accessor(obj)
	if err != nil {
		return "", nil
	}
	ref := metav1.GetControllerOfNoCopy(a)
	if ref == nil {
		return "", nil
	}
	gv, err := schema.ParseGroupVersion(ref.APIVersion)
	if err != nil || gv.Group != r.w.cfg.ownerOf.Group || ref.Kind != r.w.cfg.ownerOf.Kind {
		return "", nil
	}
	return a.GetNamespace(), ref
}

// enqueueOwner puts the owner that ref names, for an object in namespace,
// on the owner watches.
func (r *watchRun) enqueueOwner(namespace string, ref *metav1.OwnerReference) {
	for _, ow := range r.owners {
		owr := ow.run()
		if owr == nil {
			continue
		}
		key := ref.Name
		if namespace != "" && ow.namespaced() {
			key = namespace + "/" + ref.Name
		}
		owr.tracker.touch(key)
		owr.queue.Add(key)
	}
}

// namespaced reports whether the watched kind is namespaced, asking
// discovery when the watch has not resolved it yet.
func (w *watch) namespaced() bool {
	if r := w.run(); r != nil && r.synced.Load() {
		return r.mapping.Scope.Name() != meta.RESTScopeNameRoot
	}
	m, err := w.op.RESTMapping(w.gvk)
	if err != nil {
		return true
	}
	return m.Scope.Name() != meta.RESTScopeNameRoot
}

// work takes keys until the queue shuts down. Once ctx (the term's) ends
// it only drains the queue without handling: no handling starts after the
// term, and shutdown waits for handlings in flight, not for the backlog.
func (r *watchRun) work(ctx context.Context) {
	for {
		key, quit := r.queue.Get()
		if quit {
			return
		}
		if ctx.Err() == nil {
			r.process(ctx, key)
		}
		r.queue.Done(key)
	}
}

// process handles one key against the latest cached state.
func (r *watchRun) process(ctx context.Context, key string) {
	w, o := r.w, r.w.op
	typ, _ := r.tracker.take(key)
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	log := o.cfg.log.WithFields(logrus.Fields{
		"watch": w.name, "namespace": ns, "name": name,
		"handling": fmt.Sprintf("%x", o.handlings.Add(1)),
	})

	var (
		ev    Event
		final runtime.Object
	)
	cached, exists, err := r.informer.GetIndexer().GetByKey(key)
	switch {
	case err != nil:
		log.WithError(err).Error("cache lookup failed")
		r.tracker.restore(key, typ)
		r.queue.AddRateLimited(key)
		return
	case exists:
		if typ == "" || typ == EventDelete {
			typ = EventUpdate
		}
		ev = Event{Object: cached.(runtime.Object).DeepCopyObject(), Watch: w.name, Type: typ}
	default:
		f, ok := r.tracker.finalState(key)
		if !ok {
			// Gone, and its delete was handled or filtered out.
			r.queue.Forget(key)
			return
		}
		final = f
		ev = Event{Object: f.DeepCopyObject(), Deleted: true, Watch: w.name, Type: r.whyGone(ctx, log, ns, name, f)}
		typ = EventDelete
	}

	result, herr := r.call(withOperator(withLogger(ctx, log), o), log, ev)
	o.hmetrics.handled.WithLabelValues(w.name, result).Inc()
	if result != resultError && result != resultPanic {
		r.tracker.noFailure(key)
	}
	switch result {
	case resultSuccess:
		r.queue.Forget(key)
		r.tracker.forget(key, final)
	case resultRequeueAfter:
		r.tracker.restore(key, typ)
		r.requeue(log, key, herr)
	case resultTerminal:
		log.WithError(herr).Error("handler failed with a terminal error; not retrying")
		r.queue.Forget(key)
		r.tracker.forget(key, final)
	default:
		r.retry(log, key, typ, final, herr)
	}
}

// requeue handles a RequeueAfter(d). A positive d is a plain delay that
// resets the key's backoff. A d <= 0 goes through the watch's rate limiter
// without resetting it, so a handler that keeps asking for an immediate
// requeue backs off instead of spinning.
func (r *watchRun) requeue(log logrus.FieldLogger, key string, herr error) {
	var ra *requeueAfter
	_ = asRequeue(herr, &ra)
	if ra.after <= 0 {
		r.queue.AddRateLimited(key)
		log.WithField("after", ra.after).Debug("requeued through the rate limiter")
		return
	}
	r.queue.Forget(key)
	r.queue.AddAfter(key, ra.after)
	log.WithField("after", ra.after).Debug("requeued")
}

// retry requeues a key whose handling failed, with backoff, unless it
// failed its first handling and WithMaxRetries retries in a row.
func (r *watchRun) retry(log logrus.FieldLogger, key string, typ EventType, final runtime.Object, herr error) {
	retries := r.tracker.failed(key) - 1
	log = log.WithError(herr).WithField("retries", retries)
	if max := r.w.op.cfg.maxRetries; max > 0 && retries >= max {
		log.Error("handler failed; giving up after max retries")
		r.tracker.noFailure(key)
		r.queue.Forget(key)
		r.tracker.forget(key, final)
		return
	}
	log.Warn("handler failed; retrying with backoff")
	r.tracker.restore(key, typ)
	r.queue.AddRateLimited(key)
}

// whyGone tells a deleted object from one that left the watch's selectors:
// the API server reports both to the watch as a delete. Only watches with
// selectors ask it, with one live read of the object's metadata. When the
// read fails, the object is reported deleted, as the informer sees it.
func (r *watchRun) whyGone(ctx context.Context, log logrus.FieldLogger, ns, name string, final runtime.Object) EventType {
	if r.w.cfg.labelSelector == "" && r.w.cfg.fieldSelector == "" {
		return EventDelete
	}
	known, err := meta.Accessor(final)
	if err != nil {
		return EventDelete
	}
	live, err := r.w.op.metadata.Resource(r.mapping.Resource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err), err != nil && ctx.Err() != nil:
		// Gone, or shutting down: the handler's context is cancelled anyway.
		return EventDelete
	case err != nil:
		log.WithError(err).Warn("cannot tell whether the object was deleted or left the watch's selectors; reporting it deleted")
		return EventDelete
	case live.GetUID() != known.GetUID():
		// Deleted, and another object of the same name exists now.
		return EventDelete
	}
	return EventLeftSelection
}

// call runs the handler with metrics and panic recovery, and classifies
// the outcome.
func (r *watchRun) call(ctx context.Context, log logrus.FieldLogger, ev Event) (result string, err error) {
	hm, name := r.w.op.hmetrics, r.w.name
	active := hm.active.WithLabelValues(name)
	active.Inc()
	start := time.Now()
	defer func() {
		hm.duration.WithLabelValues(name).Observe(time.Since(start).Seconds())
		active.Dec()
		if p := recover(); p != nil {
			log.WithField("panic", p).WithField("stack", string(debug.Stack())).Error("handler panicked; retrying")
			result, err = resultPanic, fmt.Errorf("handler panic: %v", p)
		}
	}()
	err = r.handler.Handle(ctx, ev)
	var ra *requeueAfter
	switch {
	case err == nil:
		return resultSuccess, nil
	case asRequeue(err, &ra):
		return resultRequeueAfter, err
	case IsTerminal(err):
		return resultTerminal, err
	}
	return resultError, err
}
