package operator

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// ConfigMapsHeld is how many ConfigMaps' data r holds.
func ConfigMapsHeld(r *Reconciler) int { return r.configMaps.held() }

// CachedConfigMap is what the ConfigMaps watch's cache holds of namespace/name.
func CachedConfigMap(ctx context.Context, r *Reconciler, namespace, name string) (*metav1.PartialObjectMetadata, error) {
	m := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	return m, r.read.Get(ctx, m, query.FromWatch(watchConfigMaps))
}
