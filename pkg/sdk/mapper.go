package sdk

import (
	"fmt"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/restmapper"
)

// discoveryMapper maps kinds to resources from a snapshot of the server's
// discovery, replaced whole when it is refreshed. No lock is held while
// discovery is read from the API server: a lookup uses the snapshot it
// finds, and only a lookup that needs the next snapshot (the first one, or a
// miss that refreshes) waits for it, on a channel. Before, client-go's
// DeferredDiscoveryRESTMapper read discovery under its lock, so every
// mapping (an admission webhook's reads among them) waited on a refresh that
// another caller's miss had started.
type discoveryMapper struct {
	client discovery.DiscoveryInterface
	snap   atomic.Pointer[mapperSnapshot]

	mu sync.Mutex // guards refreshing and lastErr; never held during a read of discovery
	// refreshing is closed when the refresh under way ends (nil: none).
	refreshing chan struct{}
	lastErr    error
	// waiting counts the callers waiting for the refresh under way (its
	// test sees both of two callers join one read).
	waiting atomic.Int32
}

// mapperSnapshot is one read of the server's discovery.
type mapperSnapshot struct {
	groups []*restmapper.APIGroupResources
	mapper meta.RESTMapper
}

func newDiscoveryMapper(client discovery.DiscoveryInterface) *discoveryMapper {
	return &discoveryMapper{client: client}
}

// RESTMapping maps gk at one of versions with the current snapshot, read
// first when there is none.
func (m *discoveryMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	s, err := m.current()
	if err != nil {
		return nil, err
	}
	return s.mapper.RESTMapping(gk, versions...)
}

// current returns the snapshot, reading the first one (and waiting for it)
// when there is none.
func (m *discoveryMapper) current() (*mapperSnapshot, error) {
	if s := m.snap.Load(); s != nil {
		return s, nil
	}
	if err := m.refresh(); err != nil {
		return nil, err
	}
	if s := m.snap.Load(); s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("sdk: discovery: no snapshot")
}

// refresh reads discovery again and waits for the read: one read at a time,
// shared by every caller that asks while it runs. The snapshot in use stays
// in use until the new one replaces it.
func (m *discoveryMapper) refresh() error {
	m.mu.Lock()
	ch := m.refreshing
	if ch == nil {
		ch = make(chan struct{})
		m.refreshing = ch
		go m.read(ch)
	}
	m.waiting.Add(1)
	m.mu.Unlock()
	<-ch
	m.waiting.Add(-1)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lastErr
}

// read reads discovery, stores a snapshot when it got one, and closes done.
// A partial read (an aggregated API down) still gives the groups it read.
func (m *discoveryMapper) read(done chan struct{}) {
	groups, err := restmapper.GetAPIGroupResources(m.client)
	if len(groups) > 0 {
		m.snap.Store(&mapperSnapshot{groups: groups, mapper: restmapper.NewDiscoveryRESTMapper(groups)})
		if discovery.IsGroupDiscoveryFailedError(err) {
			err = nil
		}
	}
	if err != nil {
		err = fmt.Errorf("sdk: discovery: %w", err)
	}
	m.mu.Lock()
	m.lastErr, m.refreshing = err, nil
	m.mu.Unlock()
	close(done)
}

// served reports what the current snapshot says of gvk: whether its group
// version is served (gvServed) and whether the kind is among its resources.
func (m *discoveryMapper) served(gvk schema.GroupVersionKind) (gvServed, kindServed bool) {
	s := m.snap.Load()
	if s == nil {
		return false, false
	}
	for _, g := range s.groups {
		if g.Group.Name != gvk.Group {
			continue
		}
		resources, ok := g.VersionedResources[gvk.Version]
		if !ok {
			return false, false
		}
		for _, r := range resources {
			if r.Kind == gvk.Kind {
				return true, true
			}
		}
		return true, false
	}
	return false, false
}
