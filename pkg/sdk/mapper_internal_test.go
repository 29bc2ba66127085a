package sdk

import (
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	k8stesting "k8s.io/client-go/testing"
)

// blockingDiscovery is a fake discovery whose reads after the first wait
// for release.
type blockingDiscovery struct {
	*fakediscovery.FakeDiscovery
	reads   atomic.Int32
	release chan struct{}
}

func (d *blockingDiscovery) ServerGroupsAndResources() ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	if d.reads.Add(1) > 1 {
		<-d.release
	}
	return d.FakeDiscovery.ServerGroupsAndResources()
}

// TestAMappingNeverWaitsOnARefreshItDidNotAskFor: while discovery is read
// again (a miss of another caller refreshes it), a mapping of a kind the
// snapshot knows answers from the snapshot at once; the refresh's own
// callers get the new snapshot, and the refresh is one read however many
// ask. Before, client-go's DeferredDiscoveryRESTMapper read discovery under
// its lock and every mapping waited for the read (issue 41: admissions must
// never wait on a lock held around an API call).
func TestAMappingNeverWaitsOnARefreshItDidNotAskFor(t *testing.T) {
	fake := &fakediscovery.FakeDiscovery{Fake: &k8stesting.Fake{}}
	fake.Resources = []*metav1.APIResourceList{{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "pods", Kind: "Pod", Namespaced: true}, {Name: "configmaps", Kind: "ConfigMap", Namespaced: true}}}}
	d := &blockingDiscovery{FakeDiscovery: fake, release: make(chan struct{})}
	m := newDiscoveryMapper(d)
	if _, err := m.RESTMapping(schema.GroupKind{Kind: "Pod"}, "v1"); err != nil {
		t.Fatalf("first mapping: %v", err)
	}

	// A miss's refresh, blocked in its read of discovery, asked for twice.
	refreshed := make(chan error, 2)
	go func() { refreshed <- m.refresh() }()
	go func() { refreshed <- m.refresh() }()
	// Both callers wait for the one read under way (under load the second
	// may otherwise start its own after the first ended: a third read).
	for d.reads.Load() < 2 || m.waiting.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	mapped := make(chan error, 1)
	go func() {
		_, err := m.RESTMapping(schema.GroupKind{Kind: "ConfigMap"}, "v1")
		mapped <- err
	}()
	select {
	case err := <-mapped:
		if err != nil {
			t.Fatalf("a known kind during the refresh: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a mapping of a known kind waited for a refresh it did not ask for")
	}
	if gv, kind := m.served(schema.GroupVersionKind{Version: "v1", Kind: "Secret"}); !gv || kind {
		t.Errorf("served(v1 Secret) = %v, %v before the refresh; want the group version served without the kind", gv, kind)
	}

	// The refresh brings a kind installed meanwhile, to both its callers,
	// in one read.
	fake.Resources[0].APIResources = append(fake.Resources[0].APIResources, metav1.APIResource{Name: "secrets", Kind: "Secret", Namespaced: true})
	close(d.release)
	for range 2 {
		if err := <-refreshed; err != nil {
			t.Fatalf("refresh: %v", err)
		}
	}
	if n := d.reads.Load(); n != 2 {
		t.Errorf("%d reads of discovery, want 2 (the first, and one refresh for both callers)", n)
	}
	if _, err := m.RESTMapping(schema.GroupKind{Kind: "Secret"}, "v1"); err != nil {
		t.Errorf("the kind the refresh brought: %v", err)
	}
}
