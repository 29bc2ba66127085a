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
// last read are decoded.
//
// The webhook asks it for every pod being created, on every replica: a
// replica that does not lead has no cache and lists the namespace's
// exporters from the API server. No lock is held while a list is under way
// (a lock held around it queued a burst of admissions past the webhook's
// timeout, issue 41), and the lists of one namespace are coalesced: at most
// one is under way, and every caller that arrives meanwhile shares the next
// one, which starts once it ends. So a caller waits for at most two lists
// (the one under way and its own), never for a queue of them, and it never
// gets a list that started before it asked. Its zero value is ready to use.
type exporterSelectors struct {
	mu   sync.Mutex
	byNS map[string]*namespaceSelectors
}

// namespaceSelectors is what exporterSelectors keeps of one namespace.
type namespaceSelectors struct {
	// refs are the refs last read, by exporter name.
	refs map[string]*selectorRef
	// running is the list under way, nextList the one the callers that
	// arrived since it started wait for; nil when there is none.
	running, nextList *selectorListing
}

// selectorListing is one list of a namespace's exporters, shared by the
// callers that wait for it.
type selectorListing struct {
	done chan struct{} // closed once refs, err and abandoned are set
	refs []*selectorRef
	err  error
	// abandoned is set when the list failed because the context of the
	// caller that made it ended: the others ask again.
	abandoned bool
}

// exporterLister lists namespace ns's exporters of which changed, told
// their metadata, says true.
type exporterLister func(ctx context.Context, ns string, changed func(metav1.Object) bool) ([]jmxv1alpha1.PrometheusJmxExporter, error)

// of returns the selectorRefs of namespace ns's exporters, read through
// read (the exporters' cache when it runs, else the API server) by a list
// that started after the call. The refs are shared: callers only read them.
func (s *exporterSelectors) of(ctx context.Context, read *query.Reader, ns string) ([]*selectorRef, error) {
	return s.from(ctx, ns, readerLister(read))
}

// from is of with the exporters listed by list.
func (s *exporterSelectors) from(ctx context.Context, ns string, list exporterLister) ([]*selectorRef, error) {
	for {
		s.mu.Lock()
		if s.byNS == nil {
			s.byNS = map[string]*namespaceSelectors{}
		}
		st := s.byNS[ns]
		if st == nil {
			st = &namespaceSelectors{}
			s.byNS[ns] = st
		}
		l := st.nextList
		if l == nil {
			l = &selectorListing{done: make(chan struct{})}
			st.nextList = l
		}
		s.mu.Unlock()
		refs, err := s.await(ctx, list, ns, st, l)
		if err != nil && ctx.Err() == nil && l.abandoned && isDone(l) {
			// The caller that made the list gave up (its own deadline):
			// this one has time left, and asks again.
			continue
		}
		return refs, err
	}
}

// await returns l's result: it makes the list itself when l is next and
// none is under way, and otherwise waits for the list under way to end.
func (s *exporterSelectors) await(ctx context.Context, list exporterLister, ns string, st *namespaceSelectors, l *selectorListing) ([]*selectorRef, error) {
	for {
		s.mu.Lock()
		if st.running == nil && st.nextList == l {
			st.running, st.nextList = l, nil
			known := st.refs // never changed once stored: replaced whole
			s.mu.Unlock()
			refs, next, err := listRefs(ctx, list, ns, known)
			s.mu.Lock()
			st.running = nil
			if err == nil {
				st.refs = next // the exporters not seen are deleted
			}
			// Done before the lock is let go: a caller that finds l
			// neither next nor under way finds it done.
			l.refs, l.err, l.abandoned = refs, err, err != nil && ctx.Err() != nil
			close(l.done)
			s.mu.Unlock()
			return refs, err
		}
		// l waits for the list under way, or is it, or is done.
		wake := l.done
		if st.running != nil {
			wake = st.running.done
		}
		s.mu.Unlock()
		select {
		case <-l.done:
			return l.refs, l.err
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// isDone says whether l's result is set.
func isDone(l *selectorListing) bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// listRefs reads namespace ns's exporters through list, decoding only
// those that are new or changed since known was read, and returns their
// refs and the refs to keep, by name.
func listRefs(ctx context.Context, list exporterLister, ns string, known map[string]*selectorRef) ([]*selectorRef, map[string]*selectorRef, error) {
	seen := map[string]bool{}
	// Chosen by metadata before anything is decoded: only the exporters
	// that are new or changed since they were read.
	exporters, err := list(ctx, ns, func(m metav1.Object) bool {
		seen[m.GetName()] = true
		ref, ok := known[m.GetName()]
		return !ok || ref.resourceVersion != m.GetResourceVersion() || ref.uid != m.GetUID()
	})
	if err != nil {
		return nil, nil, err
	}
	next := make(map[string]*selectorRef, len(seen))
	for name := range seen {
		if ref, ok := known[name]; ok {
			next[name] = ref // unchanged, or replaced below
		}
	}
	for i := range exporters {
		next[exporters[i].Name] = refOf(&exporters[i])
	}
	refs := make([]*selectorRef, 0, len(next))
	for _, ref := range next {
		refs = append(refs, ref)
	}
	return refs, next, nil
}
