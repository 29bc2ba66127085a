package operator

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// configMaps holds the data of the ConfigMaps that exporters read, and of
// no other. The ConfigMaps watch (watchConfigMaps) caches only each
// ConfigMap's identity and resourceVersion (metadata only, trimmed by
// configMapIdentity): a namespace's ConfigMaps can weigh far more than the
// operator's own memory (Helm releases, dashboards, CA bundles, each up to
// 1 MiB), and the operator reads a few. The watch still wakes the exporters
// that read a ConfigMap when it changes; get reads its data from the API
// server once per resourceVersion and answers from memory until the
// resourceVersion in the watch's cache moves on.
type configMaps struct {
	read *query.Reader
	mu   sync.Mutex
	// data maps namespace/name to the ConfigMap last read from the API
	// server: only ConfigMaps an exporter read, each dropped when it is
	// deleted or when a change finds no exporter reading it.
	data map[string]*corev1.ConfigMap
}

func newConfigMaps(read *query.Reader) *configMaps {
	return &configMaps{read: read, data: map[string]*corev1.ConfigMap{}}
}

// get returns the ConfigMap namespace/name, for reading only (its maps are
// shared with later calls). When the watch's cache runs (the leader), a
// ConfigMap it does not hold is NotFound without a request, and one whose
// resourceVersion get read last is answered from memory; otherwise (a
// ConfigMap that changed, or a replica that does not lead answering the
// admission webhook) it is read from the API server.
func (c *configMaps) get(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error) {
	key := namespace + "/" + name
	var m metav1.PartialObjectMetadata
	m.APIVersion, m.Kind = "v1", "ConfigMap"
	m.Namespace, m.Name = namespace, name
	watched := false
	switch err := c.read.Get(ctx, &m, query.FromWatch(watchConfigMaps)); {
	case apierrors.IsNotFound(err):
		c.forget(key)
		return nil, err
	case err == nil:
		watched = true
		c.mu.Lock()
		cm, ok := c.data[key]
		c.mu.Unlock()
		if ok && cm.ResourceVersion == m.ResourceVersion {
			return cm, nil
		}
	}
	cm := &corev1.ConfigMap{}
	cm.Namespace, cm.Name = namespace, name
	if err := c.read.Get(ctx, cm, query.Live()); err != nil {
		if apierrors.IsNotFound(err) {
			c.forget(key)
		}
		return nil, err
	}
	if watched {
		// Only what loadConfig reads is kept.
		kept := &corev1.ConfigMap{Data: cm.Data, BinaryData: cm.BinaryData}
		kept.Namespace, kept.Name, kept.ResourceVersion = cm.Namespace, cm.Name, cm.ResourceVersion
		c.mu.Lock()
		c.data[key] = kept
		c.mu.Unlock()
	}
	return cm, nil
}

// forget drops the data of the ConfigMap namespace/name.
func (c *configMaps) forget(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.data, key)
}

// held is how many ConfigMaps' data are held.
func (c *configMaps) held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.data)
}

// configMapIdentity is the ConfigMaps watch's transform: of a ConfigMap's
// metadata it keeps what get and the exporters' index read (namespace,
// name, UID, resourceVersion), not its labels and annotations, which can
// hold the whole ConfigMap again (kubectl apply's last-applied
// configuration).
func configMapIdentity(obj runtime.Object) (runtime.Object, error) {
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return obj, nil
	}
	out := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta}
	out.Namespace, out.Name, out.UID, out.ResourceVersion = m.Namespace, m.Name, m.UID, m.ResourceVersion
	out.DeletionTimestamp = m.DeletionTimestamp
	return out, nil
}
