package operator

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	corev1 "k8s.io/api/core/v1"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// selectorRef is what deciding which exporters select a pod needs of one
// exporter: who it is, how old, whether it is going, and its selector,
// parsed.
type selectorRef struct {
	namespace, name string
	uid             types.UID
	created         metav1.Time
	deleting        bool
	// selector is nil when the exporter selects no pod (no selector, an
	// empty one, or one that does not parse).
	selector labels.Selector
	// resourceVersion is the exporter's, when this was read.
	resourceVersion string
}

// refOf reads ex's selectorRef.
func refOf(ex *jmxv1alpha1.PrometheusJmxExporter) *selectorRef {
	ref := &selectorRef{namespace: ex.Namespace, name: ex.Name, uid: ex.UID, created: ex.CreationTimestamp,
		deleting: ex.DeletionTimestamp != nil, resourceVersion: ex.ResourceVersion}
	if ex.Spec.Selector != nil {
		if sel, err := metav1.LabelSelectorAsSelector(ex.Spec.Selector); err == nil && !sel.Empty() {
			ref.selector = sel
		}
	}
	return ref
}

// selects says whether the exporter selects pod (one being deleted selects
// none).
func (s *selectorRef) selects(pod *corev1.Pod) bool {
	return !s.deleting && s.selector != nil && s.selector.Matches(labels.Set(pod.Labels))
}

// ownerOf returns the exporter that injects pod: of all exporters whose
// selector matches it, the oldest (then the first by name).
func ownerOf(pod *corev1.Pod, refs []*selectorRef) *selectorRef {
	var owner *selectorRef
	for _, ref := range refs {
		if !ref.selects(pod) {
			continue
		}
		if owner == nil || ref.created.Before(&owner.created) || ref.created.Equal(&owner.created) && ref.name < owner.name {
			owner = ref
		}
	}
	return owner
}

// exporterSelectors keeps the selectorRef of every exporter read, for the
// resourceVersion read. Every pod event and every look at an exporter asks
// which exporters of the namespace select a pod; decoding each exporter
// for that, on every event, cost O(exporters) each time: with 1,000
// exporters of 10 pods in one namespace the operator spent its single
// worker on it and restarts waited 100 s to be injected (docs/performance.md,
// The operator at scale). Now only exporters that changed since they were
// last read are decoded. Its zero value is ready to use.
type exporterSelectors struct {
	mu   sync.Mutex
	byNS map[string]map[string]*selectorRef // namespace → name → ref
}

// of returns the selectorRefs of namespace ns's exporters, read through
// read (the exporters' cache when it runs, else the API server).
func (s *exporterSelectors) of(ctx context.Context, read *query.Reader, ns string) ([]*selectorRef, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byNS == nil {
		s.byNS = map[string]map[string]*selectorRef{}
	}
	known := s.byNS[ns]
	seen := map[string]bool{}
	// Chosen by metadata before anything is decoded: only the exporters
	// that are new or changed since they were read.
	changed := query.WhereMeta(func(m metav1.Object) bool {
		seen[m.GetName()] = true
		ref, ok := known[m.GetName()]
		return !ok || ref.resourceVersion != m.GetResourceVersion() || ref.uid != m.GetUID()
	})
	var list jmxv1alpha1.PrometheusJmxExporterList
	if err := read.List(ctx, ns, &list, changed); err != nil {
		return nil, err
	}
	next := make(map[string]*selectorRef, len(seen))
	for name := range seen {
		if ref, ok := known[name]; ok {
			next[name] = ref // unchanged, or replaced below
		}
	}
	for i := range list.Items {
		next[list.Items[i].Name] = refOf(&list.Items[i])
	}
	s.byNS[ns] = next // the exporters not seen are deleted
	refs := make([]*selectorRef, 0, len(next))
	for _, ref := range next {
		refs = append(refs, ref)
	}
	return refs, nil
}
