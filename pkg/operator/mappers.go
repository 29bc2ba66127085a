package operator

// mappers.go maps pod and ConfigMap events to the exporters to look at.

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// exportersOfPod maps a Pod event to the exporters whose selector matches the
// pod, and the exporter its record names (which must notice a pod that left
// its selection). It reads exporters from the cache.
func (r *Reconciler) exportersOfPod(ctx context.Context, obj runtime.Object) []string {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil
	}
	r.pruneIfGone(ctx, pod)
	var keys []string
	if rec := readRecord(pod); rec.Exporter != "" {
		keys = append(keys, pod.Namespace+"/"+rec.Exporter)
	}
	exporters, err := r.selectors.of(ctx, r.read, pod.Namespace)
	if err != nil {
		return keys
	}
	for _, ref := range exporters {
		if ref.selector != nil && ref.selector.Matches(labels.Set(pod.Labels)) {
			keys = appendOnce(keys, ref.namespace+"/"+ref.name)
		}
	}
	return keys
}

// exportersOfConfigMap maps a ConfigMap event to the exporters that read it,
// through the exporters' index. The ConfigMaps watch holds metadata only,
// so obj is a *metav1.PartialObjectMetadata.
func (r *Reconciler) exportersOfConfigMap(ctx context.Context, obj runtime.Object) []string {
	cm, ok := obj.(metav1.Object)
	if !ok {
		return nil
	}
	var exporters jmxv1alpha1.PrometheusJmxExporterList
	if err := r.read.List(ctx, cm.GetNamespace(), &exporters, query.MatchingIndex(indexConfigMap, cm.GetName())); err != nil {
		return nil
	}
	if len(exporters.Items) == 0 {
		// No exporter reads it (any more): its data, if held, goes.
		r.configMaps.forget(cm.GetNamespace() + "/" + cm.GetName())
	}
	keys := make([]string, 0, len(exporters.Items))
	for _, ex := range exporters.Items {
		keys = append(keys, ex.Namespace+"/"+ex.Name)
	}
	return keys
}
