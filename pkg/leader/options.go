package leader

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/leaderelection"
)

// DefaultLabelKey and DefaultLabelValue make up the label the leader's pod carries: leader=true.
const (
	DefaultLabelKey   = "leader"
	DefaultLabelValue = "true"
)

// DefaultLeaseDuration, DefaultRenewDeadline and DefaultRetryPeriod are the lease mode's defaults, the values
// client-go's own components use.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// DefaultLabelInterval is how often the labeler re-checks the pods even without a watch event.
const DefaultLabelInterval = 5 * time.Second

// DefaultBackoff is how a leader-for-life replica waits between attempts to take the lock: 1s growing by 1.5
// up to 15s, each wait jittered by up to 20% so that replicas do not retry in step.
func DefaultBackoff() wait.Backoff {
	return wait.Backoff{Duration: time.Second, Factor: 1.5, Jitter: 0.2, Cap: 15 * time.Second, Steps: math.MaxInt32}
}

// Option configures NewForLife, NewLease and Become.
type Option func(*config) error

type config struct {
	podName       string
	namespace     string
	labelKey      string
	labelValue    string
	selector      labels.Selector
	registerer    prometheus.Registerer
	logger        logrus.FieldLogger
	backoff       wait.Backoff
	leaseDuration time.Duration
	renewDeadline time.Duration
	retryPeriod   time.Duration
	labelInterval time.Duration
	labeling      bool
	owner         *metav1.OwnerReference // WithOwner
	ownerRefused  atomic.Bool            // the API server refused owner once
}

func newConfig(opts []Option) (*config, error) {
	c := &config{
		podName:       DefaultPodName(),
		namespace:     DefaultNamespace(),
		labelKey:      DefaultLabelKey,
		labelValue:    DefaultLabelValue,
		registerer:    prometheus.DefaultRegisterer,
		logger:        logrus.StandardLogger(),
		backoff:       DefaultBackoff(),
		leaseDuration: DefaultLeaseDuration,
		renewDeadline: DefaultRenewDeadline,
		retryPeriod:   DefaultRetryPeriod,
		labelInterval: DefaultLabelInterval,
		labeling:      true,
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// WithPodName sets the name of this replica's pod. Default: the POD_NAME environment variable, which the
// Deployment sets with the downward API (fieldRef metadata.name).
func WithPodName(name string) Option {
	return func(c *config) error { c.podName = name; return nil }
}

// WithNamespace sets the operator's namespace, where the lock lives. Default: POD_NAMESPACE, else the
// namespace file of the mounted service account.
func WithNamespace(namespace string) Option {
	return func(c *config) error { c.namespace = namespace; return nil }
}

// WithLeaderLabel sets the label the leader's pod carries. Default: leader=true.
func WithLeaderLabel(key, value string) Option {
	return func(c *config) error {
		if errs := validationErrors(key, value); errs != nil {
			return fmt.Errorf("leader: invalid leader label %s=%s: %w", key, value, errs)
		}
		c.labelKey, c.labelValue = key, value
		return nil
	}
}

// WithoutLeaderLabel turns the labeler off: no pod is labelled and the pods RBAC rules are then only "get".
func WithoutLeaderLabel() Option {
	return func(c *config) error { c.labeling = false; return nil }
}

// WithPodSelector sets which pods belong to the same operator, whose stale leader labels the labeler removes.
// Default: the labels of this replica's own pod, minus the leader label and the per-revision labels a workload
// controller adds (pod-template-hash, controller-revision-hash and the like).
func WithPodSelector(selector string) Option {
	return func(c *config) error {
		s, err := labels.Parse(selector)
		if err != nil {
			return fmt.Errorf("leader: invalid pod selector %q: %w", selector, err)
		}
		if s.Empty() {
			return errors.New("leader: the pod selector must not be empty: it would match every pod in the namespace")
		}
		c.selector = s
		return nil
	}
}

// WithRegisterer sets where leader_election_master_status is registered. Default: prometheus.DefaultRegisterer.
// Pass the registerer the operator's metrics server gathers from (sdk.WithRegisterer).
func WithRegisterer(r prometheus.Registerer) Option {
	return func(c *config) error {
		if r == nil {
			return errors.New("leader: nil registerer")
		}
		c.registerer = r
		return nil
	}
}

// WithLogger sets the logger. Default: logrus.StandardLogger().
func WithLogger(l logrus.FieldLogger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("leader: nil logger")
		}
		c.logger = l
		return nil
	}
}

// WithBackoff sets how a leader-for-life replica waits between attempts to take the lock. Default: DefaultBackoff.
func WithBackoff(b wait.Backoff) Option {
	return func(c *config) error {
		if b.Duration <= 0 {
			return errors.New("leader: backoff duration must be positive")
		}
		if b.Steps < 1 {
			b.Steps = math.MaxInt32
		}
		c.backoff = b
		return nil
	}
}

// WithLeaseDurations sets the lease mode's timings: how long a lease is valid without renewal, how long the leader
// keeps retrying a renewal before it gives up, and how often every replica tries (client-go adds up to 120% jitter
// to that period). They must satisfy leaseDuration > renewDeadline > 1.2*retryPeriod. Defaults: 15s, 10s, 2s.
func WithLeaseDurations(leaseDuration, renewDeadline, retryPeriod time.Duration) Option {
	return func(c *config) error {
		// client-go jitters each retry by up to 1.2 periods, and a renewal must fit into the deadline after that.
		if retryPeriod <= 0 || float64(renewDeadline) <= leaderelection.JitterFactor*float64(retryPeriod) || leaseDuration <= renewDeadline {
			return fmt.Errorf("leader: lease durations must satisfy leaseDuration > renewDeadline > 1.2*retryPeriod > 0, got %s, %s, %s",
				leaseDuration, renewDeadline, retryPeriod)
		}
		c.leaseDuration, c.renewDeadline, c.retryPeriod = leaseDuration, renewDeadline, retryPeriod
		return nil
	}
}

// WithLabelInterval sets how often the labeler re-checks the pods besides reacting to watch events.
// Default: DefaultLabelInterval.
func WithLabelInterval(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("leader: label interval must be positive")
		}
		c.labelInterval = d
		return nil
	}
}
