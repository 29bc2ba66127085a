package operator

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	cachev1alpha1 "github.com/handlerkit/handlerkit/examples/memcached-operator/pkg/apis/cache/v1alpha1"
)

func TestSchemeKnowsMemcachedAndBuiltInKinds(t *testing.T) {
	s, err := Scheme()
	if err != nil {
		t.Fatal(err)
	}
	for _, gvk := range []schema.GroupVersionKind{
		cachev1alpha1.SchemeGroupVersion.WithKind("Memcached"),
		{Group: "apps", Version: "v1", Kind: "Deployment"},
		{Version: "v1", Kind: "Pod"},
	} {
		if !s.Recognizes(gvk) {
			t.Errorf("the scheme does not know %s", gvk)
		}
	}
}

func TestNewRefusesABadConfiguration(t *testing.T) {
	if _, err := New(nil, Config{}); err == nil {
		t.Error("New(nil config) succeeded")
	}
	// Lease mode needs a namespace for its Lease; outside a pod there is none.
	t.Setenv("POD_NAMESPACE", "")
	_, err := New(&rest.Config{Host: "https://127.0.0.1:1"}, Config{LeaderElection: true, LeaderElectionID: "Not A Name"})
	if err == nil || !strings.Contains(err.Error(), "leader") {
		t.Errorf("New with an invalid lease name: %v, want a leader election error", err)
	}
}
