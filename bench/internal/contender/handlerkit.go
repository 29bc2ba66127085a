package contender

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/handlerkit/handlerkit/bench/internal/probe"
	"github.com/handlerkit/handlerkit/bench/internal/workload"
	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	jmxinformers "github.com/handlerkit/handlerkit/pkg/generated/informers/externalversions"
	"github.com/handlerkit/handlerkit/pkg/sdk"
	"github.com/handlerkit/handlerkit/pkg/sdk/action"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// runHandlerkit runs an sdk.Operator the way docs/sdk.md shows: the
// generated informer factory for the CRD, a scheme that knows its types,
// one Watch and one Handler.
func runHandlerkit(ctx context.Context, cfg *rest.Config, spec Spec, rec *probe.Recorder) error {
	scheme, err := newScheme()
	if err != nil {
		return err
	}
	jmxClient, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	log := logrus.New()
	log.SetOutput(os.Stderr)
	log.SetLevel(logrus.WarnLevel)
	if verbose() {
		log.SetLevel(logrus.DebugLevel)
	}
	op, err := sdk.New(cfg,
		sdk.WithScheme(scheme),
		sdk.WithRegisterer(prometheus.NewRegistry()),
		sdk.WithMetricsAddr("0"),
		sdk.WithLogger(log),
		sdk.WithInformerFactory(func(ns string, resync time.Duration, tweak func(*metav1.ListOptions)) sdk.InformerFactory[jmxinformers.GenericInformer] {
			return jmxinformers.NewSharedInformerFactoryWithOptions(jmxClient, resync,
				jmxinformers.WithNamespace(ns), jmxinformers.WithTweakListOptions(tweak))
		}),
	)
	if err != nil {
		return err
	}
	opts := []sdk.WatchOption{sdk.WithNumWorkers(spec.Workers)}
	switch spec.Variant {
	case VariantKeepManagedFields:
		opts = append(opts, sdk.WithManagedFields())
	case VariantMetadataOnly:
		opts = append(opts, sdk.WithMetadataOnly())
	}
	if spec.Kind == KindPods {
		err = op.Watch("v1", "Pod", spec.Namespace, 0, opts...)
	} else {
		err = op.Watch(jmxv1alpha1.SchemeGroupVersion.String(), "PrometheusJmxExporter", spec.Namespace, 0, opts...)
	}
	if err != nil {
		return err
	}
	if spec.Handler == HandlerNoop {
		op.Handle(sdk.HandlerFunc(func(_ context.Context, e sdk.Event) error {
			if m, err := meta.Accessor(e.Object); err == nil && !e.Deleted {
				rec.Called(m.GetName(), probe.Stamp(m.GetAnnotations()))
				rec.Handled(m.GetName(), m.GetGeneration())
			}
			return nil
		}))
		return op.Run(ctx)
	}
	// The ConfigMaps are watched only so that query serves them from the
	// cache; their events are dropped before they are queued.
	dropAll := func(runtime.Object, sdk.Event) bool { return false }
	if err := op.Watch("v1", "ConfigMap", spec.Namespace, 0, sdk.WithPredicate(dropAll)); err != nil {
		return err
	}
	op.Handle(handlerkitRealistic{read: query.For(op), write: action.For(op), rec: rec})
	return op.Run(ctx)
}

// handlerkitRealistic is the realistic handler written against pkg/sdk.
type handlerkitRealistic struct {
	read  *query.Reader
	write *action.Writer
	rec   *probe.Recorder
}

func (h handlerkitRealistic) Handle(ctx context.Context, e sdk.Event) error {
	pje, ok := e.Object.(*jmxv1alpha1.PrometheusJmxExporter)
	if !ok {
		return sdk.Terminal(fmt.Errorf("unexpected %T", e.Object))
	}
	if e.Deleted {
		return nil
	}
	h.rec.Called(pje.Name, probe.Stamp(pje.Annotations))
	var cm *corev1.ConfigMap
	if name := workload.ConfigMapNameOf(pje); name != "" {
		cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: pje.Namespace, Name: name}}
		if err := h.read.Get(ctx, cm); apierrors.IsNotFound(err) {
			cm = nil
		} else if err != nil {
			return err
		}
	}
	if status, changed := workload.DesiredStatus(pje, cm); changed {
		patch, err := workload.StatusPatch(status)
		if err != nil {
			return sdk.Terminal(err)
		}
		if err := h.write.Patch(ctx, pje, action.MergePatch, patch, action.WithSubresource("status")); err != nil {
			h.rec.Failed()
			return err
		}
	}
	h.rec.Handled(pje.Name, pje.Generation)
	return nil
}
