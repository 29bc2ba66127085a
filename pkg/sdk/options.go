package sdk

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
)

// Defaults used by New when no option overrides them.
const (
	// DefaultMetricsAddr is where the metrics and probe server listens.
	DefaultMetricsAddr = ":8383"
	// DefaultCacheSyncTimeout bounds the wait for a watch's first list.
	DefaultCacheSyncTimeout = 2 * time.Minute
	// DefaultGracefulTimeout bounds how long Run waits for running handlers
	// after its context ends.
	DefaultGracefulTimeout = 30 * time.Second
	// DefaultBaseDelay is the first retry delay of a failing key; it doubles
	// on every further failure.
	DefaultBaseDelay = 5 * time.Millisecond
	// DefaultMaxDelay caps the per-key retry delay.
	DefaultMaxDelay = 1000 * time.Second
	// DefaultQPS is the steady rate of the retry bucket shared by all keys of
	// a watch.
	DefaultQPS = 10
	// DefaultBurst is the size of that bucket.
	DefaultBurst = 100
	// DefaultClientQPS is the steady rate of requests of the Operator's
	// clients when the rest.Config leaves QPS at zero, as
	// rest.InClusterConfig does; client-go would use 5. It matches
	// kubectl's default: the API server's priority and fairness protects
	// it, and a busy operator's writes should not queue behind a client
	// limit. WithClientRateLimit overrides it.
	DefaultClientQPS = 50
	// DefaultClientBurst is the burst of the Operator's clients when the
	// rest.Config leaves Burst at zero; client-go would use 10.
	DefaultClientBurst = 100
)

// releaseTimeout bounds the Elector's Release call at the end of Run (docs/sdk.md, "The leadership contract").
const releaseTimeout = 10 * time.Second

// Elector gates event handling on leadership. pkg/leader implements it.
//
// Leadership is a two-phase contract: Lead acquires, Release gives up. Run
// calls Release only after its handlers have returned (or the graceful
// timeout ran out), so that a stand-by never leads while a handler of this
// replica still runs. An Elector must therefore keep leading (renewing a
// lease, keeping a lock) after Lead's ctx ends, until Release is called or
// leadership is lost.
type Elector interface {
	// Lead blocks until this replica leads or ctx ends; ctx bounds only the
	// wait. The returned context ends when leadership is lost (a lease that
	// could not be renewed, a lock deleted by hand) or Release is called;
	// it does not end with ctx.
	Lead(ctx context.Context) (context.Context, error)
	// Release stops renewing and gives up what Lead acquired. Run calls it
	// once after every Lead call, whether Lead succeeded, failed or was
	// interrupted, and whether Run ends with or without an error, so it
	// must be safe to call when nothing is held. ctx bounds its requests.
	Release(ctx context.Context) error
	// Healthy reports the elector's own health, served on /healthz: nil
	// when it works, otherwise why not (for example a leader that has not
	// renewed its lease for longer than it may).
	Healthy() error
}

// Option configures an Operator in New.
type Option func(*config)

type config struct {
	scheme          *runtime.Scheme
	log             logrus.FieldLogger
	registerer      prometheus.Registerer
	gatherer        prometheus.Gatherer
	metricsAddr     string
	elector         Elector
	factories       []factoryConstructor
	syncTimeout     time.Duration
	gracefulTimeout time.Duration
	retry           retryPolicy
	limiter         func() workqueue.TypedRateLimiter[string]
	maxRetries      int
	discoveryMin    time.Duration
	discoveryMax    time.Duration
	clientLimit     *clientRateLimit
	eventSource     string
	noKlogRouting   bool
	readyChecks     []func() error
}

// WithScheme sets the scheme that decides which kinds are delivered as typed
// objects. The default is client-go's kubernetes/scheme.Scheme; add your CRD
// types to a scheme of your own and pass it here.
func WithScheme(s *runtime.Scheme) Option { return func(c *config) { c.scheme = s } }

// WithLogger sets the logger. The default is logrus.StandardLogger().
func WithLogger(l logrus.FieldLogger) Option { return func(c *config) { c.log = l } }

// WithRegisterer sets where the framework's metrics are registered. The
// default is prometheus.DefaultRegisterer.
func WithRegisterer(r prometheus.Registerer) Option { return func(c *config) { c.registerer = r } }

// WithGatherer sets what /metrics serves. The default is the registerer when
// it is also a Gatherer (as a *prometheus.Registry is), else
// prometheus.DefaultGatherer.
func WithGatherer(g prometheus.Gatherer) Option { return func(c *config) { c.gatherer = g } }

// WithMetricsAddr sets the listen address of the metrics, /healthz and
// /readyz server. The default is DefaultMetricsAddr (":8383"); "0" disables
// the server; "127.0.0.1:0" picks a free loopback port (see MetricsAddr).
func WithMetricsAddr(addr string) Option { return func(c *config) { c.metricsAddr = addr } }

// WithElector makes Run handle events only while e says this replica leads,
// and serves e's health on /healthz. The default is no elector: the replica
// always leads.
func WithElector(e Elector) Option { return func(c *config) { c.elector = e } }

