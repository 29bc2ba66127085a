package contender

import (
	"context"

	"fmt"
	"os"
	"runtime/pprof"
	"strings"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/handlerkit/handlerkit/bench/internal/probe"
	"github.com/handlerkit/handlerkit/bench/internal/workload"
	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

// runControllerRuntime runs a manager with its default cache (full objects,
// managedFields kept, deep copies on read, protobuf for built-in kinds) and
// one controller. Only what would bind ports or need a lease is off:
// metrics, health probes and leader election. The cache is restricted to
// the benchmark's namespace, as every other contender's watch is. Its
// priority queue, on by default, is pinned on (off in VariantFIFOQueue).
// With the realistic handler the controller also Watches ConfigMaps
// (mapped to no request), as handlerkit and the hand-written loop watch
// them, so that their informer starts and syncs with the controller,
// before the first Reconcile, instead of on the first Get.
func runControllerRuntime(ctx context.Context, cfg *rest.Config, spec Spec, rec *probe.Recorder) error {
	logger := logr.Discard()
	if verbose() {
		logger = funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{Verbosity: 1})
	}
	log.SetLogger(logger)
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	cacheOpts := cache.Options{DefaultNamespaces: map[string]cache.Config{spec.Namespace: {}}}
	if spec.Variant == VariantStripManagedFields {
		cacheOpts.DefaultTransform = cache.TransformStripManagedFields()
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                 scheme,
		Logger:                 logger,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		Cache:                  cacheOpts,
	})
	if err != nil {
		return err
	}
	newObject := func() client.Object { return &jmxv1alpha1.PrometheusJmxExporter{} }
	if spec.Kind == KindPods {
		newObject = func() client.Object { return &corev1.Pod{} }
	}
	var forOpts []builder.ForOption
	if spec.Variant == VariantMetadataOnly {
		gvk := corev1.SchemeGroupVersion.WithKind("Pod")
		if spec.Kind != KindPods {
			gvk = jmxv1alpha1.SchemeGroupVersion.WithKind("PrometheusJmxExporter")
		}
		newObject = func() client.Object {
			m := &metav1.PartialObjectMetadata{}
			m.SetGroupVersionKind(gvk)
			return m
		}
		forOpts = append(forOpts, builder.OnlyMetadata)
	}
	var r reconcile.Reconciler = crNoop{client: mgr.GetClient(), newObject: newObject, rec: rec}
	if spec.Handler == HandlerRealistic {
		r = crRealistic{client: mgr.GetClient(), rec: rec}
	}
	b := builder.ControllerManagedBy(mgr).
		Named("bench").
		For(newObject(), forOpts...).
		WithOptions(controller.Options{
			MaxConcurrentReconciles: spec.Workers,
			SkipNameValidation:      ptr.To(true),
			UsePriorityQueue:        ptr.To(spec.Variant != VariantFIFOQueue),
		})
	if spec.Handler == HandlerRealistic {
		b = b.Watches(&corev1.ConfigMap{}, handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request { return nil }))
	}
	err = b.Complete(r)
	if err != nil {
		return err
	}
	err = mgr.Start(ctx)
	if err != nil && strings.Contains(err.Error(), "grace period") {
		// The runnables that overran are still running: record what they
		// wait on, as evidence for the report.
		err = fmt.Errorf("%w (goroutines at the overrun: %s)", err, dumpGoroutines())
	}
	return err
}

// dumpGoroutines writes the process's goroutines, grouped by stack, to a
// file in the temporary directory and returns its name, or why it could
// not.
func dumpGoroutines() string {
	f, err := os.CreateTemp("", "bench-controller-runtime-stop-*.txt")
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if err := pprof.Lookup("goroutine").WriteTo(f, 1); err != nil {
		return err.Error()
	}
	return f.Name()
}

// crNoop reads the object the request names from the cache, as every
// Reconciler starts, and records it.
type crNoop struct {
	client    client.Client
	newObject func() client.Object
	rec       *probe.Recorder
}

func (r crNoop) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := r.newObject()
	if err := r.client.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.rec.Called(obj.GetName(), probe.Stamp(obj.GetAnnotations()))
	r.rec.Handled(obj.GetName(), obj.GetGeneration())
	return reconcile.Result{}, nil
}

// crRealistic is the realistic handler written as a Reconciler.
type crRealistic struct {
	client client.Client
	rec    *probe.Recorder
}

func (r crRealistic) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	pje := &jmxv1alpha1.PrometheusJmxExporter{}
	if err := r.client.Get(ctx, req.NamespacedName, pje); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	r.rec.Called(pje.Name, probe.Stamp(pje.Annotations))
	var cm *corev1.ConfigMap
	if name := workload.ConfigMapNameOf(pje); name != "" {
		cm = &corev1.ConfigMap{}
		if err := r.client.Get(ctx, types.NamespacedName{Namespace: pje.Namespace, Name: name}, cm); apierrors.IsNotFound(err) {
			cm = nil
		} else if err != nil {
			return reconcile.Result{}, err
		}
	}
	if status, changed := workload.DesiredStatus(pje, cm); changed {
		// The same bytes as the other contenders send; client.MergeFrom
		// would compute them from a copy instead.
		patch, err := workload.StatusPatch(status)
		if err != nil {
			return reconcile.Result{}, reconcile.TerminalError(err)
		}
		if err := r.client.Status().Patch(ctx, pje, client.RawPatch(types.MergePatchType, patch)); err != nil {
			r.rec.Failed()
			return reconcile.Result{}, err
		}
	}
	r.rec.Handled(pje.Name, pje.Generation)
	return reconcile.Result{}, nil
}
