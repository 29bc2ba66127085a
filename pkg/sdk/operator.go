package sdk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/handlerkit/handlerkit/pkg/sdk/internal/compact"
	"github.com/handlerkit/handlerkit/pkg/sdk/internal/convert"
)

// Operator watches kinds, queues their keys and runs a Handler on them. Build
// one with New; the package-level Watch, Handle and Run use Default.
type Operator struct {
	cfg        config
	restConfig *rest.Config
	clientset  kubernetes.Interface
	dynamic    dynamic.Interface
	metadata   metadata.Interface
	mapper     *discoveryMapper
	hmetrics   *handlerMetrics
	qmetrics   *queueMetrics
	handlings  atomic.Uint64
	informers  atomic.Pointer[informerSet] // the running term's; nil when none runs
	events     *eventRecorder

	mu      sync.Mutex
	handler Handler
	watches []*watch
	running bool
	state   runState
	addr    string

	discoveryMu    sync.Mutex
	discoveryReset time.Time
}

type runState int

const (
	stateIdle runState = iota
	stateStandby
	stateLeading
	stateStopping
)

// New returns an Operator for the cluster cfg points at. It contacts nothing
// yet: discovery and informers start in Run. Unless WithoutKlogRouting is
// given, it routes klog, the process-wide logger of client-go, into the
// Operator's logger. It may be called while other goroutines use client-go
// and klog: the process-wide hooks it relies on are set by the package's
// init (see "Process-wide state" in the package documentation).
func New(cfg *rest.Config, opts ...Option) (*Operator, error) {
	if cfg == nil {
		return nil, errors.New("sdk: nil rest.Config")
	}
	c := config{
		scheme:          clientgoscheme.Scheme,
		log:             logrus.StandardLogger(),
		registerer:      prometheus.DefaultRegisterer,
		metricsAddr:     DefaultMetricsAddr,
		syncTimeout:     DefaultCacheSyncTimeout,
		gracefulTimeout: DefaultGracefulTimeout,
		retry:           retryPolicy{base: DefaultBaseDelay, max: DefaultMaxDelay, qps: DefaultQPS, burst: DefaultBurst},
		discoveryMin:    time.Second,
		discoveryMax:    time.Minute,
		eventSource:     defaultEventSource(),
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch {
	case c.scheme == nil:
		return nil, errors.New("sdk: nil scheme")
	case c.log == nil:
		return nil, errors.New("sdk: nil logger")
	case c.registerer == nil:
		return nil, errors.New("sdk: nil prometheus registerer")
	case c.syncTimeout <= 0 || c.gracefulTimeout <= 0:
		return nil, errors.New("sdk: cache sync and graceful timeouts must be positive")
	case c.retry.base <= 0 || c.retry.max < c.retry.base:
		return nil, fmt.Errorf("sdk: invalid backoff %s..%s", c.retry.base, c.retry.max)
	case c.retry.qps <= 0 || c.retry.burst <= 0:
		return nil, fmt.Errorf("sdk: invalid retry bucket qps=%v burst=%d", c.retry.qps, c.retry.burst)
	case c.maxRetries < 0:
		return nil, fmt.Errorf("sdk: negative max retries %d", c.maxRetries)
	case c.discoveryMin <= 0 || c.discoveryMax < c.discoveryMin:
		return nil, fmt.Errorf("sdk: invalid discovery backoff %s..%s", c.discoveryMin, c.discoveryMax)
	case c.eventSource == "":
		return nil, errors.New("sdk: empty event source")
	}
	if err := c.clientLimit.validate(); err != nil {
		return nil, err
	}
	if c.gatherer == nil {
		if g, ok := c.registerer.(prometheus.Gatherer); ok {
			c.gatherer = g
		} else {
			c.gatherer = prometheus.DefaultGatherer
		}
	}
	requests, err := newResourceRequests(c.registerer)
	if err != nil {
		return nil, fmt.Errorf("sdk: register client request metrics: %w", err)
	}
	restConfig := rest.CopyConfig(cfg)
	applyClientRateLimit(restConfig, c.clientLimit)
	countRequests(restConfig, requests)
	clientset, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("sdk: clientset: %w", err)
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("sdk: dynamic client: %w", err)
	}
	md, err := metadata.NewForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("sdk: metadata client: %w", err)
	}
	disco, err := discovery.NewDiscoveryClientForConfig(restConfig)
	if err != nil {
		return nil, fmt.Errorf("sdk: discovery client: %w", err)
	}
	hm, err := newHandlerMetrics(c.registerer)
	if err != nil {
		return nil, fmt.Errorf("sdk: register metrics: %w", err)
	}
	qm, err := newQueueMetrics(c.registerer)
	if err != nil {
		return nil, fmt.Errorf("sdk: register workqueue metrics: %w", err)
	}
	registerClientMetrics(c.registerer, c.log)
	if !c.noKlogRouting {
		routeKlog(c.log)
	}
	return &Operator{
		cfg:        c,
		restConfig: restConfig,
		clientset:  clientset,
		dynamic:    dyn,
		metadata:   md,
		mapper:     newDiscoveryMapper(disco),
		hmetrics:   hm,
		qmetrics:   qm,
		events:     newEventRecorder(c.scheme, c.eventSource, clientset.CoreV1(), c.log),
	}, nil
}

