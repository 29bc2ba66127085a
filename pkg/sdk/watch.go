package sdk

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/handlerkit/handlerkit/pkg/sdk/internal/compact"
)

// watch is one registered Watch call. Its per-run state lives in a
// watchRun so that a second Run starts from a clean slate.
type watch struct {
	op         *Operator
	name       string
	gvk        schema.GroupVersionKind
	namespace  string   // as given to Watch: one namespace, a comma list, or "" for all
	namespaces []string // the namespaces it covers, one informer each; [""] for all
	resync     time.Duration
	cfg        watchConfig

	mu  sync.Mutex
	cur *watchRun

	// metaOnce computes metaOnly, whether the watch's filters read metadata
	// only, once rather than on every notification.
	metaOnce sync.Once
	metaOnly bool
}

// filtersReadMetadataOnly reports whether the watch has no map function and
// only predicates that read metadata alone, so that they may run on cache
// entries without decoding them.
func (w *watch) filtersReadMetadataOnly() bool {
	w.metaOnce.Do(func() { w.metaOnly = w.cfg.mapFn == nil && metadataOnly(w.cfg.predicates) })
	return w.metaOnly
}

// watchRun is the state of a watch during one leadership term.
type watchRun struct {
	w       *watch
	handler Handler
	targets []*watch // the watches a secondary watch enqueues keys on
	queue   workqueue.TypedRateLimitingInterface[string]
	tracker *tracker
	ctx     context.Context // the term's, for map functions

	// mapping, informers and regs are written once by start, before synced
	// is set; readers check synced first.
	mapping   *meta.RESTMapping
	informers []*sharedInformer // one per namespace, in the order of w.namespaces
	regs      []cache.ResourceEventHandlerRegistration
	synced    atomic.Bool
}

// newRun resets the watch for a new leadership term.
func (w *watch) newRun(ctx context.Context, handler Handler, targets []*watch) *watchRun {
	limiter := w.op.cfg.retry.limiter()
	if w.op.cfg.limiter != nil {
		limiter = w.op.cfg.limiter()
	}
	r := &watchRun{
		w:       w,
		handler: handler,
		targets: targets,
		ctx:     withOperator(ctx, w.op),
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

// indexerFor returns the cache that holds the objects of namespace ns ("" for
// cluster-scoped objects).
func (r *watchRun) indexerFor(ns string) (cache.Indexer, bool) {
	for i, wns := range r.w.namespaces {
		if wns == "" || wns == ns {
			return r.informers[i].informer.GetIndexer(), true
		}
	}
	return nil, false
}

// hasSynced reports whether every informer of the run has delivered its
// initial list to this watch's handler.
func (r *watchRun) hasSynced() bool {
	if len(r.regs) == 0 {
		return false
	}
	for _, reg := range r.regs {
		if !reg.HasSynced() {
			return false
		}
	}
	return true
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
	if m.Scope.Name() == meta.RESTScopeNameRoot && r.w.namespace != "" && r.w.namespace != metav1.NamespaceAll {
		return permanentError{fmt.Errorf("sdk: watch %q: %s is cluster-scoped; its namespace must be empty, not %q", r.w.name, r.w.gvk.Kind, r.w.namespace)}
	}
	r.mapping = m
	return nil
}

// start makes the watch read the informers it needs from set, creating
// the ones no other watch has asked for, and registers its handler on each.
// The set starts them.
func (r *watchRun) start(set *informerSet) error {
	w := r.w
	for _, key := range w.keysFor(r.mapping.Resource) {
		si, err := set.informerFor(key, w)
		if err != nil {
			return err
		}
		reg, err := si.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { r.notify(EventAdd, nil, obj) },
			UpdateFunc: func(old, obj any) {
				typ := EventUpdate
				if sameResourceVersion(old, obj) {
					typ = EventResync
				}
				r.notify(typ, old, obj)
			},
			DeleteFunc: func(obj any) { r.notify(EventDelete, nil, obj) },
		})
		if err != nil {
			return fmt.Errorf("sdk: watch %q: add event handler: %w", w.name, err)
		}
		r.informers = append(r.informers, si)
		r.regs = append(r.regs, reg)
	}
	return nil
}

func sameResourceVersion(a, b any) bool {
	am, err1 := meta.Accessor(a)
	bm, err2 := meta.Accessor(b)
	return err1 == nil && err2 == nil && am.GetResourceVersion() == bm.GetResourceVersion()
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
	// Predicates and map functions are user code: they get copies of their
	// own, decoded, never a cache entry. The ready-made predicates read
	// only metadata, which cache entries hold decoded: when they are all
	// there is, they get the entries and nothing is decoded.
	var seen, seenOld runtime.Object
	switch {
	case w.filtersReadMetadataOnly():
		seen = ro
		seenOld, _ = old.(runtime.Object)
	default:
		var ok bool
		if seen, seenOld, ok = r.expand(ro, old); !ok {
			// Unreadable (never seen in practice): skip the filters; the
			// handling reports it and retries.
			if !w.cfg.secondary() {
				r.enqueueKey(typ, ro)
			}
			return
		}
	}
	if len(w.cfg.predicates) > 0 {
		e := Event{Object: seen, Deleted: typ == EventDelete, Watch: w.name, Type: typ}
		for _, p := range w.cfg.predicates {
			if !p(seenOld, e) {
				return
			}
		}
	}
	if w.cfg.secondary() {
		if w.cfg.mapFn != nil {
			r.enqueueMapped(seenOld, seen)
		} else {
			oldObj, _ := old.(runtime.Object)
			r.enqueueMapped(oldObj, ro)
		}
		return
	}
	r.enqueueKey(typ, ro)
}

