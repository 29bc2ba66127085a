package contender

import (
	"context"
	"errors"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/handlerkit/handlerkit/bench/internal/probe"
	"github.com/handlerkit/handlerkit/bench/internal/workload"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	jmxinformers "github.com/handlerkit/handlerkit/pkg/generated/informers/externalversions"
	jmxlisters "github.com/handlerkit/handlerkit/pkg/generated/listers/jmx/v1alpha1"
)

// runHandwritten wires the kubernetes/sample-controller design: informer
// factories, a lister, a named rate-limited queue of keys, event handlers
// that only enqueue, and workers running a sync function.
func runHandwritten(ctx context.Context, cfg *rest.Config, spec Spec, rec *probe.Recorder) error {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	jmxClient, err := versioned.NewForConfig(cfg)
	if err != nil {
		return err
	}
	kubeFactory := kubeinformers.NewSharedInformerFactoryWithOptions(kube, 0, kubeinformers.WithNamespace(spec.Namespace))
	jmxFactory := jmxinformers.NewSharedInformerFactoryWithOptions(jmxClient, 0, jmxinformers.WithNamespace(spec.Namespace))
	var (
		informer cache.SharedIndexInformer
		synced   []cache.InformerSynced
		sync     func(ctx context.Context, key string) error
	)
	switch {
	case spec.Kind == KindPods:
		pods := kubeFactory.Core().V1().Pods()
		informer = pods.Informer()
		lister := pods.Lister()
		sync = func(_ context.Context, key string) error {
			ns, name, err := cache.SplitMetaNamespaceKey(key)
			if err != nil {
				return err
			}
			pod, err := lister.Pods(ns).Get(name)
			if apierrors.IsNotFound(err) {
				return nil
			} else if err != nil {
				return err
			}
			rec.Called(pod.Name, probe.Stamp(pod.Annotations))
			rec.Handled(pod.Name, pod.Generation)
			return nil
		}
	case spec.Handler == HandlerNoop:
		exporters := jmxFactory.Jmx().V1alpha1().PrometheusJmxExporters()
		informer = exporters.Informer()
		lister := exporters.Lister()
		sync = func(_ context.Context, key string) error {
			ns, name, err := cache.SplitMetaNamespaceKey(key)
			if err != nil {
				return err
			}
			pje, err := lister.PrometheusJmxExporters(ns).Get(name)
			if apierrors.IsNotFound(err) {
				return nil
			} else if err != nil {
				return err
			}
			rec.Called(pje.Name, probe.Stamp(pje.Annotations))
			rec.Handled(pje.Name, pje.Generation)
			return nil
		}
	default:
		exporters := jmxFactory.Jmx().V1alpha1().PrometheusJmxExporters()
		configMaps := kubeFactory.Core().V1().ConfigMaps()
		informer = exporters.Informer()
		synced = append(synced, configMaps.Informer().HasSynced)
		s := handwrittenRealistic{lister: exporters.Lister(), configMaps: configMaps.Lister(), client: jmxClient, rec: rec}
		sync = s.sync
	}
	c := &handwrittenController{
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "bench"}),
		sync: sync,
	}
	synced = append(synced, informer.HasSynced)
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj any) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	}); err != nil {
		return err
	}
	kubeFactory.Start(ctx.Done())
	jmxFactory.Start(ctx.Done())
	defer kubeFactory.Shutdown()
	defer jmxFactory.Shutdown()
	return c.run(ctx, spec.Workers, synced...)
}

// handwrittenController is sample-controller's Controller, reduced to the
// queue and the workers.
type handwrittenController struct {
	queue workqueue.TypedRateLimitingInterface[string]
	sync  func(ctx context.Context, key string) error
}

func (c *handwrittenController) enqueue(obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	c.queue.Add(key)
}

// run waits for the caches, then runs workers until ctx ends.
func (c *handwrittenController) run(ctx context.Context, workers int, synced ...cache.InformerSynced) error {
	defer c.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		if ctx.Err() != nil {
			return nil
		}
		return errors.New("handwritten: caches did not sync")
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for c.processNextWorkItem(ctx) {
			}
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *handwrittenController) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if err := c.sync(ctx, key); err != nil {
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// handwrittenRealistic is the realistic handler written against listers
// and the generated clientset.
type handwrittenRealistic struct {
	lister     jmxlisters.PrometheusJmxExporterLister
	configMaps corelisters.ConfigMapLister
	client     versioned.Interface
	rec        *probe.Recorder
}

func (h handwrittenRealistic) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return err
	}
	cached, err := h.lister.PrometheusJmxExporters(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		return err
	}
	h.rec.Called(cached.Name, probe.Stamp(cached.Annotations))
	var cm *corev1.ConfigMap
	if cmName := workload.ConfigMapNameOf(cached); cmName != "" {
		cm, err = h.configMaps.ConfigMaps(ns).Get(cmName)
		if apierrors.IsNotFound(err) {
			cm = nil
		} else if err != nil {
			return err
		}
	}
	if status, changed := workload.DesiredStatus(cached, cm); changed {
		patch, err := workload.StatusPatch(status)
		if err != nil {
			return err
		}
		if _, err := h.client.JmxV1alpha1().PrometheusJmxExporters(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
			h.rec.Failed()
			return err
		}
	}
	h.rec.Handled(cached.Name, cached.Generation)
	return nil
}