// Handle sets the handler for every watch that has no WithHandler of its
// own. A later call replaces an earlier one; calls after Run started take
// effect on the next Run.
func (o *Operator) Handle(h Handler) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.handler = h
}

// Watch registers a watch on kind in apiVersion (for example "apps/v1",
// "Deployment") in namespace: one namespace, a comma-separated list of them
// ("team-a,team-b", as WATCH_NAMESPACE usually holds; one informer per
// namespace behind one view), or "" for all namespaces. Watches of the same
// kind, namespace and selection share one informer and one cache, whatever
// their options (handlers, predicates, owner or mapped sources); only
// WithTransform gives a watch an informer of its own. resyncPeriod re-delivers
// every cached object as an EventResync that often; 0 disables resync.
// Choose hours, not seconds: level-driven handlers are woken by real changes,
// and resync only papers over missed external state. Watches must be
// registered before Run.
func (o *Operator) Watch(apiVersion, kind, namespace string, resyncPeriod time.Duration, opts ...WatchOption) error {
	gv, err := schema.ParseGroupVersion(apiVersion)
	switch {
	case err != nil:
		return fmt.Errorf("sdk: watch %s: invalid apiVersion %q: %w", kind, apiVersion, err)
	case gv.Version == "":
		return fmt.Errorf("sdk: watch %s: apiVersion %q has no version", kind, apiVersion)
	case kind == "":
		return fmt.Errorf("sdk: watch in %q: empty kind", apiVersion)
	case resyncPeriod < 0:
		return fmt.Errorf("sdk: watch %s: negative resync period %s", kind, resyncPeriod)
	}
	wc := watchConfig{workers: 1}
	for _, opt := range opts {
		if opt != nil {
			opt(&wc)
		}
	}
	gvk := gv.WithKind(kind)
	if wc.err != nil {
		return fmt.Errorf("sdk: watch %s: %w", kind, wc.err)
	}
	if wc.workers < 1 {
		return fmt.Errorf("sdk: watch %s: WithNumWorkers(%d): need at least 1", kind, wc.workers)
	}
	if _, err := labels.Parse(wc.labelSelector); err != nil {
		return fmt.Errorf("sdk: watch %s: invalid label selector %q: %w", kind, wc.labelSelector, err)
	}
	if _, err := fields.ParseSelector(wc.fieldSelector); err != nil {
		return fmt.Errorf("sdk: watch %s: invalid field selector %q: %w", kind, wc.fieldSelector, err)
	}
	namespaces, err := parseNamespaces(namespace)
	if err != nil {
		return fmt.Errorf("sdk: watch %s: %w", kind, err)
	}
	if wc.name == "" {
		wc.name = defaultWatchName(gvk, namespace)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running {
		return fmt.Errorf("sdk: watch %q: Watch called while Run is running", wc.name)
	}
	for _, w := range o.watches {
		if w.name == wc.name {
			return fmt.Errorf("sdk: watch name %q already used; give one of them WithName", wc.name)
		}
	}
	w := &watch{op: o, name: wc.name, gvk: gvk, namespace: namespace, namespaces: namespaces, resync: resyncPeriod, cfg: wc}
	workers := wc.workers
	if wc.secondary() {
		// Secondary watches feed their owners' queues and run no workers.
		workers = 0
	}
	o.hmetrics.initWatch(w.name, workers)
	o.qmetrics.initQueue(w.name)
	o.watches = append(o.watches, w)
	return nil
}

// parseNamespaces splits a comma-separated namespace list. "" stands for
// every namespace and cannot be combined with others.
func parseNamespaces(namespace string) ([]string, error) {
	if strings.TrimSpace(namespace) == "" {
		return []string{""}, nil
	}
	var out []string
	for _, ns := range strings.Split(namespace, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" {
			return nil, fmt.Errorf("namespace list %q has an empty entry", namespace)
		}
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			return nil, fmt.Errorf("invalid namespace %q in %q: %s", ns, namespace, strings.Join(msgs, "; "))
		}
		if !slices.Contains(out, ns) {
			out = append(out, ns)
		}
	}
	return out, nil
}

