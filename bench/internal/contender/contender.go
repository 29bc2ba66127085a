// Package contender holds the four controller designs the benchmark
// compares, each doing the same work on the same objects:
//
//   - handlerkit: pkg/sdk's Operator (Watch, Handle, Run; query and action).
//   - controller-runtime: a manager and a Reconciler.
//   - handwritten: a sample-controller loop (informer, named workqueue,
//     lister, workers), the ceiling for client-go designs.
//   - raw-watch: one watch stream whose events are only counted, the limit
//     the API server allows. It caches nothing and handles nothing.
//
// Every contender reports to a probe.Recorder: Called when its handler
// starts on an object, Handled when it has finished the object's work.
package contender

import (
	"context"
	"fmt"
	"os"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/bench/internal/probe"
	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
)

// The contenders' names.
const (
	RawWatch          = "raw-watch"
	Handwritten       = "handwritten"
	Handlerkit        = "handlerkit"
	ControllerRuntime = "controller-runtime"
)

// The kinds a contender can watch.
const (
	// KindExporters is PrometheusJmxExporters, a custom resource.
	KindExporters = "exporters"
	// KindPods is Pods, for the memory figures.
	KindPods = "pods"
)

// The handlers a contender can run.
const (
	// HandlerNoop records the object and returns.
	HandlerNoop = "noop"
	// HandlerRealistic reads the ConfigMap the exporter names from the
	// cache and, when workload.DesiredStatus says so, merge-patches the
	// exporter's status subresource (workload.StatusPatch).
	HandlerRealistic = "realistic"
)

// Variants of a contender's defaults, for like-for-like rows.
const (
	// VariantDefault is each contender's defaults. controller-runtime's
	// include its priority queue (on by default since v0.23), which the
	// contender pins on explicitly.
	VariantDefault = ""
	// VariantKeepManagedFields is handlerkit with sdk.WithManagedFields:
	// like controller-runtime's default cache, it keeps managedFields.
	VariantKeepManagedFields = "keep-managedfields"
	// VariantMetadataOnly is handlerkit with sdk.WithMetadataOnly, or
	// controller-runtime with builder.OnlyMetadata.
	VariantMetadataOnly = "metadata-only"
	// VariantStripManagedFields is controller-runtime with
	// cache.TransformStripManagedFields() as the cache's DefaultTransform:
	// like handlerkit's default, it strips managedFields.
	VariantStripManagedFields = "strip-managedfields"
	// VariantFIFOQueue is controller-runtime with its priority queue off
	// (controller.Options.UsePriorityQueue false): the plain rate-limited
	// workqueue the other contenders use.
	VariantFIFOQueue = "fifo-queue"
)

// variantsOf lists the variants each contender runs.
var variantsOf = map[string][]string{
	Handlerkit:        {VariantDefault, VariantKeepManagedFields, VariantMetadataOnly},
	ControllerRuntime: {VariantDefault, VariantMetadataOnly, VariantStripManagedFields, VariantFIFOQueue},
	Handwritten:       {VariantDefault},
	RawWatch:          {VariantDefault},
}

// Spec says what one contender process runs.
type Spec struct {
	Contender string `json:"contender"`
	Variant   string `json:"variant,omitempty"`
	Kind      string `json:"kind"`
	Handler   string `json:"handler"`
	Workers   int    `json:"workers"`
	Namespace string `json:"namespace"`
	Objects   int    `json:"objects"`
}

// Validate reports whether the contender can run spec.
func (s Spec) Validate() error {
	switch {
	case !slices.Contains([]string{RawWatch, Handwritten, Handlerkit, ControllerRuntime}, s.Contender):
		return fmt.Errorf("contender: unknown contender %q", s.Contender)
	case s.Kind != KindExporters && s.Kind != KindPods:
		return fmt.Errorf("contender: unknown kind %q", s.Kind)
	case s.Handler != HandlerNoop && s.Handler != HandlerRealistic:
		return fmt.Errorf("contender: unknown handler %q", s.Handler)
	case s.Handler == HandlerRealistic && (s.Kind != KindExporters || s.Contender == RawWatch):
		return fmt.Errorf("contender: the realistic handler runs on exporters, in contenders that handle")
	case !slices.Contains(variantsOf[s.Contender], s.Variant):
		return fmt.Errorf("contender: %s has no variant %q", s.Contender, s.Variant)
	case s.Variant == VariantMetadataOnly && s.Handler == HandlerRealistic:
		return fmt.Errorf("contender: the realistic handler needs full objects")
	case s.Namespace == "" || s.Objects <= 0 || s.Workers <= 0:
		return fmt.Errorf("contender: namespace, objects and workers are required")
	}
	return nil
}

// Run runs the contender spec names until ctx ends, reporting to rec. cfg
// is used as it is: the caller sets QPS, burst and request counting.
func Run(ctx context.Context, cfg *rest.Config, spec Spec, rec *probe.Recorder) error {
	if err := spec.Validate(); err != nil {
		return err
	}
	switch spec.Contender {
	case RawWatch:
		return runRawWatch(ctx, cfg, spec, rec)
	case Handwritten:
		return runHandwritten(ctx, cfg, spec, rec)
	case Handlerkit:
		return runHandlerkit(ctx, cfg, spec, rec)
	default:
		return runControllerRuntime(ctx, cfg, spec, rec)
	}
}

// verbose reports whether the contender should log everything (see
// session.EnvVerbose).
func verbose() bool { return os.Getenv("HANDLERKIT_BENCH_VERBOSE") != "" }

// newScheme knows the built-in kinds and PrometheusJmxExporter.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	if err := jmxv1alpha1.AddToScheme(s); err != nil {
		return nil, err
	}
	return s, nil
}