// WithReadyCheck adds a check to /readyz (and Ready): while check returns an
// error, the replica is not ready and /readyz answers 503 with the error's
// text. It applies whether the replica leads or stands by, for the parts of
// an operator that serve on every replica (an admission webhook's
// certificates, say); Ready's own conditions come first. Checks must be
// cheap and safe to call concurrently: every probe calls them.
func WithReadyCheck(check func() error) Option {
	return func(c *config) {
		if check != nil {
			c.readyChecks = append(c.readyChecks, check)
		}
	}
}

// WithCacheSyncTimeout bounds the wait for each watch's cache to sync. The
// default is DefaultCacheSyncTimeout.
func WithCacheSyncTimeout(d time.Duration) Option { return func(c *config) { c.syncTimeout = d } }

// WithGracefulTimeout bounds how long Run waits for running handlers once
// handling ends (Run's context ends, leadership is lost, or a watch fails).
// Their context is cancelled at once; the timeout is how long they get to
// return after that. With an Elector, leadership is released only when they
// have returned or the timeout has run out. The default is
// DefaultGracefulTimeout.
func WithGracefulTimeout(d time.Duration) Option { return func(c *config) { c.gracefulTimeout = d } }

// WithBackoff sets the per-key exponential backoff after handler errors:
// base doubles on every failure up to max. The defaults are DefaultBaseDelay
// and DefaultMaxDelay. It combines with the bucket from WithRetryBucket.
func WithBackoff(base, max time.Duration) Option {
	return func(c *config) { c.retry.base, c.retry.max = base, max }
}

// WithRetryBucket sets the token bucket shared by all retries of one watch,
// so that a storm of failures cannot flood the API server. The defaults are
// DefaultQPS and DefaultBurst.
func WithRetryBucket(qps float64, burst int) Option {
	return func(c *config) { c.retry.qps, c.retry.burst = qps, burst }
}

// WithRateLimiter replaces the whole retry policy with limiters built by
// newLimiter (called once per watch per run). It overrides WithBackoff and
// WithRetryBucket.
func WithRateLimiter(newLimiter func() workqueue.TypedRateLimiter[string]) Option {
	return func(c *config) { c.limiter = newLimiter }
}

// WithMaxRetries limits how often a failing key is retried: after its first
// failed handling it is retried at most n times, so it is handled n+1 times
// in all. If the last retry fails too, the failure is logged and the key is
// forgotten until its next change. Errors and panics count as failures; a
// success, a RequeueAfter or a Terminal error ends the run of failures. The
// framework counts the failures itself, so the limit holds with any
// WithRateLimiter. The default, 0, retries forever.
func WithMaxRetries(n int) Option { return func(c *config) { c.maxRetries = n } }

// WithDiscoveryBackoff sets how often Run retries discovery for a watched
// kind that does not exist yet (a CRD not yet installed): first after min,
// doubling up to max. The defaults are 1s and 1m.
func WithDiscoveryBackoff(min, max time.Duration) Option {
	return func(c *config) { c.discoveryMin, c.discoveryMax = min, max }
}

// WithClientRateLimit sets the client-side rate limit of the Operator's
// clients (every read, write, list and watch they send), overriding the
// rest.Config's QPS and Burst. A negative qps disables client-side
// limiting. Without it, a config that leaves QPS or Burst at zero gets
// DefaultClientQPS or DefaultClientBurst, and values the config sets are
// kept. A config with its own RateLimiter ignores both, as client-go does.
// rest_client_rate_limiter_duration_seconds shows the time requests spend
// waiting on this limit.
func WithClientRateLimit(qps float32, burst int) Option {
	return func(c *config) { c.clientLimit = &clientRateLimit{qps: qps, burst: burst} }
}

// clientRateLimit is the value of WithClientRateLimit.
type clientRateLimit struct {
	qps   float32
	burst int
}

func (l *clientRateLimit) validate() error {
	if l == nil || l.qps < 0 {
		return nil
	}
	if l.qps == 0 || l.burst <= 0 {
		return fmt.Errorf("sdk: invalid client rate limit qps=%v burst=%d", l.qps, l.burst)
	}
	return nil
}

// applyClientRateLimit sets the limit of the Operator's clients in rc.
func applyClientRateLimit(rc *rest.Config, l *clientRateLimit) {
	if l != nil {
		rc.QPS, rc.Burst = l.qps, l.burst
		return
	}
	if rc.QPS == 0 {
		rc.QPS = DefaultClientQPS
	}
	if rc.Burst == 0 {
		rc.Burst = DefaultClientBurst
	}
}

// retryPolicy builds the default limiter from the backoff and bucket values.
type retryPolicy struct {
	base, max time.Duration
	qps       float64
	burst     int
}

func (p retryPolicy) limiter() workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](p.base, p.max),
		&workqueue.TypedBucketRateLimiter[string]{Limiter: rate.NewLimiter(rate.Limit(p.qps), p.burst)},
	)
}