func defaultWatchName(gvk schema.GroupVersionKind, namespace string) string {
	name := strings.ToLower(gvk.Kind)
	if gvk.Group != "" {
		name += "." + gvk.Group
	}
	if namespace != "" {
		name += "/" + namespace
	}
	return name
}

// Ready reports readiness for /readyz: nil while standing by for leadership,
// or while leading with every watch's cache synced, and every check of
// WithReadyCheck passing; otherwise why not.
func (o *Operator) Ready() error {
	o.mu.Lock()
	state, watches := o.state, o.watches
	o.mu.Unlock()
	switch state {
	case stateIdle:
		return errors.New("operator is not running")
	case stateStopping:
		return errors.New("operator is shutting down")
	case stateStandby:
		watches = nil
	}
	for _, w := range watches {
		if !w.isSynced() {
			return fmt.Errorf("watch %q (%s): cache not synced yet", w.name, w.gvk)
		}
	}
	for _, check := range o.cfg.readyChecks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// MetricsAddr returns the address the metrics server is bound to while Run
// runs, and "" before it binds or when the server is disabled.
func (o *Operator) MetricsAddr() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.addr
}

// Registerer returns where the Operator registers its metrics; handlers can
// register theirs there too.
func (o *Operator) Registerer() prometheus.Registerer { return o.cfg.registerer }

// Gatherer returns what the metrics server serves.
func (o *Operator) Gatherer() prometheus.Gatherer { return o.cfg.gatherer }

// Logger returns the Operator's logger.
func (o *Operator) Logger() logrus.FieldLogger { return o.cfg.log }

// Scheme returns the scheme that decides which kinds are typed.
func (o *Operator) Scheme() *runtime.Scheme { return o.cfg.scheme }

// RESTConfig returns a copy of the Operator's client configuration, with
// the client rate limit it uses (see WithClientRateLimit) and the
// round-tripper that counts requests in handlerkit_client_requests_total:
// clients built from it count as the Operator's.
func (o *Operator) RESTConfig() *rest.Config { return rest.CopyConfig(o.restConfig) }

// Clientset returns the typed client for built-in kinds.
func (o *Operator) Clientset() kubernetes.Interface { return o.clientset }

// DynamicClient returns the client the action and query packages use for
// live requests.
func (o *Operator) DynamicClient() dynamic.Interface { return o.dynamic }

// KindOf returns obj's group, version and kind as the Operator understands
// it, with a clear error for nil objects and objects of unknown kind.
func (o *Operator) KindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	return convert.KindOf(o.cfg.scheme, obj)
}

