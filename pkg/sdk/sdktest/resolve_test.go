package sdktest_test

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	"github.com/handlerkit/handlerkit/pkg/sdk/sdktest"
)

// Every built-in kind that a real API server serves gets the server's
// resource name and scope, so that NotFound errors name the same resource
// and cluster-scoped kinds ignore namespaces as they do there.
func TestBuiltinKindsHaveTheAPIServersResourcesAndScopes(t *testing.T) {
	env := cluster.Get(t)
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	_, lists, err := dc.ServerGroupsAndResources()
	if err != nil {
		t.Fatal(err)
	}
	c, err := sdktest.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range l.APIResources {
			gvk := gv.WithKind(r.Kind)
			if strings.Contains(r.Name, "/") || !clientgoscheme.Scheme.Recognizes(gvk) {
				continue
			}
			checked++
			gvr, namespaced, err := sdktest.MappingOf(c, gvk)
			if err != nil {
				t.Errorf("%s: %v", gvk, err)
				continue
			}
			if gvr.Resource != r.Name || namespaced != r.Namespaced {
				t.Errorf("%s: sdktest has resource %q, namespaced %v; the API server %q, namespaced %v", gvk, gvr.Resource, namespaced, r.Name, r.Namespaced)
			}
		}
	}
	if checked < 50 {
		t.Fatalf("only %d built-in kinds checked; discovery answered %d group versions", checked, len(lists))
	}
	t.Logf("%d built-in kinds agree", checked)
}
