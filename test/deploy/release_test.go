package deploy

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/handlerkit/handlerkit/internal/manifest"
	"github.com/handlerkit/handlerkit/internal/release"
)

// TestReleaseManifestsApplyInOneGo: each single-file install of the release
// (internal/release.RenderManifest of deploy/ and of
// deploy/operator/cluster-wide, as `make release` writes them) applies to
// the API server object by object in the file's order, as `kubectl apply
// -f` applies a file, each one validated and admitted by the server, and
// then every object exists. Its Namespace comes before the objects in it.
func TestReleaseManifestsApplyInOneGo(t *testing.T) {
	env := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a, err := manifest.NewApplier(env.Config())
	if err != nil {
		t.Fatal(err)
	}
	const ref = "127.0.0.1:5000/handlerkit/jmx-agent:v0.0.0-test"
	for _, dir := range []string{"deploy", "deploy/operator/cluster-wide"} {
		data, err := release.RenderManifest(filepath.Join(repo, dir), ref)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := manifest.Decode(data)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		seen := map[string]bool{}
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				seen[o.GetName()] = true
			}
			if ns := o.GetNamespace(); ns != "" && !seen[ns] {
				t.Errorf("%s: %s %s comes before its Namespace %s", dir, o.GetKind(), o.GetName(), ns)
			}
			if err := applyOnceServed(ctx, a, "", []*unstructured.Unstructured{o}); err != nil {
				t.Fatalf("%s: %s %s: %v", dir, o.GetKind(), o.GetName(), err)
			}
		}
		if left, err := a.Missing(ctx, "", objs...); err != nil || len(left) != 0 {
			t.Fatalf("%s: after apply %d objects are missing (%v)", dir, len(left), err)
		}
	}
}
