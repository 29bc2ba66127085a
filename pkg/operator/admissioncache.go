package operator

import (
	"context"
	"errors"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	jmxv1alpha1 "github.com/handlerkit/handlerkit/pkg/apis/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/generated/clientset/versioned"
	jmxinformers "github.com/handlerkit/handlerkit/pkg/generated/informers/externalversions/jmx/v1alpha1"
	jmxlisters "github.com/handlerkit/handlerkit/pkg/generated/listers/jmx/v1alpha1"
	"github.com/handlerkit/handlerkit/pkg/sdk/query"
)

// admissionCache holds the served namespaces' exporters for AtStartInput
// on a replica that does not lead (the leader reads the operator's own
// caches), while RunAdmissionCache runs. Its zero value is ready to use.
type admissionCache struct {
	mu      sync.Mutex // never held around an API call
	running bool
	// listers are the synced caches, by the namespace they watch ("" for
	// all).
	listers map[string]jmxlisters.PrometheusJmxExporterLister
}

// lister returns the synced cache that holds namespace ns's exporters.
func (a *admissionCache) lister(ns string) (jmxlisters.PrometheusJmxExporterNamespaceLister, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if l, ok := a.listers[ns]; ok {
		return l.PrometheusJmxExporters(ns), true
	}
	if l, ok := a.listers[""]; ok {
		return l.PrometheusJmxExporters(ns), true
	}
	return nil, false
}

func (a *admissionCache) set(ns string, l jmxlisters.PrometheusJmxExporterLister) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.listers == nil {
		a.listers = map[string]jmxlisters.PrometheusJmxExporterLister{}
	}
	a.listers[ns] = l
}

// RunAdmissionCache keeps, until ctx ends, a cache of the exporters of the
// namespaces the operator serves (one watch per namespace of
// Options.Namespaces, or one of every namespace), which AtStartInput reads
// while this replica does not lead. Without it, such a replica lists the
// namespace's exporters from the API server for every pod created, and a
// burst of creations in a namespace of many exporters waits on those lists
// (issue 41: 200 creations in 10 s beside 300 exporters). Every replica that
// serves the admission webhook runs it; it needs list and watch on exporters
// where the operator serves, which the exporters watch needs already. Until
// a namespace's cache is synced, and on the leader, AtStartInput reads as
// before. It returns nil when ctx ends, and an error when it is already
// running or cannot start.
func (r *Reconciler) RunAdmissionCache(ctx context.Context) error {
	r.admission.mu.Lock()
	if r.admission.running {
		r.admission.mu.Unlock()
		return errors.New("operator: the admission cache is already running")
	}
	r.admission.running = true
	r.admission.mu.Unlock()
	defer func() {
		r.admission.mu.Lock()
		r.admission.running, r.admission.listers = false, nil
		r.admission.mu.Unlock()
	}()
	client, err := versioned.NewForConfig(r.op.RESTConfig())
	if err != nil {
		return fmt.Errorf("operator: the admission cache: %w", err)
	}
	namespaces := servedNamespaces(r.opts.Namespaces)
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, ns := range namespaces {
		inf := jmxinformers.NewPrometheusJmxExporterInformer(client, ns, 0,
			cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		if err := inf.SetTransform(withoutManagedFields); err != nil {
			return fmt.Errorf("operator: the admission cache: %w", err)
		}
		wg.Go(func() { inf.RunWithContext(ctx) })
		wg.Go(func() {
			if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				r.admission.set(ns, jmxlisters.NewPrometheusJmxExporterLister(inf.GetIndexer()))
			}
		})
	}
	<-ctx.Done()
	return nil
}

// withoutManagedFields drops what no reader of the admission cache reads,
// and most of an exporter's size after a few writers.
func withoutManagedFields(obj any) (any, error) {
	if ex, ok := obj.(*jmxv1alpha1.PrometheusJmxExporter); ok {
		ex.ManagedFields = nil
	}
	return obj, nil
}

// admissionLister is the admission cache's lister of namespace ns when
// AtStartInput should read it: the replica does not lead (no cache of the
// operator's own holds ns's exporters) and the admission cache is synced.
func (r *Reconciler) admissionLister(ns string) (jmxlisters.PrometheusJmxExporterNamespaceLister, bool) {
	if _, leads := r.op.CacheFor(jmxv1alpha1.SchemeGroupVersion.WithKind("PrometheusJmxExporter"), ns); leads {
		return nil, false
	}
	return r.admission.lister(ns)
}

// admissionExporters returns the selectorRefs of namespace ns's exporters
// for AtStartInput: from the admission cache when admissionLister says so,
// else as the reconciler reads them.
func (r *Reconciler) admissionExporters(ctx context.Context, ns string) ([]*selectorRef, error) {
	l, ok := r.admissionLister(ns)
	if !ok {
		return r.selectors.of(ctx, r.read, ns)
	}
	return r.selectors.from(ctx, ns, func(_ context.Context, _ string, changed func(metav1.Object) bool) ([]jmxv1alpha1.PrometheusJmxExporter, error) {
		all, err := l.List(labels.Everything())
		if err != nil {
			return nil, err
		}
		var out []jmxv1alpha1.PrometheusJmxExporter
		for _, ex := range all {
			if changed(ex) {
				out = append(out, *ex) // read only: refOf copies what it keeps
			}
		}
		return out, nil
	})
}

// admissionExporter reads ex (its namespace and name set) for AtStartInput,
// as admissionExporters chooses.
func (r *Reconciler) admissionExporter(ctx context.Context, ex *jmxv1alpha1.PrometheusJmxExporter) error {
	l, ok := r.admissionLister(ex.Namespace)
	if !ok {
		return r.read.Get(ctx, ex)
	}
	got, err := l.Get(ex.Name)
	if err != nil {
		return err
	}
	got.DeepCopyInto(ex)
	return nil
}

// readerLister lists exporters through read, decoding only those changed
// says are.
func readerLister(read *query.Reader) exporterLister {
	return func(ctx context.Context, ns string, changed func(metav1.Object) bool) ([]jmxv1alpha1.PrometheusJmxExporter, error) {
		var list jmxv1alpha1.PrometheusJmxExporterList
		if err := read.List(ctx, ns, &list, query.WhereMeta(changed)); err != nil {
			return nil, err
		}
		return list.Items, nil
	}
}