// RESTMapping maps gvk to its resource through discovery. A miss refreshes
// the discovery cache, at most once per DiscoveryResetInterval, so kinds
// installed after start are found.
func (o *Operator) RESTMapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	m, err := o.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil && meta.IsNoMatchError(err) && o.mayResetDiscovery() {
		if rerr := o.mapper.refresh(); rerr != nil {
			return nil, fmt.Errorf("map kind %s: %w", gvk, rerr)
		}
		m, err = o.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		if meta.IsNoMatchError(err) {
			return nil, fmt.Errorf("the server does not serve kind %q in %q: %w", gvk.Kind, gvk.GroupVersion(), err)
		}
		return nil, fmt.Errorf("map kind %s: %w", gvk, err)
	}
	return m, nil
}

// CacheFor returns the synced cache that holds every object of gvk in
// namespace ("" asks for all namespaces), if the running term has one.
// Metadata-only watches, watches with label or field selectors and watches
// with transforms hold only part of the kind, or a rewritten form, and are
// never returned; neither is anything while no term runs (before the first
// sync, while standing by, after Run returned). query uses it to answer
// reads from memory.
//
// Every read through the returned Indexer returns copies the caller owns,
// as every reader of the cache gets (see docs/sdk.md, "What readers get"):
// objects of built-in kinds decoded from their compact form, others
// deep-copied. So a List copies every object it returns: filter by index
// or namespace first when the cache is large.
func (o *Operator) CacheFor(gvk schema.GroupVersionKind, namespace string) (cache.Indexer, bool) {
	set := o.informers.Load()
	if set == nil {
		return nil, false
	}
	idx, ok := set.cacheFor(gvk, namespace)
	return compact.NewView(idx), ok
}

// CacheOfWatch returns the synced cache of the watch named watchName that
// holds its objects in namespace, and the watched kind, if the running term
// has one. Unlike CacheFor it returns the caches of watches with selectors
// and transforms too: what they hold is what the watch selected, as its
// transforms left it. query.FromWatch reads through it. Reads return
// copies the caller owns, as CacheFor's do.
func (o *Operator) CacheOfWatch(watchName, namespace string) (cache.Indexer, schema.GroupVersionKind, bool) {
	set := o.informers.Load()
	if set == nil {
		return nil, schema.GroupVersionKind{}, false
	}
	idx, gvk, ok := set.cacheOfWatch(watchName, namespace)
	return compact.NewView(idx), gvk, ok
}

// Enqueue puts key ("namespace/name", or "name" for cluster-scoped kinds) on
// the queue of the watch named watchName, as if its object had changed: the
// handler runs for it with the object's current state. Use it, for example,
// to refresh a custom resource's status after handling one of its pods. It
// fails when no watch has that name, the watch is secondary, or Run is not
// leading.
func (o *Operator) Enqueue(watchName, key string) error {
	if key == "" {
		return errors.New("sdk: Enqueue: empty key")
	}
	o.mu.Lock()
	var w *watch
	for _, cand := range o.watches {
		if cand.name == watchName {
			w = cand
		}
	}
	o.mu.Unlock()
	switch {
	case w == nil:
		return fmt.Errorf("sdk: Enqueue: no watch named %q", watchName)
	case w.cfg.secondary():
		return fmt.Errorf("sdk: Enqueue: watch %q is secondary and has no queue of its own", watchName)
	}
	if err := w.enqueue(key); err != nil {
		return fmt.Errorf("sdk: Enqueue: %w", err)
	}
	return nil
}

// Enqueue is Operator.Enqueue on the Operator of the handling ctx belongs to
// (sdk.OperatorFrom), else on the Default Operator.
func Enqueue(ctx context.Context, watchName, key string) error {
	o := OperatorFrom(ctx)
	if o == nil {
		var err error
		if o, err = Default(); err != nil {
			return err
		}
	}
	return o.Enqueue(watchName, key)
}