// expand returns obj and old (which may be nil) decoded, for code that
// must see the Go type, logging and returning false when one cannot be.
func (r *watchRun) expand(obj runtime.Object, old any) (runtime.Object, runtime.Object, bool) {
	d, _, err := compact.Expand(obj)
	var dOld runtime.Object
	if err == nil {
		dOld, _, err = compact.Expand(old) // a nil old stays nil
	}
	if err != nil {
		r.w.op.cfg.log.WithField("watch", r.w.name).WithError(err).Error("cannot decode a cached object")
		return nil, nil, false
	}
	return d, dOld, true
}

// enqueueKey records a change of ro and puts its key on the queue.
func (r *watchRun) enqueueKey(typ EventType, ro runtime.Object) {
	w := r.w
	key, err := cache.MetaNamespaceKeyFunc(ro)
	if err != nil {
		w.op.cfg.log.WithField("watch", w.name).WithError(err).Warn("cannot key object")
		return
	}
	r.tracker.observe(key, typ, ro)
	r.queue.Add(key)
}

// enqueueMapped puts the keys that obj maps to on the target watches, and
// also the keys of old, the state before an update: an owner that lost an
// object, or a selector that no longer matches, must hear of it too.
func (r *watchRun) enqueueMapped(old, obj runtime.Object) {
	seen := map[*watch]map[string]bool{}
	for _, o := range []runtime.Object{obj, old} {
		if o == nil {
			continue
		}
		for _, t := range r.targets {
			for _, key := range r.keysFor(t, o) {
				if seen[t] == nil {
					seen[t] = map[string]bool{}
				}
				if seen[t][key] {
					continue
				}
				seen[t][key] = true
				if err := t.enqueue(key); err != nil {
					r.w.op.cfg.log.WithField("watch", r.w.name).WithError(err).Debug("mapped key not enqueued")
				}
			}
		}
	}
}

// keysFor returns the keys of target that obj maps to: through the map
// function, or through obj's owner references of the owner kind.
func (r *watchRun) keysFor(target *watch, obj runtime.Object) []string {
	if fn := r.w.cfg.mapFn; fn != nil {
		return r.mapKeys(fn, obj)
	}
	a, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	var keys []string
	for _, ref := range a.GetOwnerReferences() {
		if !r.w.cfg.anyOwner && (ref.Controller == nil || !*ref.Controller) {
			continue
		}
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err != nil || gv.Group != r.w.cfg.ownerOf.Group || ref.Kind != r.w.cfg.ownerOf.Kind {
			continue
		}
		key := ref.Name
		if a.GetNamespace() != "" && target.namespaced() {
			key = a.GetNamespace() + "/" + ref.Name
		}
		keys = append(keys, key)
	}
	return keys
}

// mapKeys calls a user's map function, turning a panic into a log line.
func (r *watchRun) mapKeys(fn MapFunc, obj runtime.Object) (keys []string) {
	defer func() {
		if p := recover(); p != nil {
			r.w.op.cfg.log.WithField("watch", r.w.name).WithField("panic", p).
				WithField("stack", string(debug.Stack())).Error("map function panicked; no key enqueued")
			keys = nil
		}
	}()
	return fn(r.ctx, obj)
}

// enqueue puts key on the watch's queue, as a change the handler must look
// at, if the watch is running.
func (w *watch) enqueue(key string) error {
	r := w.run()
	if r == nil {
		return fmt.Errorf("watch %q is not running", w.name)
	}
	r.tracker.touch(key)
	r.queue.Add(key)
	return nil
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
	var (
		cached any
		exists bool
		err    error
	)
	if idx, ok := r.indexerFor(ns); ok {
		cached, exists, err = idx.GetByKey(key)
	}
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
		obj, err := copyOf(cached)
		if err != nil {
			log.WithError(err).Error("cannot decode the cached object; retrying")
			r.tracker.restore(key, typ)
			r.queue.AddRateLimited(key)
			return
		}
		ev = Event{Object: obj, Watch: w.name, Type: typ}
	default:
		f, ok := r.tracker.finalState(key)
		if !ok {
			// Gone, and its delete was handled or filtered out.
			r.queue.Forget(key)
			return
		}
		obj, err := compact.Copy(f)
		if err != nil {
			log.WithError(err).Error("cannot decode the object's final state; retrying")
			r.tracker.restore(key, typ)
			r.queue.AddRateLimited(key)
			return
		}
		final = f
		ev = Event{Object: obj, Deleted: true, Watch: w.name, Type: r.whyGone(ctx, log, ns, name, f)}
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

// copyOf returns a copy of a cached object for the handler to own: decoded
// when the cache keeps it compact.
func copyOf(cached any) (runtime.Object, error) {
	ro, ok := cached.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("the cache holds %T, not a runtime.Object", cached)
	}
	return compact.Copy(ro)
}
