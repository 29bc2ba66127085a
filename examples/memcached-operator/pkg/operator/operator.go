// Package operator wires the memcached example operator: the scheme with
// the Memcached types, the watches (Memcached, and the Deployments and Pods
// that wake it), the handler, leader election and the metrics server. main.go
// calls it with flags; the end-to-end test calls it with a ServiceAccount's
// configuration, so both run the same operator.
package operator

import (
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sirupsen/logrus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	cachev1alpha1 "github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/apis/cache/v1alpha1"
	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/generated/clientset/versioned"
	cacheinformers "github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/generated/informers/externalversions"
	"github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/handler"
	"github.com/handlerkit/handlerkit/pkg/leader"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// Name names the operator: its lease, its Events' source and its field manager.
const Name = "memcached-operator"

// WatchName is the name of the Memcached watch, in logs and metric labels
// (handlerkit_handle_total{watch="memcached"}).
const WatchName = "memcached"

// Config configures the operator. The zero value watches every namespace,
// runs DefaultImage, serves metrics on :8383 and does not elect a leader.
type Config struct {
	// Namespaces are the namespaces to watch: one, a comma-separated list,
	// or "" for all.
	Namespaces string
	// Image is the memcached image of the Deployments; "" means
	// handler.DefaultImage.
	Image string
	// MetricsAddr is where /metrics, /healthz and /readyz are served; ""
	// means ":8383", "0" disables the server.
	MetricsAddr string
	// Registry receives the framework's and leader election's metrics; nil
	// means a new registry with the Go and process collectors.
	Registry *prometheus.Registry
	// LeaderElection turns on lease-based leader election: only the replica
	// holding the Lease LeaderElectionID in LeaderElectionNamespace handles
	// events.
	LeaderElection bool
	// LeaderElectionNamespace is where the Lease lives; "" means
	// $POD_NAMESPACE or the ServiceAccount's namespace.
	LeaderElectionNamespace string
	// LeaderElectionID names the Lease; "" means Name.
	LeaderElectionID string
	// Workers is how many Memcached objects are handled at once; 0 means 1.
	Workers int
	// Logger is the operator's logger; nil means logrus's standard logger.
	Logger logrus.FieldLogger
}

// Scheme returns client-go's scheme of the built-in kinds plus the
// Memcached types, so that the framework delivers *v1alpha1.Memcached.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := cachev1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}

// New builds the operator on restConfig; run it with Run. It returns an error,
// never panics, for a bad configuration.
func New(restConfig *rest.Config, c Config) (*sdk.Operator, error) {
	if restConfig == nil {
		return nil, errors.New("operator: nil rest config")
	}
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	reg := c.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	log := c.Logger
	if log == nil {
		log = logrus.StandardLogger()
	}
	metricsAddr := c.MetricsAddr
	if metricsAddr == "" {
		metricsAddr = ":8383"
	}
	// The generated informers decode Memcached objects in the reflector, as
	// client-go's do for built-in kinds; a client of the generated clientset
	// gets the same client-side rate limit as the framework's own.
	crdConfig := rest.CopyConfig(restConfig)
	if crdConfig.QPS == 0 {
		crdConfig.QPS, crdConfig.Burst = sdk.DefaultClientQPS, sdk.DefaultClientBurst
	}
	crdClient, err := versioned.NewForConfig(crdConfig)
	if err != nil {
		return nil, fmt.Errorf("operator: memcached clientset: %w", err)
	}
	opts := []sdk.Option{
		sdk.WithScheme(scheme),
		sdk.WithRegisterer(reg),
		sdk.WithMetricsAddr(metricsAddr),
		sdk.WithLogger(log),
		sdk.WithEventSource(Name),
		sdk.WithInformerFactory(func(ns string, resync time.Duration, tweak func(*metav1.ListOptions)) sdk.InformerFactory[cacheinformers.GenericInformer] {
			return cacheinformers.NewFilteredSharedInformerFactory(crdClient, resync, ns, tweak)
		}),
	}
	if c.LeaderElection {
		id := c.LeaderElectionID
		if id == "" {
			id = Name
		}
		lopts := []leader.Option{leader.WithRegisterer(reg), leader.WithLogger(log)}
		if c.LeaderElectionNamespace != "" {
			lopts = append(lopts, leader.WithNamespace(c.LeaderElectionNamespace))
		}
		elector, err := leader.NewLease(restConfig, id, lopts...)
		if err != nil {
			return nil, err
		}
		opts = append(opts, sdk.WithElector(elector))
	}
	op, err := sdk.New(restConfig, opts...)
	if err != nil {
		return nil, err
	}
	workers := max(c.Workers, 1)
	gv := cachev1alpha1.SchemeGroupVersion.String()
	// The primary watch: every Memcached, each handled by the handler.
	if err := op.Watch(gv, "Memcached", c.Namespaces, 0, sdk.WithName(WatchName), sdk.WithNumWorkers(workers)); err != nil {
		return nil, err
	}
	// Secondary watches only wake the Memcached. A Deployment names it as
	// its controller owner; a pod is owned by a ReplicaSet, so its labels
	// name the Memcached instead. Both caches also answer the handler's
	// reads of Deployments and Pods, without a request to the API server.
	if err := op.Watch("apps/v1", "Deployment", c.Namespaces, 0, sdk.WithOwnerOf(gv, "Memcached")); err != nil {
		return nil, err
	}
	if err := op.Watch("v1", "Pod", c.Namespaces, 0, sdk.WithMapTo(WatchName, handler.PodOwner)); err != nil {
		return nil, err
	}
	op.Handle(&handler.Handler{
		Read:   query.For(op),
		Write:  action.For(op),
		Scheme: op.Scheme(),
		Image:  c.Image,
	})
	return op, nil
}
